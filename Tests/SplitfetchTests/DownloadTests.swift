import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// End-to-end downloads through the library against the in-process test server. Every file is
/// checked by SHA-256 against the content the server generates.
@Suite("Download against the test server")
struct DownloadTests {
    @Test("sizes 0, 1, a prime, and one not a multiple of the segment size",
          arguments: [0, 1, 1_000_003, (5 << 20) + 12_345] as [Int64])
    func sizes(size: Int64) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/out.bin"
                let (stats, digest) = try await download(server.url(size: size, seed: 7), to: path, options: testOptions())
                #expect(digest == SyntheticContent(size: size, seed: 7).sha256Hex())
                #expect(stats.size == size)
                #expect(fileSize(path) == size)
                #expect(!fileExists(path + ".part"))
                if size > 1 << 20 { #expect(stats.mode == .segmented && stats.connectionCount > 1) }
            }
        }
    }

    @Test(arguments: [ProbeMethod.get, .head])
    func serverThatIgnoresRangesGetsOneStream(probe: ProbeMethod) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3_000_017
                var options = testOptions()
                options.probe = probe
                let (stats, digest) = try await download(server.url(size: size, query: ["norange": "1"]), to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                #expect(stats.mode == .single)
                #expect(stats.connectionCount == 1)
                // GET-first, the probe's 200 is the stream: no body is fetched twice.
                if probe == .get { #expect(server.statistics.requests == 1 && server.statistics.bodyBytes == size) }
            }
        }
    }

    /// GET-first: no HEAD; the first request is the first segment's range and its body is kept,
    /// so no byte is asked for twice; a file below the minimum segment size is one request.
    @Test(arguments: [(200_000, 1), ((3 << 20) + 5, 4)] as [(Int64, Int)])
    func theFirstRequestIsTheFirstSegment(size: Int64, connections: Int) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let options = testOptions(connections: connections, minimumSegmentSize: 256 << 10)
                let (stats, digest) = try await download(server.url(size: size), to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                let requests = server.recordedRequests
                #expect(requests.allSatisfy { $0.method == "GET" })
                let ranges = requests.map { request in request.headers.first { $0.name == "range" }?.value ?? "" }
                #expect(ranges.first == (connections == 1 ? "bytes=0-" : "bytes=0-262143"))
                // The probe's body is the first segment: byte 0 is asked for once.
                #expect(ranges.filter { $0.hasPrefix("bytes=0-") }.count == 1)
                // Every request the server saw is counted. A split started just as its owner
                // finished may be stopped before its request leaves (slow runs, ThreadSanitizer):
                // counted, never seen.
                #expect(requests.count <= stats.requests)
                if size < options.minimumSegmentSize || connections == 1 { #expect(requests.count == 1 && stats.requests == 1) }
            }
        }
    }

    @Test func serverThatRefusesHeadIsProbedWithARangedGet() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 4_000_037
                let url = server.url(size: size, query: ["nohead": "1"])
                var options = testOptions()
                options.probe = .head
                let download = Download(url, to: FilePath(dir + "/f"), options: options)
                let probes = Task { () -> RemoteResource? in
                    for await event in download.events { if let r = event.resource { return r } }
                    return nil
                }
                let stats = try await download.run()
                let resource = await probes.value
                #expect(resource?.probeMethod == "range-get")
                #expect(resource?.size == size)
                #expect(stats.mode == .segmented)
                #expect(try sha256HexOfFile(atPath: dir + "/f") == SyntheticContent(size: size).sha256Hex())
            }
        }
    }

    @Test("no Content-Length: chunked or close-delimited, with and without ranges",
          arguments: ["chunked", "close"])
    func noContentLength(style: String) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 2_500_009
                // Ranges still work: the 206 total gives the size.
                let (s1, d1) = try await download(server.url(size: size, query: ["nolength": style]), to: dir + "/a", options: testOptions())
                #expect(d1 == SyntheticContent(size: size).sha256Hex())
                #expect(s1.mode == .segmented)
                // No ranges and no length: one stream to the end.
                let (s2, d2) = try await download(server.url(size: size, query: ["nolength": style, "norange": "1"]),
                                                  to: dir + "/b", options: testOptions())
                #expect(d2 == SyntheticContent(size: size).sha256Hex())
                #expect(s2.mode == .single)
                #expect(s2.size == size)
            }
        }
    }

    @Test func slowConnectionsAreOvertakenBySplits() async throws {
        // Every 4th connection runs 16 times slower; idle connections must take over its range.
        try await withServer(.init(rateLimit: 4 << 20, slowEvery: 4, slowFactor: 16)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 8 << 20
                var options = testOptions(connections: 4, minimumSegmentSize: 1 << 20)
                options.minimumSplitSize = 64 << 10
                // HEAD first: four planned ranges on four connections, the fourth slow. (GET-first,
                // the probe's connection splits anyway once its range is in, whatever the speeds.)
                options.probe = .head
                let (stats, digest) = try await download(server.url(size: size), to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                #expect(stats.splits > 0)
                #expect(stats.requests > stats.connectionCount)
            }
        }
    }

    @Test func existingOutputIsLeftAlone() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/keep.txt"
                write("precious\n", to: path)
                let error = await failure(server.url(size: 1000), to: path, options: testOptions())
                #expect(error?.code == .outputExists)
                #expect(read(path) == "precious\n")
                var options = testOptions()
                options.allowOverwrite = true
                let (_, digest) = try await download(server.url(size: 1000), to: path, options: options)
                #expect(digest == SyntheticContent(size: 1000).sha256Hex())
            }
        }
    }

    @Test func notFoundIsAnHTTPErrorAndLeavesNoFiles() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/missing"
                let error = await failure(server.baseURL + "/nothing/here", to: path, options: testOptions())
                #expect(error?.code == .http)
                #expect(error?.httpStatus == 404)
                #expect(error?.message.contains("/nothing/here") == true)
                #expect(!fileExists(path))
                #expect(!fileExists(path + ".part"))
            }
        }
    }

    @Test func refusedConnectionIsANetworkError() async throws {
        // Bind a server to learn a free port, then stop it so nothing listens there.
        let server = try await TestServer()
        let url = server.url(size: 10)
        await server.shutdown()
        try await withTemporaryDirectory { dir in
            var options = testOptions()
            options.retry.maximumRetries = 1
            let error = await failure(url, to: dir + "/f", options: options)
            #expect(error?.code == .network)
            #expect(error?.message.contains("127.0.0.1") == true)
            #expect(!fileExists(dir + "/f.part"))
        }
    }

    @Test(arguments: ["file:///etc/passwd", "gopher://127.0.0.1/x", "scp://127.0.0.1/x", "not a url", "http://", "ftp://"])
    func urlsOfOtherSchemesAreUsageErrors(url: String) async throws {
        try await withTemporaryDirectory { dir in
            let error = await failure(url, to: dir + "/f", options: testOptions())
            #expect(error?.code == .usage)
        }
    }

    @Test func cancellingTheTaskPausesPromptlyAndKeepsTheData() async throws {
        try await withServer(.init(rateLimit: 64 << 10)) { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/slow.bin"
                let download = Download(server.url(size: 64 << 20), to: FilePath(path), options: testOptions(connections: 4))
                let task = Task { try await download.run() }
                // Wait (bounded by the event stream's end) until bytes arrive, then cancel.
                for await event in download.events {
                    if let p = event.progress, p.bytesWritten > 0 { break }
                }
                // That the stop is prompt (every transfer aborted at once, no waiting for a stall
                // timeout) is the core's decision, shown by DownloadMachineTests'
                // cancelStopsEveryTransferThenSavesAFinalCheckpoint on a virtual clock; here the
                // 64 KiB/s server would take over 15 minutes, so an ignored cancel cannot pass.
                task.cancel()
                do {
                    _ = try await task.value
                    Issue.record("cancelled download completed")
                } catch let error as DownloadError {
                    #expect(error.code == .interrupted)
                }
                #expect(!fileExists(path))
                #expect(fileExists(path + ".part") && fileExists(path + ".part.json"))
            }
        }
    }

    @Test func progressEventsAndStatisticsAddUp() async throws {
        try await withServer(.init(rateLimit: 8 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 6 << 20
                let download = Download(server.url(size: size), to: FilePath(dir + "/f"), options: testOptions(connections: 4))
                let collector = Task { () -> (Int, DownloadStatistics?, [String]) in
                    var progressCount = 0
                    var final: DownloadStatistics?
                    var badMaps: [String] = []
                    for await event in download.events {
                        switch event.kind {
                        case .progress:
                            progressCount += 1
                            // The segment map tiles the file in order; each range's written
                            // part lies inside it; connections are among the progress's.
                            let progress = event.progress!
                            let map = progress.segments
                            let ids = Set(progress.connections.map(\.id))
                            let tiles = map.first?.range.lowerBound == 0 && map.last?.range.upperBound == size
                                && zip(map, map.dropFirst()).allSatisfy { $0.range.upperBound == $1.range.lowerBound }
                            let inside = map.allSatisfy { $0.range.contains($0.written) || $0.written == $0.range.upperBound }
                            let owners = map.allSatisfy { $0.connection.map(ids.contains) ?? true }
                            let sum = map.reduce(0) { $0 + $1.written - $1.range.lowerBound }
                            if !(tiles && inside && owners && sum <= progress.bytesWritten + (1 << 20)) { badMaps.append("\(map)") }
                        case .finished: final = event.statistics
                        default: break
                        }
                    }
                    return (progressCount, final, badMaps)
                }
                let stats = try await download.run()
                let (progressCount, final, badMaps) = await collector.value
                #expect(progressCount > 0)
                #expect(badMaps.isEmpty)
                #expect(final == stats)
                #expect(stats.connections.reduce(0) { $0 + $1.bytes } == size)
                #expect(stats.requests == stats.connections.reduce(0) { $0 + $1.requests })
                #expect(try sha256HexOfFile(atPath: dir + "/f") == SyntheticContent(size: size).sha256Hex())
            }
        }
    }
}

