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
