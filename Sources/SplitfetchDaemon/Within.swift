import NIOConcurrencyHelpers

/// Runs `work` in a task of its own and waits for it at most `seconds`: its result, or `nil`
/// when the time ran out (the task is then cancelled, and goes on unawaited). For calls to a
/// database that may not answer at all, where a decision or a stop cannot wait.
func within<T: Sendable>(seconds: Double, _ work: @escaping @Sendable () async throws -> T) async -> Result<T, any Error>? {
    let answered = NIOLockedValueBox(false)
    return await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>?, Never>) in
        @Sendable func answer(_ value: Result<T, any Error>?) {
            if answered.withLockedValue({ done in defer { done = true }; return !done }) { continuation.resume(returning: value) }
        }
        let worker = Task {
            do { answer(.success(try await work())) } catch { answer(.failure(error)) }
        }
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
}

/// As ``within(seconds:_:)`` for work with no result: whether it ended in time.
func within(seconds: Double, _ work: @escaping @Sendable () async -> Void) async -> Bool {
    await within(seconds: seconds) { () async throws -> Bool in
        await work()
        return true
    } != nil
}