@Suite("Sessions")
struct SessionTests {
    /// `transferred()` answers once the bytes are in, for a download that succeeds and for one
    /// that fails, and at once after `run()` returned; the file is whole when `run()` returns.
    // The limit guards against a hang. Every test starts at once and they share two threads:
    // under ThreadSanitizer on a loaded machine this 0.05 s test once took over 3 minutes.
    @Test(.timeLimit(.minutes(10))) func transferredAnswersForEveryEnding() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 300_000
                let good = Download(server.url(size: size), to: FilePath(dir + "/good"), options: testOptions())
                async let waited: Void = good.transferred()
                _ = try await good.run()
                await waited
                await good.transferred()
                #expect(try sha256HexOfFile(atPath: dir + "/good") == SyntheticContent(size: size).sha256Hex())
                let bad = Download(server.baseURL + "/missing", to: FilePath(dir + "/bad"), options: testOptions())
                async let failed: Void = bad.transferred()
                _ = try? await bad.run()
                await failed
                #expect(!fileExists(dir + "/bad"))
            }
        }
    }

    @Test func manyFilesReuseTheSessionsConnections() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let session = Session()
                var retries = 0
                for i in 0..<12 {
                    let size = Int64(100_000 + i)
                    let download = Download(server.url(size: size, name: "f\(i)"), to: FilePath(dir + "/f\(i)"),
                                            options: testOptions(connections: 1), session: session)
                    // A request retried (a probe timed out on a loaded machine) asks again.
                    let retried = Task { () -> Int in
                        var count = 0
                        for await event in download.events { if event.kind == .retry { count += 1 } }
                        return count
                    }
                    let stats = try await download.run()
                    retries += await retried.value
                    #expect(stats.size == size)
                    #expect(try sha256HexOfFile(atPath: dir + "/f\(i)") == SyntheticContent(size: size).sha256Hex())
                }
                let s = server.statistics
                #expect(s.requests == 12 + retries)  // GET-first: the probe's body is the file
                #expect(s.connections <= 2)     // over one kept-alive connection
                await session.shutdown()
            }
        }
    }

    @Test func shutdownJoinsTheTransportAndLaterDownloadsAreRefused() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let session = Session()
                _ = try await Download(server.url(size: 1000), to: FilePath(dir + "/a"), options: testOptions(connections: 1),
                                       session: session).run()
                await session.shutdown()
                await session.shutdown()  // a second call returns at once
                let requestsBefore = server.statistics.requests
                await #expect(throws: DownloadError.self) {
                    try await Download(server.url(size: 1000), to: FilePath(dir + "/b"), options: testOptions(connections: 1),
                                       session: session).run()
                }
                #expect(server.statistics.requests == requestsBefore)
                #expect(!fileExists(dir + "/b") && !fileExists(dir + "/b.part"))
            }
        }
    }
}
