import NIOConcurrencyHelpers
@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// A cap of `slots` per host, counted as another process would see it.
private final class CountingCap: SharedHostCap {
    struct Counts {
        var inUse = 0
        var peak = 0
        var acquired = 0
        var released = 0
        var early = 0
        var waiting: [CheckedContinuation<Bool, Never>] = []
    }
    let slots: Int
    let counts = NIOLockedValueBox(Counts())

    init(slots: Int) { self.slots = slots }

    func acquire(host: String) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let granted = counts.withLockedValue { counts -> Bool in
                guard counts.inUse < slots else {
                    counts.waiting.append(continuation)
                    return false
                }
                counts.inUse += 1
                counts.acquired += 1
                counts.peak = max(counts.peak, counts.inUse)
                return true
            }
            if granted { continuation.resume(returning: true) }
        }
    }

    func release(host: String, early: Bool) {
        let next = counts.withLockedValue { counts -> CheckedContinuation<Bool, Never>? in
            counts.released += 1
            if early { counts.early += 1 }
            guard !counts.waiting.isEmpty else {
                counts.inUse -= 1
                return nil
            }
            counts.acquired += 1  // the slot passes on
            return counts.waiting.removeFirst()
        }
        next?.resume(returning: true)
    }
}

@Suite("Shared per-host cap")
struct SharedHostCapTests {
    /// 30 downloads of one request each (the GET-first probe, which may go over HTTP/2), 6 at
    /// a time, under a shared cap of 3, from a server 20 ms away: every request holds a slot, the slots are used at once (requests do not wait for
    /// each other's connections), every slot comes back, no connection outlives its request,
    /// and every file is whole.
    @Test func everyRequestHoldsASharedSlotAndClosesItsConnection() async throws {
        try await withServer(.init(latencyMilliseconds: 20)) { server in
            try await withTemporaryDirectory { dir in
                let cap = CountingCap(slots: 3)
                let session = Session(maximumConnectionsPerHost: 3, sharedHostCap: cap)
                var options = testOptions(connections: 1)
                options.timeouts.stall = .seconds(60)
                let sizes = (0..<30).map { Int64(32 << 10) + Int64($0) * 131 }
                let files = sizes.enumerated().map { index, size in
                    BatchFile(server.url(size: size, name: "s\(index).bin", seed: UInt64(index + 7)),
                              to: FilePath(dir + "/s\(index).bin"), options: options)
                }
                for await file in session.download(files, jobs: 6) {
                    _ = try file.result.get()
                    #expect(try sha256HexOfFile(atPath: file.destination.string)
                        == SyntheticContent(size: sizes[file.index], seed: UInt64(file.index + 7)).sha256Hex())
                }
                await session.shutdown()
                let counts = cap.counts.withLockedValue { $0 }
                #expect(counts.peak == 3)
                #expect(counts.inUse == 0 && counts.acquired == counts.released)
                #expect(counts.acquired == 30, "one slot per request: \(counts.acquired)")
                // Each connection closed with its request: as many connections as requests. (The
                // server's own count of open connections may lag a slot passed on at once: the
                // fleet's cap gives a slot back only after a grace, checked by fleet-kill-loop.)
                let statistics = server.statistics
                #expect(statistics.connections == statistics.requests, "\(statistics.connections) connections, \(statistics.requests) requests")
                // The slots held were used at once: libcurl did not hold requests back waiting to
                // multiplex on a connection that closes after its request.
                #expect(statistics.peakConnections >= 2, "peak \(statistics.peakConnections)")
                #expect(counts.early == 0, "every response ended: \(counts.early) early of \(counts.released)")
            }
        }
    }
}
