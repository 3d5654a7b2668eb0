import FoundationEssentials
import NIOConcurrencyHelpers
@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// The live queue: downloads added, paused, resumed, removed and re-prioritised while it runs,
/// followed by several subscribers.
@Suite("Download queue")
struct QueueTests {
    /// A subscriber's record: every event but progress, as `id state` or `id kind`, in order,
    /// and how many progress events it got.
    final class Follower: Sendable {
        let seen = NIOLockedValueBox<(lifecycle: [String], progress: Int)>(([], 0))
        /// The state changes alone, in order.
        let states = NIOLockedValueBox<[String]>([])

        func note(_ event: QueueEvent) {
            seen.withLockedValue { seen in
                if let state = event.state {
                    seen.lifecycle.append("\(event.id) \(state)")
                    states.withLockedValue { $0.append("\(event.id) \(state)") }
                } else if let kind = event.event?.kind {
                    if kind == .progress { seen.progress += 1 } else { seen.lifecycle.append("\(event.id) \(kind)") }
                }
            }
        }
    }

    /// A gate the slow subscriber waits at until the queue is idle.
    final class Gate: Sendable {
        private let state = NIOLockedValueBox<(open: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

        func wait() async {
            await withCheckedContinuation { continuation in
                let open = state.withLockedValue { state -> Bool in
                    if !state.open { state.waiter = continuation }
                    return state.open
                }
                if open { continuation.resume() }
            }
        }

        func open() {
            state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
                state.open = true
                defer { state.waiter = nil }
                return state.waiter
            }?.resume()
        }
    }

    static func size(of index: Int) -> Int64 { (256 << 10) + Int64(index) * 37_001 }

