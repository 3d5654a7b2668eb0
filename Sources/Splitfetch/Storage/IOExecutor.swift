import NIOConcurrencyHelpers

/// The process's threads for blocking file work, off Swift's cooperative pool.
///
/// File-system calls can block for milliseconds (`fdatasync`, `fallocate` of a large file, the
/// `fsync` of a directory, `unlink` of a large partial file). On the cooperative pool, which has
/// one thread per core, such a call would hold a thread every other task needs. Downloads give
/// their file work to an ``IOQueue`` instead; all queues share these threads, kept for the life of
/// the process (as NIO's `NIOThreadPool.singleton` is), so a thousand small downloads do not start
/// a thousand threads.
///
/// Threads start as the work needs them: a job that finds no thread waiting starts one more, up
/// to ``maximumThreads``. So a file's creation never queues behind other files' syncs: with eight
/// files at once, up to eight `fdatasync`s block together (the file system commits them together,
/// too), where a fixed four threads made the next files' creation wait for them.
///
/// Thread safety: `enqueue` may be called from any thread or task.
final class IOExecutor: Sendable {
    static let shared = IOExecutor(maximumThreads: 32, name: "splitfetch-io")

    /// The most threads it starts.
    let maximumThreads: Int
    private let name: String
    private let lock = ConditionLock()
    /// Guarded by `lock`.
    nonisolated(unsafe) private var jobs: [@Sendable () -> Void] = []
    /// Guarded by `lock`; the index of the first job not yet taken (the array is compacted when
    /// it empties, so taking a job is O(1)).
    nonisolated(unsafe) private var next = 0
    /// Guarded by `lock`: threads started, and how many of them wait for a job.
    nonisolated(unsafe) private var started = 0
    nonisolated(unsafe) private var idle = 0

    init(maximumThreads: Int, name: String) {
        self.maximumThreads = max(1, maximumThreads)
        self.name = name
    }

    /// Runs `job` on one of the threads, after the jobs enqueued before it have started.
    func enqueue(_ job: @escaping @Sendable () -> Void) {
        lock.lock()
        jobs.append(job)
        // A thread that was signalled but has not woken yet still counts as idle until it takes
        // a job, so a burst of jobs may start a thread more than it needed: never one too few.
        let startThread = idle < jobs.count - next && started < maximumThreads
        if startThread { started += 1 }
        lock.unlock()
        if startThread {
            Splitfetch.startThread(name: name) { [self] in work() }
        } else {
            // One job, one thread: waking them all would have each of them contend for the lock
            // and sleep again (four context switches per job, measured).
            lock.signal()
        }
    }

    /// How many threads it has started (for tests).
    var threads: Int {
        lock.lock()
        defer { lock.unlock() }
        return started
    }

    private func work() {
        while true {
            lock.lock()
            while next == jobs.count {
                idle += 1
                lock.wait()
                idle -= 1
            }
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
