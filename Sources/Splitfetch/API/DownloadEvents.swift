import DequeModule
import NIOConcurrencyHelpers

/// One subscriber's stream of a download's events (``Download/subscribe(keepingProgress:)``).
///
/// The download never waits for it. Each subscriber has a buffer of its own: when it falls
/// behind, it loses its own oldest ``DownloadEvent/progress(_:)`` events beyond its allowance,
/// never another kind (probed, started, retries, splits, warnings, the end), and never anything
/// another subscriber sees. The stream ends after the download's last event.
///
/// Thread safety: `Sendable`; iterate it from one task.
public struct DownloadEvents: AsyncSequence, Sendable {
    public typealias Element = DownloadEvent
    let subscriber: EventSubscriber<DownloadEvent>

    public struct AsyncIterator: AsyncIteratorProtocol {
        let subscriber: EventSubscriber<DownloadEvent>

        public mutating func next() async -> DownloadEvent? {
            await subscriber.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(subscriber: subscriber) }
}

/// One subscriber's buffer and its waiting reader: a download's (``DownloadEvents``) or a
/// queue's (``QueueEvents``).
///
/// Thread safety: the state is behind one lock; the reader's continuation is resumed outside it.
final class EventSubscriber<Element: Sendable>: Sendable {
    private struct State {
        var buffer: Deque<Element> = []
        var progressHeld = 0
        var finished = false
        var waiter: CheckedContinuation<Element?, Never>?
    }

    /// Progress events held at most; older ones are dropped first.
    let keepingProgress: Int
    /// Whether an event is progress, which may be dropped; no other is.
    let isProgress: @Sendable (Element) -> Bool
    private let state = NIOLockedValueBox(State())

    init(keepingProgress: Int, isProgress: @escaping @Sendable (Element) -> Bool) {
        self.keepingProgress = max(1, keepingProgress)
        self.isProgress = isProgress
    }

    /// Hands `event` over: at once to a waiting reader, or into the buffer.
    func deliver(_ event: Element) {
        let waiter: CheckedContinuation<Element?, Never>? = state.withLockedValue { state in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.buffer.append(event)
            if isProgress(event) {
                state.progressHeld += 1
                if state.progressHeld > keepingProgress,
                   let oldest = state.buffer.firstIndex(where: isProgress) {
                    state.buffer.remove(at: oldest)
                    state.progressHeld -= 1
                }
            }
            return nil
        }
        waiter?.resume(returning: event)
    }

    /// No event follows: the reader gets what is buffered, then the end.
    func finish() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Element?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.buffer.isEmpty ? state.waiter : nil
        }
        waiter?.resume(returning: nil)
    }

    /// The next event, waiting for one; `nil` after the last, or when the reading task is
    /// cancelled.
    func next() async -> Element? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Element?, Never>) in
                let ready: Element?? = state.withLockedValue { state in
                    if !state.buffer.isEmpty {
                        let event = state.buffer.removeFirst()
                        if isProgress(event) { state.progressHeld -= 1 }
                        return .some(event)
                    }
                    if state.finished || Task.isCancelled { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state -> CheckedContinuation<Element?, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: nil)
        }
    }
}

/// A download's subscribers: every event goes to each of them.
///
/// Thread safety: the list is behind one lock; events are handed over outside it.
final class EventBroadcast: Sendable {
    private let state = NIOLockedValueBox<(subscribers: [EventSubscriber<DownloadEvent>], finished: Bool)>(([], false))

    /// A new subscriber, which gets the events from now on (none after the end).
    func subscribe(keepingProgress: Int) -> EventSubscriber<DownloadEvent> {
        let subscriber = EventSubscriber<DownloadEvent>(keepingProgress: keepingProgress, isProgress: { $0.kind == .progress })
        let finished = state.withLockedValue { state -> Bool in
            if !state.finished { state.subscribers.append(subscriber) }
            return state.finished
        }
        if finished { subscriber.finish() }
        return subscriber
    }

    func emit(_ event: DownloadEvent) {
        for subscriber in state.withLockedValue({ $0.subscribers }) { subscriber.deliver(event) }
    }

    func finish() {
        let subscribers = state.withLockedValue { state -> [EventSubscriber<DownloadEvent>] in
            state.finished = true
            defer { state.subscribers = [] }
            return state.subscribers
        }
        for subscriber in subscribers { subscriber.finish() }
    }
}
