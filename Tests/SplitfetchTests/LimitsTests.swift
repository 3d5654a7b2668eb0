@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// The limits a caller sets on a download: a rate (``RateLimit``) and a time
/// (``DownloadOptions/maximumTime``).
@Suite("Limits")
struct LimitsTests {
    /// The bucket on a clock of our own: a burst, then debt paid back at the rate, and a burst
    /// earned before a paused transfer wakes.
    @Test func theBudgetLendsABurstThenMakesTransfersWaitForItsDebt() throws {
        let limit = RateLimit(bytesPerSecond: 1_000_000)
        let start = ContinuousClock.now
        #expect(limit.burst == 200_000)
        // A full bucket takes any piece, and goes into debt by what exceeds it.
        #expect(limit.take(400_000, now: start) == nil)
        // 200,000 bytes of debt and a 200,000 burst at 1 MB/s: 0.4 s to wait.
        let wait = try #require(limit.take(1, now: start))
        #expect(abs(wait.seconds - 0.4) < 1e-6)
        // Half of the debt paid back: still in debt, 0.3 s left.
        let later = try #require(limit.take(1, now: start + .milliseconds(100)))
        #expect(abs(later.seconds - 0.3) < 1e-6)
        // Paid back: the next piece is taken.
        #expect(limit.take(50_000, now: start + .milliseconds(201)) == nil)
        // Tokens never pile up beyond the burst, however long the budget sat unused.
        #expect(limit.take(200_000, now: start + .seconds(60)) == nil)
        #expect(limit.take(1, now: start + .seconds(60)) != nil)
    }

    /// A changed rate holds from the change on: the debt is paid at the new rate, and the burst
    /// is the new rate's.
    @Test func aChangedRateHoldsFromTheChangeOn() throws {
        let limit = RateLimit(bytesPerSecond: 4_000_000)
        let start = ContinuousClock.now
        #expect(limit.take(1_000_000, now: start) == nil)  // 200,000 of debt beyond the 800,000 burst
        limit.setBytesPerSecond(1_000_000, now: start)
        #expect(limit.bytesPerSecond == 1_000_000 && limit.burst == 200_000)
        // The debt and the new burst are paid at 1 MB/s now: 0.4 s, not 0.25 s.
        let wait = try #require(limit.take(1, now: start))
        #expect(abs(wait.seconds - 0.4) < 1e-6)
        // Up to 8 MB/s: ten idle seconds earn the new burst, 1,600,000, and no more; 200,000 of
        // debt and a burst are then paid in 0.225 s.
        limit.setBytesPerSecond(8_000_000, now: start + .milliseconds(201))
        #expect(limit.burst == 1_600_000)
        #expect(limit.take(1_800_000, now: start + .seconds(10)) == nil)
        let after = try #require(limit.take(1, now: start + .seconds(10)))
        #expect(abs(after.seconds - 0.225) < 1e-6)
    }

    /// A download's budget within a queue's: a piece waits while either is in debt, and is taken
    /// from both; a budget without a cap of its own only passes pieces to its parent.
    @Test func aBudgetWithinAParentWaitsForTheDeeperDebt() throws {
        let parent = RateLimit(bytesPerSecond: 1_000_000)
        let child = RateLimit(bytesPerSecond: 4_000_000, within: parent)
        let free = RateLimit(unlimitedWithin: parent)
        let start = ContinuousClock.now
        #expect(child.take(400_000, now: start) == nil)  // both take it: parent 200,000 in debt
        #expect(child.bytesPerSecond == 4_000_000 && free.bytesPerSecond == nil)
        // The parent's debt and burst (0.4 s at 1 MB/s) is the longer wait, for both children.
        let wait = try #require(child.take(1, now: start))
        #expect(abs(wait.seconds - 0.4) < 1e-6)
        #expect(free.take(1, now: start) == wait)
        // Lifted on the parent: the child's own budget still holds (800,000 burst less 400,000).
        parent.setBytesPerSecond(nil, now: start)
        #expect(child.take(400_000, now: start) == nil)
        #expect(child.take(1, now: start) != nil)
        #expect(free.take(10_000_000, now: start) == nil && free.take(1, now: start) == nil)
        // A cap given to a budget without one starts with a full burst.
        free.setBytesPerSecond(1_000_000, now: start)
        #expect(free.take(200_000, now: start) == nil && free.take(1, now: start) != nil)
    }

    /// Over a whole download, the budget holds: the bytes could not have arrived faster than the
    /// rate allows (burst included), and every byte is right.
    @Test func aLimitedDownloadIsNeverFasterThanItsRate() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3 << 20
                var options = testOptions(connections: 4)
                options.rateLimit = RateLimit(bytesPerSecond: 4 << 20)
                let started = ContinuousClock.now
                let statistics = try await Download(server.url(size: size), to: FilePath(dir + "/f.bin"), options: options).run()
                let elapsed = (ContinuousClock.now - started).seconds
                #expect(statistics.size == size)
                #expect(try sha256HexOfFile(atPath: dir + "/f.bin") == SyntheticContent(size: size).sha256Hex())
                // 3 MiB at 4 MiB/s less a burst of 0.4 MiB: at least 0.65 s (a lower bound: load only adds).
                #expect(elapsed >= 0.65, "3 MiB took \(elapsed) s under a 4 MiB/s cap")
            }
        }
    }

    /// The time limit stops the download as a cancellation does: its data and manifest stay, and
    /// a rerun without the limit finishes it.
    @Test func theTimeLimitStopsTheDownloadAndKeepsItsData() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 512 << 10
                // Two segments at 64 KiB/s: 4 s at best, far beyond the limit.
                let url = server.url(size: size, query: ["rate": String(64 << 10)])
                var options = testOptions(connections: 4)
                options.maximumTime = .seconds(1.5)
                let download = Download(url, to: FilePath(dir + "/f.bin"), options: options)
                let wrote = Task { () -> Bool in
                    var wrote = false
                    for await event in download.events { if let p = event.progress, p.bytesWritten > 0 { wrote = true } }
                    return wrote
                }
                do throws(DownloadError) {
                    _ = try await download.run()
                    Issue.record("a download of 4 s finished within 1.5 s")
                } catch {
                    #expect(error.code == .timedOut)
                    #expect(error.message.contains("time limit of 1.5 s"))
                }
                // Data written before the limit stays for the rerun. (On a machine so loaded that
                // nothing arrived in 1.5 s, nothing may be left behind either.)
                let dataKept = await wrote.value
                // The quick checkpoints' slot is there once a second checkpoint was saved.
                let entries = directoryEntries(dir).filter { $0 != "f.bin.part.quick.json" }
                if dataKept {
                    #expect(entries == ["f.bin.part", "f.bin.part.json"])
                } else {
                    #expect(entries.isEmpty || entries == ["f.bin.part", "f.bin.part.json"], "\(entries)")
                }
                let rerun = Download(url, to: FilePath(dir + "/f.bin"), options: testOptions(connections: 4))
                let statistics = try await rerun.run()
                if dataKept { #expect(statistics.resumedBytes > 0) }
                #expect(try sha256HexOfFile(atPath: dir + "/f.bin") == SyntheticContent(size: size).sha256Hex())
            }
        }
    }
}
