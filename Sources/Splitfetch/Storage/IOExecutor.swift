import NIOConcurrencyHelpers

/// The process's threads for blocking file work, off Swift's cooperative pool.
///
/// File-system calls can block for milliseconds (`fdatasync`, `fallocate` of a large file, the
/// `fsync` of a directory, `unlink` of a large partial file). On the cooperative pool, which has
/// one thread per core, such a call would hold a thread every other task needs. Downloads give
/// their file work to an ``IOQueue`` instead; all queues share these few threads, started on
/// first use and kept for the life of the process (as NIO's `NIOThreadPool.singleton` is), so a
/// thousand small downloads do not start a thousand threads.
///
/// Thread safety: `enqueue` may be called from any thread or task.
final class IOExecutor: Sendable {
    /// Four threads: enough that one download's `fsync` does not hold up the others' writes of
    /// manifests, few enough to cost nothing when idle.
    static let shared = IOExecutor(threads: 4, name: "splitfetch-io")

    private let lock = ConditionLock()
    /// Guarded by `lock`.
    nonisolated(unsafe) private var jobs: [@Sendable () -> Void] = []
    /// Guarded by `lock`; the index of the first job not yet taken (the array is compacted when
    /// it empties, so taking a job is O(1)).
    nonisolated(unsafe) private var next = 0

    init(threads: Int, name: String) {
        for _ in 0..<max(1, threads) {
            startThread(name: name) { [self] in work() }
        }
    }

    /// Runs `job` on one of the threads, after the jobs enqueued before it have started.
    func enqueue(_ job: @escaping @Sendable () -> Void) {
        lock.lock()
        jobs.append(job)
        lock.unlock()
        // One job, one thread: waking them all would have each of them contend for the lock and
        // sleep again (four context switches per job, measured).
        lock.signal()
    }

    private func work() {
        while true {
            lock.lock()
            while next == jobs.count { lock.wait() }
            let job = jobs[next]
            next += 1
            if next == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                next = 0
            }
            lock.unlock()
            job()
        }
    }
}

/// One download's file work, run one job at a time in the order given, on the shared
/// ``IOExecutor``: creating and preallocating the partial file, every checkpoint, the final sync
/// and rename. So checkpoints never overlap and never race the rename.
///
/// Thread safety: `submit` and `run` may be called from any thread or task.
final class IOQueue: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        /// Whether a drain of this queue is enqueued or running on the executor.
        var draining = false
    }

    private let executor: IOExecutor
    /// A pthread lock, visible to ThreadSanitizer.
    private let state = NIOLockedValueBox(State())

    init(executor: IOExecutor = .shared) {
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
    func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
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
