import NIOConcurrencyHelpers
import PostgresNIO

extension PostgresJobStore {
    /// Runs `body` on a connection of the pool, and ends it with ``ConnectionLost`` should that
    /// connection close before `body` returns.
    ///
    /// postgres-nio (1.33.2) was seen to leave a query sent as the server shut down without an
    /// answer for ever: its connection closed, and the query neither returned nor threw. A
    /// daemon writes one change at a time, so that one write held every later one, and the
    /// daemon's adds and the start of every job it claimed waited until it was killed (the
    /// fleet's kill loop with a database outage). What `body` did may or may not have been made.
    func onConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let watch = watch
        return try await client.withConnection { connection in try await watch.until(connection, body) }
    }
}

/// The connection to the queue's database closed before a request on it was answered: what it
/// asked for may or may not have been made.
struct ConnectionLost: Error, CustomStringConvertible {
    var description: String { "the connection to the queue's database closed before it answered" }
}

/// The requests under way on each connection, ended together when it closes. One callback per
/// connection (on its close future, which cannot let go of a callback): a request adds itself to
/// its connection's entry and removes itself when it ends, so a long-lived connection carries
/// nothing for the requests it answered.
///
/// Thread safety: any thread; the state is under a lock.
final class ConnectionWatch: Sendable {
    private struct State {
        /// Per connection watched (its close not seen yet): how to end each request under way.
        var requests: [ObjectIdentifier: [UInt64: @Sendable () -> Void]] = [:]
        var nextID: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())

    /// Requests under way, on all connections (for tests).
    var underWay: Int { state.withLockedValue { $0.requests.values.reduce(0) { $0 + $1.count } } }

    /// Runs `body` on `connection`; it ends with ``ConnectionLost`` if the connection closes
    /// first (`body`'s task is cancelled then, and its answer, should one come, is dropped).
    func until<T: Sendable>(_ connection: PostgresConnection,
                            _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let key = ObjectIdentifier(connection)
        let answered = NIOLockedValueBox(false)
        let work = NIOLockedValueBox<Task<Void, Never>?>(nil)
        // The caller's cancellation reaches `body`, which runs in a task of its own.
        return try await withTaskCancellationHandler {
            try await run(connection, key: key, answered: answered, work: work, body)
        } onCancel: {
            work.withLockedValue { $0 }?.cancel()
        }
    }

    private func run<T: Sendable>(_ connection: PostgresConnection, key: ObjectIdentifier, answered: NIOLockedValueBox<Bool>,
                                  work: NIOLockedValueBox<Task<Void, Never>?>,
                                  _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            @Sendable func answer(_ result: Result<T, any Error>) {
                if answered.withLockedValue({ done in defer { done = true }; return !done }) { continuation.resume(with: result) }
            }
            let (id, first) = state.withLockedValue { state -> (UInt64, Bool) in
                defer { state.nextID += 1 }
                let first = state.requests[key] == nil
                state.requests[key, default: [:]][state.nextID] = {
                    answer(.failure(ConnectionLost()))
                    work.withLockedValue { $0 }?.cancel()
                }
                return (state.nextID, first)
            }
            if first {
                // Fires at once for a connection closed already.
                connection.closeFuture.whenComplete { [self] _ in
                    let ends = state.withLockedValue { $0.requests.removeValue(forKey: key) } ?? [:]
                    for end in ends.values { end() }
                }
            }
            let task = Task {
                let result: Result<T, any Error>
                do { result = .success(try await body(connection)) } catch { result = .failure(error) }
                state.withLockedValue { state in
                    state.requests[key]?[id] = nil
                    // The entry stays while the connection is open (its callback is registered):
                    // an empty one costs little, and the callback would not be registered again.
                }
                answer(result)
            }
            work.withLockedValue { $0 = task }
            // Answered (the connection closed) or cancelled before the task was there to cancel.
            if answered.withLockedValue({ $0 }) || Task.isCancelled { task.cancel() }
        }
    }
}
