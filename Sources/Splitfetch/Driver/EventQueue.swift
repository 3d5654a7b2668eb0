import NIOConcurrencyHelpers

/// A many-producer, one-consumer queue of events for a download's driver.
///
/// Unlike `AsyncStream`, waiting on it does not end when the waiting task is cancelled: after a
/// cancellation the driver must still hear every transfer end before it may close the file.
final class EventQueue<Event: Sendable>: Sendable {
    private struct State {
        var buffer: [Event] = []
        var head = 0
        var waiter: CheckedContinuation<Event, Never>?
    }

    private let state = NIOLockedValueBox(State())

    /// Adds an event; wakes the consumer if it waits.
    func post(_ event: Event) {
        let waiter = state.withLockedValue { s -> CheckedContinuation<Event, Never>? in
            if let waiter = s.waiter {
                s.waiter = nil
                return waiter
            }
            s.buffer.append(event)
            return nil
        }
        waiter?.resume(returning: event)
    }

    /// The oldest event, waiting for one if there is none. One consumer at a time.
    func next() async -> Event {
        await withCheckedContinuation { continuation in
            let ready = state.withLockedValue { s -> Event? in
                guard s.head < s.buffer.count else {
                    precondition(s.waiter == nil, "EventQueue has one consumer")
                    s.waiter = continuation
                    return nil
                }
                let event = s.buffer[s.head]
                s.head += 1
                if s.head == s.buffer.count {
                    s.buffer.removeAll(keepingCapacity: true)
                    s.head = 0
                }
                return event
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }
}
