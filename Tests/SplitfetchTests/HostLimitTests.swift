@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A session's per-host cap, enforced across all of its downloads.
@Suite("Per-host cap")
struct HostLimitTests {
    /// 200 downloads from one host, 8 connections (and segments) each, 16 at a time, in a session that allows 8
    /// connections to the host: the server never sees more than 8 connections open at once, and
    /// every file is whole.
    @Test func twoHundredDownloadsNeverOpenMoreThanTheCap() async throws {
        // 200 here; under ThreadSanitizer (SPLITFETCH_UNDER_TSAN, set by scripts/test) 40 of the
        // same, through the same paths, for the races: 200 cost TSan over three minutes of CPU
        // that the concurrent suites' timeouts need.
        let count = underThreadSanitizer ? 40 : 200
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let session = Session(maximumConnectionsPerHost: 8)
                // Small files of 8 segments each: the requests are what matters here, and the bytes
                // stay few so that the run is light beside the other suites (ThreadSanitizer).
                var options = testOptions(connections: 8, minimumSegmentSize: 2 << 10)
                options.timeouts.stall = .seconds(60)  // a download waiting for slots is not stalled
                let sizes = (0..<count).map { Int64(16 << 10) + Int64($0) * 97 }  // 16 to 35 KiB
                let files = sizes.enumerated().map { index, size in
                    BatchFile(server.url(size: size, name: "f\(index).bin", seed: UInt64(index + 1)),
                              to: FilePath(dir + "/f\(index).bin"), options: options)
                }
                var ended = 0
                for await file in session.download(files, jobs: 16) {
                    ended += 1
                    let statistics = try file.result.get()
                    #expect(statistics.size == sizes[file.index])
                    #expect(try sha256HexOfFile(atPath: file.destination.string)
                        == SyntheticContent(size: sizes[file.index], seed: UInt64(file.index + 1)).sha256Hex())
                }
                let (waits, peakInUse) = session.limiter!.counts
                await session.shutdown()
                #expect(ended == count)
                // The session's limiter did it (libcurl's own per-host limit would hold the count
                // too, but with requests queued inside libcurl that look stalled).
                #expect(waits > 0 && peakInUse == 8, "waits \(waits), peak in use \(peakInUse)")
                let peak = server.statistics.peakConnections
                #expect(peak >= 2 && peak <= 8, "at most 8 connections at once, saw \(peak)")
            }
        }
    }

    /// A cap raised while a download runs: the requests waiting for a slot go at once, and the
    /// file is whole.
    @Test func aRaisedCapLetsTheWaitingRequestsGo() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 4 << 20
                let session = Session(maximumConnectionsPerHost: 1)
                var options = testOptions(connections: 4)
                options.timeouts.stall = .seconds(60)  // requests waiting for a slot are not stalled
                let download = Download(server.url(size: size), to: FilePath(dir + "/f.bin"), options: options, session: session)
                let events = download.subscribe()
                let work = Task { try await download.run() }
                for await event in events where (event.progress?.bytesWritten ?? 0) > 0 { break }
                #expect(session.limiter!.counts.peakInUse == 1)
                #expect(session.setMaximumConnectionsPerHost(4))
                #expect(session.maximumConnectionsPerHost == 4)
                let statistics = try await work.value
                let (_, peakInUse) = session.limiter!.counts
                await session.shutdown()
                #expect(peakInUse > 1, "peak in use \(peakInUse) after the cap was raised to 4")
                #expect(statistics.size == size)
                #expect(try sha256HexOfFile(atPath: dir + "/f.bin") == SyntheticContent(size: size).sha256Hex())
            }
        }
    }

    /// A session made without a cap keeps none.
    @Test func aSessionWithoutACapHasNoneToChange() async {
        let session = Session()
        #expect(!session.setMaximumConnectionsPerHost(4))
        #expect(session.maximumConnectionsPerHost == nil)
        await session.shutdown()
    }

    /// Without the cap the same batch opens more: the count above is the cap's doing.
    @Test func withoutTheCapTheSameBatchOpensMore() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let session = Session()
                let options = testOptions(connections: 8, minimumSegmentSize: 2 << 10)
                let files = (0..<32).map { index in
                    // At 256 KiB/s a connection, transfers overlap even on an idle machine.
                    BatchFile(server.url(size: 32 << 10, name: "g\(index).bin", query: ["rate": "262144"]), to: FilePath(dir + "/g\(index).bin"), options: options)
                }
                for await file in session.download(files, jobs: 16) {
                    let digest = try sha256HexOfFile(atPath: file.destination.string)
                    #expect(digest == SyntheticContent(size: 32 << 10).sha256Hex())
                }
                await session.shutdown()
                #expect(server.statistics.peakConnections > 8)
            }
        }
    }

    /// A waiting request that is cancelled gets no slot and holds none; the slot goes on.
    /// A slot taken without waiting (the identity check's, before a download's own connections
    /// start): only while a new request would get one at once, never ahead of a waiting request
    /// or of files of a batch still to begin.
    @Test func aFreeSlotIsTakenOnlyWhenNothingWaitsForIt() async throws {
        let limiter = HostLimiter(cap: 2)
        let (a, b) = (limiter.newDownload(), limiter.newDownload())
        #expect(limiter.takeFreeSlot(host: "fresh:80", download: a))  // a host no request used yet
        #expect(limiter.takeFreeSlot(host: "fresh:80", download: a))
        #expect(!limiter.takeFreeSlot(host: "fresh:80", download: b))  // the cap
        let waiting = Task { await limiter.acquire(host: "fresh:80", download: b) }
        var turns = 0
        while limiter.counts.waits == 0 && turns < 100_000 {  // until it waits, bounded
            turns += 1
            await Task.yield()
        }
        try #require(limiter.counts.waits == 1)
        limiter.release(host: "fresh:80", download: a)  // to the waiting request, not a new taker
        #expect(await waiting.value)
        #expect(!limiter.takeFreeSlot(host: "fresh:80", download: a))
        limiter.release(host: "fresh:80", download: b)
        limiter.expect(host: "fresh:80", 1)  // a file of a batch comes first
        #expect(!limiter.takeFreeSlot(host: "fresh:80", download: a))
        limiter.expect(host: "fresh:80", -1)
        #expect(limiter.takeFreeSlot(host: "fresh:80", download: a))
        #expect(limiter.room(host: "fresh:80") == 0)
    }

    @Test func aCancelledWaitGivesUpItsPlace() async throws {
        let limiter = HostLimiter(cap: 1)
        let (a, b, c) = (limiter.newDownload(), limiter.newDownload(), limiter.newDownload())
        #expect(await limiter.acquire(host: "h:80", download: a))
        let waited = Task { await limiter.acquire(host: "h:80", download: b) }
        let next = Task { await limiter.acquire(host: "h:80", download: c) }
        waited.cancel()
        #expect(await waited.value == false)
        limiter.release(host: "h:80", download: a)
        #expect(await next.value == true)
        limiter.release(host: "h:80", download: c)
        #expect(await limiter.acquire(host: "h:80", download: a))
    }

    /// Under a cap of one, a host that speaks HTTP/2 serves any number of streams on its one
    /// connection, which holds the one slot until its last stream ends; before the host is known
    /// to speak it, and for a request that may not use it, each request takes a slot.
    @Test(.timeLimit(.minutes(1))) func theStreamsOfOneHTTP2ConnectionCountOnce() async throws {
        let limiter = HostLimiter(cap: 1)
        let (a, b, c) = (limiter.newDownload(), limiter.newDownload(), limiter.newDownload())
        // Not known yet: a slot, as any request.
        let first = await limiter.acquire(host: "h:443", download: a, http2: true)
        #expect(first == .slot && limiter.room(host: "h:443") == 0)
        limiter.release(first!, host: "h:443", download: a)
        limiter.learnedHTTP2(host: "h:443")
        // Known: the first stream takes the slot for the connection, the others join it at once.
        var streams: [(HostLimiter.Hold, Int)] = []
        for download in [a, b, c, a, b] {
            let hold = try #require(await limiter.acquire(host: "h:443", download: download, http2: true))
            #expect(hold == .stream)
            streams.append((hold, download))
        }
        #expect(limiter.room(host: "h:443") == 0)
        for (hold, download) in streams.dropLast() { limiter.release(hold, host: "h:443", download: download) }
        #expect(limiter.room(host: "h:443") == 0, "the connection holds the slot while a stream runs")
        // A request that may not be a stream waits for the slot.
        let ranged = Task { await limiter.acquire(host: "h:443", download: c, http2: false) }
        limiter.release(streams.last!.0, host: "h:443", download: streams.last!.1)
        #expect(await ranged.value == .slot)
        limiter.release(.slot, host: "h:443", download: c)
        #expect(limiter.room(host: "h:443") == 1)
    }
}
