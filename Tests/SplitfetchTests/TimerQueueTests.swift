@testable import Splitfetch
import NIOConcurrencyHelpers
import Testing

/// The timer thread: actions run in the order of their deadlines, cancelled ones never; a
/// deadline earlier than the one the thread waits for wakes it; cancelled entries do not pile up;
/// the progress ticker stops for good when cancelled.
@Suite("Timer queue")
struct TimerQueueTests {
    /// Waits (at most `seconds`) until `condition` holds; returns whether it did.
    func eventually(within seconds: Int = 20, _ condition: () -> Bool) async -> Bool {
        let limit = ContinuousClock.now + .seconds(seconds)
        while !condition() {
            if ContinuousClock.now > limit { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }

    @Test func actionsRunInDeadlineOrderAndCancelledOnesNever() async {
        let timers = TimerQueue(name: "sf-test-timer")
        let log = NIOLockedValueBox<[String]>([])
        let now = ContinuousClock.now
        timers.schedule(at: now + .milliseconds(30)) { log.withLockedValue { $0.append("a") } }
        timers.schedule(at: now + .milliseconds(10)) { log.withLockedValue { $0.append("b") } }
        let cancelled = timers.schedule(at: now + .milliseconds(15)) { log.withLockedValue { $0.append("x") } }
        timers.schedule(at: now + .milliseconds(20)) { log.withLockedValue { $0.append("c") } }
        timers.cancel(cancelled)
        #expect(await eventually { log.withLockedValue { $0.count } == 3 })
        // The cancelled deadline came before the last one, so it would have run by now.
        #expect(log.withLockedValue { $0 } == ["b", "c", "a"])
        #expect(timers.pending == 0)
    }

    /// While the thread waits for a deadline an hour away, one due now runs at once: were the
    /// thread not woken, it would run only after the hour, and the bounded wait would fail.
    @Test func anEarlierDeadlineWakesTheThreadWaitingForALaterOne() async {
        let timers = TimerQueue(name: "sf-test-timer")
        let ran = NIOLockedValueBox(false)
        let later = timers.schedule(after: .seconds(3600)) {}
        // Let the thread reach its wait for the hour.
        #expect(await eventually { timers.waitsForDeadline })
        timers.schedule(after: .zero) { ran.withLockedValue { $0 = true } }
        #expect(await eventually { ran.withLockedValue { $0 } })
        timers.cancel(later)
        #expect(timers.pending == 0)
    }

    @Test func cancelledDeadlinesDoNotPileUp() {
        let timers = TimerQueue(name: "sf-test-timer")
        let tokens = (0..<1000).map { _ in timers.schedule(after: .seconds(3600)) {} }
        #expect(timers.heapCount == 1000)
        for token in tokens { timers.cancel(token) }
        #expect(timers.pending == 0)
        #expect(timers.heapCount <= 64)
    }

    /// The ticker emits progress at its interval, and once cancelled leaves nothing scheduled: no
    /// tick can follow (one under way when it was cancelled may still end).
    @Test func theProgressTickerTicksUntilCancelled() async {
        let timers = TimerQueue(name: "sf-test-timer")
        let ticks = NIOLockedValueBox<[DownloadProgress]>([])
        let counter = ConnectionCounters(id: 0)
        counter.bytes.store(500, ordering: .relaxed)
        let ticker = ProgressTicker(interval: .milliseconds(5), emit: { event in
            if let progress = event.progress { ticks.withLockedValue { $0.append(progress) } }
        }, counters: [counter], total: 1000, base: 100, timers: timers)
        #expect(await eventually { ticks.withLockedValue { $0.count } >= 3 })
        ticker.cancel()
        #expect(await eventually { timers.pending == 0 })
        let first = ticks.withLockedValue { $0[0] }
        #expect(first.bytesWritten == 600 && first.totalBytes == 1000 && first.connections.count == 1)
    }
}
