import NIOConcurrencyHelpers

/// Runs `work` in a task of its own and waits for it at most `seconds`: its result, or `nil`
/// when the time ran out (the task is then cancelled, and goes on unawaited). For calls to a
/// database that may not answer at all, where a decision or a stop cannot wait. Cancelling the
/// caller cancels `work` (a call still waiting for a connection gives up then), and the wait
/// goes on for its answer within the same limit.
func within<T: Sendable>(seconds: Double, _ work: @escaping @Sendable () async throws -> T) async -> Result<T, any Error>? {
    let answered = NIOLockedValueBox(false)
    let running = NIOLockedValueBox<Task<Void, Never>?>(nil)
    return await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>?, Never>) in
            @Sendable func answer(_ value: Result<T, any Error>?) {
                if answered.withLockedValue({ done in defer { done = true }; return !done }) { continuation.resume(returning: value) }
            }
            let worker = Task {
                do { answer(.success(try await work())) } catch { answer(.failure(error)) }
            }
            running.withLockedValue { $0 = worker }
            // Cancelled before the worker was there for the handler to cancel.
            if Task.isCancelled { worker.cancel() }
            let timer = Task {
                try? await Task.sleep(for: .seconds(seconds))
                answer(nil)
                worker.cancel()
            }
            // Work that ended in time stops the timer (no task left asleep per call).
            Task {
                _ = await worker.result
                timer.cancel()
            }
        }
    } onCancel: {
        running.withLockedValue { $0 }?.cancel()
    }
}

/// As ``within(seconds:_:)`` for work with no result: whether it ended in time.
func within(seconds: Double, _ work: @escaping @Sendable () async -> Void) async -> Bool {
    await within(seconds: seconds) { () async throws -> Bool in
        await work()
        return true
    } != nil
}
