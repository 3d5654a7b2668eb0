@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// Any number of programs following one download: each subscriber at its own pace, none slowing
/// the download, and a slow one losing only its own oldest progress events.
@Suite("Event subscriptions")
struct EventSubscriptionTests {
    static func progress(_ bytes: Int64) -> DownloadEvent {
        .progress(DownloadProgress(bytesWritten: bytes, totalBytes: 100, bytesPerSecond: 1, elapsed: .seconds(1), connections: []))
    }

    /// A subscriber that reads nothing until the end keeps every lifecycle event, in order, and
    /// only the newest progress events of its allowance.
    @Test func aSlowSubscriberKeepsEveryLifecycleEventAndItsNewestProgress() async {
        let broadcast = EventBroadcast()
        let slow = broadcast.subscribe(keepingProgress: 3)
        broadcast.emit(.warning(DownloadWarning(.digestsDisagree, "first")))
        for bytes in Int64(1)...10 { broadcast.emit(Self.progress(bytes)) }
        broadcast.emit(.split(connection: 1, range: 0..<10))
        for bytes in Int64(11)...20 { broadcast.emit(Self.progress(bytes)) }
        broadcast.emit(.failed(DownloadError(.http, "gone")))
        broadcast.finish()
        var seen: [String] = []
        for await event in DownloadEvents(subscriber: slow) {
            switch event.kind {
            case .progress: seen.append("p\(event.progress!.bytesWritten)")
            case .warning: seen.append("warning")
            case .split: seen.append("split")
            case .failed: seen.append("failed")
            default: seen.append("other")
            }
        }
        #expect(seen == ["warning", "split", "p18", "p19", "p20", "failed"])
    }

    @Test func aSubscriberAfterTheEndGetsAnEndedStream() async {
        let broadcast = EventBroadcast()
        broadcast.finish()
        var count = 0
        for await _ in DownloadEvents(subscriber: broadcast.subscribe(keepingProgress: 1)) { count += 1 }
        #expect(count == 0)
    }

    /// Three subscribers to one download: two read as it runs, one reads nothing until it has
    /// finished (so it cannot have slowed it). Each sees the whole lifecycle, once.
    @Test func threeSubscribersFollowOneDownload() async throws {
        try await withServer(.init(rateLimit: 8 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = (6 << 20) + 3
                var options = testOptions(connections: 4, minimumSegmentSize: 512 << 10)
                options.progressInterval = .milliseconds(20)
                let download = Download(server.url(size: size), to: FilePath(dir + "/f"), options: options)
                let subscriptions = [download.subscribe(), download.subscribe(), download.subscribe(keepingProgress: 2)]
                func lifecycle(_ events: DownloadEvents) async -> (kinds: [String], progress: Int) {
                    var kinds: [String] = []
                    var progress = 0
                    for await event in events {
                        switch event.kind {
                        case .progress: progress += 1
                        case .probed: kinds.append("probed")
                        case .started: kinds.append("started")
                        case .finished: kinds.append("finished")
                        case .failed: kinds.append("failed")
                        default: break
                        }
                    }
                    return (kinds, progress)
                }
                async let first = lifecycle(subscriptions[0])
                async let second = lifecycle(subscriptions[1])
                let statistics = try await download.run()
                #expect(statistics.size == size)
                let slow = await lifecycle(subscriptions[2])
                for (kinds, progress) in [await first, await second] {
                    #expect(kinds == ["probed", "started", "finished"])
                    #expect(progress > 2)
                }
                #expect(slow.kinds == ["probed", "started", "finished"])
                #expect(slow.progress <= 2)
                #expect(try sha256HexOfFile(atPath: dir + "/f") == SyntheticContent(size: size).sha256Hex())
            }
        }
    }

    /// A queue's subscriber for ends only gets each file's last event, once per file, and one
    /// for states and ends gets both; one for everything gets those and more.
    @Test func aSubscriberForEndsOnlyGetsOneEventPerFile() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let queue = DownloadQueue(maximumActive: 2)
                let streams = [queue.subscribe(endsOnly: true), queue.subscribe(statesOnly: true, endsOnly: true),
                               queue.subscribe(keepingProgress: 1024)]
                let readers = streams.map { events in
                    Task {
                        var seen: [QueueEvent] = []
                        for await event in events { seen.append(event) }
                        return seen
                    }
                }
                let ids = (0..<5).map { "f\($0)" }
                for (index, id) in ids.enumerated() {
                    try queue.add(server.url(size: 100_000 + Int64(index), name: "\(id).bin", seed: UInt64(index)),
                                  to: FilePath("\(dir)/\(id).bin"), options: testOptions(connections: 1), id: id)
                }
                try queue.add(server.baseURL + "/nothing/here", to: FilePath("\(dir)/gone.bin"),
                              options: testOptions(connections: 1), id: "gone")
                await queue.finish()
                await queue.shutdown()
                let (ends, both, all) = (await readers[0].value, await readers[1].value, await readers[2].value)
                #expect(ends.allSatisfy { $0.event?.isLast == true })
                #expect(ends.map(\.id).sorted() == (ids + ["gone"]).sorted())
                #expect(ends.first { $0.id == "gone" }?.event?.kind == .failed)
                #expect(both.filter { $0.event != nil } .map(\.id).sorted() == ends.map(\.id).sorted())
                #expect(both.allSatisfy { $0.state != nil || $0.event?.isLast == true })
                #expect(both.filter { $0.state != nil }.count == all.filter { $0.state != nil }.count)
                #expect(all.count > both.count, "everything is more than states and ends")
            }
        }
    }
}