    /// 50 files in three waves into a running queue, with pauses, resumes, a removal of a
    /// running download and of a waiting one, new priorities and positions, and a higher
    /// maximum; three subscribers, one of which reads nothing (after its first five events)
    /// until the queue is idle. Every file kept has the right SHA-256, every subscriber saw
    /// the same lifecycle, and the downloads never waited for the slow one.
    @Test func fiftyFilesInThreeWaves() async throws {
        try await withServer(.init(rateLimit: 4 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let queue = DownloadQueue(maximumActive: 4)
                let followers = [Follower(), Follower(), Follower(), Follower()]
                let gate = Gate()
                let readers = [queue.subscribe(), queue.subscribe(), queue.subscribe(keepingProgress: 4),
                               queue.subscribe(statesOnly: true)].enumerated().map { index, events in
                    Task {
                        var count = 0
                        for await event in events {
                            followers[index].note(event)
                            count += 1
                            if index == 2 && count == 5 { await gate.wait() }
                        }
                    }
                }
                var options = testOptions(connections: 4)
                options.minimumSegmentSize = 64 << 10
                func add(_ index: Int, priority: Int = 0, at position: Int? = nil) throws {
                    let url = server.url(size: Self.size(of: index), name: "f\(index).bin", seed: UInt64(index + 1))
                    try queue.add(url, to: FilePath("\(dir)/f\(index).bin"), options: options, id: "f\(index)",
                                  priority: priority, at: position)
                }
                // Wave 1: 20 files; three paused (running or not), a running one and a waiting
                // one removed, one raised to the front.
                for index in 0..<20 { try add(index) }
                for id in ["f0", "f1", "f2"] { #expect(queue.pause(id)) }
                #expect(queue.remove("f3"))
                #expect(queue.remove("f19"))
                #expect(queue.setPriority("f17", 10))
                // Wave 2: 15 more, one of them first in line; the paused ones resumed.
                for index in 20..<35 { try add(index, at: index == 34 ? 0 : nil) }
                #expect(queue.snapshot("f34")?.position == 0)
                for id in ["f0", "f1", "f2"] { #expect(queue.resume(id)) }
                // Wave 3: 15 more, and more at once.
                for index in 35..<50 { try add(index, priority: index == 49 ? 5 : 0) }
                queue.setMaximumActive(6)
                #expect(queue.maximumActive == 6)
                #expect(throws: DownloadError.self) { try queue.add(server.url(size: 1), to: FilePath("\(dir)/x"), id: "f7") }

                await queue.waitUntilIdle()
                // The slow subscriber has read five events so far: the queue finished without it.
                #expect(followers[2].seen.withLockedValue { $0.lifecycle.count + $0.progress } == 5)
                let snapshots = queue.snapshots()
                await queue.shutdown()
                gate.open()
                for reader in readers { await reader.value }

                #expect(snapshots.count == 50)
                for snapshot in snapshots {
                    let index = Int(snapshot.id.dropFirst())!
                    let path = "\(dir)/f\(index).bin"
                    if index == 3 || index == 19 {
                        #expect(snapshot.state == .removed)
                        #expect(!fileExists(path))
                    } else {
                        #expect(snapshot.state == .complete, "\(snapshot.id): \(snapshot.state) \(snapshot.error?.message ?? "")")
                        #expect(snapshot.statistics?.size == Self.size(of: index))
                        #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: Self.size(of: index), seed: UInt64(index + 1)).sha256Hex())
                    }
                }
                let lifecycles = followers.map { $0.seen.withLockedValue { $0.lifecycle } }
                #expect(lifecycles[0] == lifecycles[1])
                #expect(lifecycles[0] == lifecycles[2], "the slow subscriber lost no lifecycle event")
                // The states-only subscriber saw every state change, in the same order, and nothing else.
                #expect(followers[3].states.withLockedValue { $0 } == followers[0].states.withLockedValue { $0 })
                #expect(lifecycles[3] == followers[3].states.withLockedValue { $0 } && followers[3].seen.withLockedValue { $0.progress } == 0)
                #expect(lifecycles[0].count > lifecycles[3].count)
                // Each kept file: added, started, probed, transfers started, finished, complete.
                for index in 0..<50 where index != 3 && index != 19 {
                    let own = lifecycles[0].filter { $0.hasPrefix("f\(index) ") }.map { $0.split(separator: " ")[1] }
                    #expect(own.first == "waiting" && own.last == "complete", "f\(index): \(own)")
                    #expect(own.contains("finished") && own.contains("probed"), "f\(index): \(own)")
                }
                // The slow one kept at most four progress events beyond the five it read first.
                #expect(followers[2].seen.withLockedValue { $0.progress } <= 4 + 5)
                #expect(followers[0].seen.withLockedValue { $0.progress } > 0)
            }
        }
    }

    /// A paused download stops and keeps its data; resumed, it fetches only what it lacked. A
    /// snapshot taken while it runs shows its connections.
    @Test func aPausedDownloadResumesWhereItsDataIs() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 4 << 20
                let queue = DownloadQueue(maximumActive: 2)
                let path = dir + "/f.bin"
                let id = try queue.add(server.url(size: size), to: FilePath(path), options: testOptions(connections: 4))
                #expect(id.count == 16)
                let own = queue.subscribe(to: id)
                var running: DownloadSnapshot?
                for await event in own {
                    if let progress = event.event?.progress, progress.bytesWritten > 256 << 10 {
                        running = queue.snapshot(id)
                        break
                    }
                }
                #expect(running?.state == .active)
                #expect(running?.progress?.connections.isEmpty == false)
                #expect(queue.pause(id))
                await queue.waitUntilIdle()
                #expect(queue.snapshot(id)?.state == .paused)
                #expect(fileExists(path + ".part") && !fileExists(path))
                #expect(queue.resume(id))
                await queue.waitUntilIdle()
                let done = try #require(queue.snapshot(id))
                #expect(done.state == .complete)
                let statistics = try #require(done.statistics)
                #expect(statistics.resumedBytes > 0)
                #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: size).sha256Hex())
                await queue.shutdown()
            }
        }
    }

    /// A running download discarded is stopped and forgotten when `discard` returns: its data is
    /// kept, and the same identifier added again resumes it.
    @Test func aDiscardedDownloadIsGoneWhenDiscardReturnsAndResumesWhenAddedAgain() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 4 << 20
                let queue = DownloadQueue(maximumActive: 2)
                let path = dir + "/d.bin"
                let id = try queue.add(server.url(size: size), to: FilePath(path), options: testOptions(connections: 4))
                for await event in queue.subscribe(to: id) {
                    if let progress = event.event?.progress, progress.bytesWritten > 256 << 10 { break }
                }
                #expect(await queue.discard(id))
                #expect(queue.snapshot(id) == nil)
                #expect(!(await queue.discard(id)))
                #expect(fileExists(path + ".part") && !fileExists(path))
                _ = try queue.add(server.url(size: size), to: FilePath(path), options: testOptions(connections: 4), id: id)
                await queue.waitUntilIdle()
                let done = try #require(queue.snapshot(id))
                #expect(done.state == .complete)
                #expect(try #require(done.statistics).resumedBytes > 0)
                #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: size).sha256Hex())
                await queue.shutdown()
            }
        }
    }

    /// One at a time: when the next download starts, the one before it has already reported
    /// every byte, so no snapshot shows two downloads short of their size at once.
    @Test func aDownloadReportsEveryByteBeforeTheNextTakesItsSlot() async throws {
        try await withServer(.init(rateLimit: 2 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let sizes: [Int64] = [600_000, 700_001, 500_003]
                let queue = DownloadQueue(maximumActive: 1)
                let events = queue.subscribe(keepingProgress: 1_000)
                for (index, size) in sizes.enumerated() {
                    try queue.add(server.url(size: size, name: "s\(index).bin", seed: UInt64(index + 7)), to: FilePath("\(dir)/s\(index).bin"),
                                  options: testOptions(connections: 2), id: "s\(index)")
                }
                let reader = Task { () -> [String] in
                    var latest: [String: Int64] = [:]
                    var seenAtStart: [String] = []
                    for await event in events {
                        if let progress = event.event?.progress { latest[event.id] = progress.bytesWritten }
                        if event.state == .active, let index = Int(event.id.dropFirst()), index > 0 {
                            seenAtStart.append("s\(index - 1): \(latest["s\(index - 1)"] ?? -1) of \(sizes[index - 1])")
                        }
                        if event.state == .complete && event.id == "s\(sizes.count - 1)" { break }
                    }
                    return seenAtStart
                }
                await queue.waitUntilIdle()
                let seenAtStart = await reader.value
                #expect(seenAtStart == (1..<sizes.count).map { "s\($0 - 1): \(sizes[$0 - 1]) of \(sizes[$0 - 1])" })
                for (index, size) in sizes.enumerated() {
                    #expect(try sha256HexOfFile(atPath: "\(dir)/s\(index).bin") == SyntheticContent(size: size, seed: UInt64(index + 7)).sha256Hex())
                }
                await queue.shutdown()
            }
        }
    }

    /// A failed download says why, and is tried again when resumed.
    @Test func aFailedDownloadSaysWhyAndCanBeTriedAgain() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let queue = DownloadQueue()
                let id = try queue.add(server.baseURL + "/nothing/here", to: FilePath(dir + "/f"),
                                       options: testOptions())
                await queue.waitUntilIdle()
                let snapshot = try #require(queue.snapshot(id))
                #expect(snapshot.state == .failed && snapshot.error?.httpStatus == 404)
                #expect(queue.resume(id))
                await queue.waitUntilIdle()
                #expect(queue.snapshot(id)?.state == .failed)
                #expect(queue.forget(id) && queue.snapshots().isEmpty)
                await queue.shutdown()
                #expect(throws: DownloadError.self) { try queue.add(server.url(size: 1), to: FilePath(dir + "/g")) }
            }
        }
    }

    /// A waiting download has no budget of its own until it is given a rate or starts; its rate
    /// can be set and lifted meanwhile, and the snapshot says which holds.
    @Test func aWaitingDownloadsOwnRateCanBeSetAndLifted() async throws {
        let queue = DownloadQueue(maximumActive: 1)
        let id = try queue.add("http://127.0.0.1:9/w.bin", to: "/nonexistent/w.bin", paused: true)
        #expect(queue.snapshot(id)?.bytesPerSecondLimit == nil)
        #expect(queue.setBytesPerSecond(nil, for: id))
        #expect(queue.snapshot(id)?.bytesPerSecondLimit == nil)
        #expect(queue.setBytesPerSecond(4096, for: id))
        #expect(queue.snapshot(id)?.bytesPerSecondLimit == 4096)
        #expect(queue.setBytesPerSecond(nil, for: id))
        #expect(queue.snapshot(id)?.bytesPerSecondLimit == nil)
        #expect(!queue.setBytesPerSecond(4096, for: "no-such-download"))
        let limited = try queue.add("http://127.0.0.1:9/l.bin", to: "/nonexistent/l.bin", paused: true, bytesPerSecond: 1000,
                                    optionsAtStart: { _ in DownloadOptions() })
        #expect(queue.snapshot(limited)?.bytesPerSecondLimit == 1000)
        await queue.shutdown()
    }

    /// A queue event's JSON form is the download event's with an `id`, or a state change.
    @Test func queueEventsRoundTripThroughJSON() throws {
        let events = [
            QueueEvent(id: "a", state: .paused),
            QueueEvent(id: "b", event: .split(connection: 2, range: 10..<20)),
            QueueEvent(id: "c", event: .failed(DownloadError(.http, "HTTP 404", httpStatus: 404))),
            QueueEvent(id: "d", event: .warning(DownloadWarning(.digestsDisagree, "differs", fields: ["source": "x"]))),
        ]
        for event in events {
            let data = try JSONEncoder().encode(event)
            #expect(try JSONDecoder().decode(QueueEvent.self, from: data) == event)
        }
    }
}
