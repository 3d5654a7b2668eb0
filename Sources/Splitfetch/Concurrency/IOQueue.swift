import NIOConcurrencyHelpers

/// One download's file work, run one job at a time in the order given, on the shared
/// ``IOExecutor``: creating and preallocating the partial file, every checkpoint, the final sync
/// and rename. So checkpoints never overlap and never race the rename.
///
/// Thread safety: `submit` and `run` may be called from any thread or task. (`package`: the
/// daemon runs its file checks on one too.)
package final class IOQueue: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        /// Whether a drain of this queue is enqueued or running on the executor.
        var draining = false
    }

    private let executor: IOExecutor
    /// A pthread lock, visible to ThreadSanitizer.
    private let state = NIOLockedValueBox(State())

    package convenience init() { self.init(executor: .shared) }

    init(executor: IOExecutor) {
        self.executor = executor
    }

    /// Queues `job`; it runs after every job submitted before it has finished.
    func submit(_ job: @escaping @Sendable () -> Void) {
        let startDrain = state.withLockedValue { state in
            state.jobs.append(job)
            defer { state.draining = true }
            return !state.draining
        }
        if startDrain { executor.enqueue { [self] in drain() } }
    }

    /// Runs `body` on the queue and returns its result.
    package func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            submit { continuation.resume(returning: Result { () throws(E) -> T in try body() }) }
        }
        return try result.get()
    }

    /// Runs the queued jobs in order until none is left. Only one drain runs at a time.
    private func drain() {
        while true {
            let batch: [@Sendable () -> Void] = state.withLockedValue { state in
                let batch = state.jobs
                state.jobs = []
                if batch.isEmpty { state.draining = false }
                return batch
            }
            if batch.isEmpty { return }
            for job in batch { job() }
        }
    }
}
