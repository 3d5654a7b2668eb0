import Synchronization

/// A thread of its own for blocking file work, run one job at a time in the order given.
///
/// File-system calls can block for milliseconds (`fdatasync`, `fallocate` of a large file, the
/// `fsync` of a directory). On Swift's cooperative pool, which has one thread per core, such a
/// call holds a thread the other downloads of a ``Session`` need. Each download gives its file
/// work to one of these: creating and preallocating the partial file, every checkpoint, and the
/// final sync and rename, so checkpoints never overlap and never race the rename.
///
/// Thread safety: `submit`, `run` and `close` may be called from any thread or task.
final class IOThread: Sendable {
    private struct Queue {
        var jobs: [@Sendable () -> Void] = []
        var closed = false
    }

    private let lock = ConditionLock()
    /// Guarded by `lock`.
    nonisolated(unsafe) private var queue = Queue()

    /// Starts the thread; `name` shows in `top -H` and `perf` (first 15 bytes).
    init(name: String) {
        startThread(name: name) { [self] in loop() }
    }

    /// Queues `job`; it runs after every job queued before it. Ignored after ``close()``.
    func submit(_ job: @escaping @Sendable () -> Void) {
        lock.lock()
        if !queue.closed { queue.jobs.append(job) }
        lock.signal()
        lock.unlock()
    }

    /// Runs `body` on the thread and returns its result.
    func run<T: Sendable, E: Error>(_ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
        let result: Result<T, E> = await withCheckedContinuation { continuation in
            submit { continuation.resume(returning: Result { () throws(E) -> T in try body() }) }
        }
        return try result.get()
    }

    /// Ends the thread once the jobs queued so far have run.
    func close() {
        lock.lock()
        queue.closed = true
        lock.signal()
        lock.unlock()
    }

    private func loop() {
        while true {
            lock.lock()
            while queue.jobs.isEmpty && !queue.closed { lock.wait() }
            let jobs = queue.jobs
            queue.jobs = []
            let closed = queue.closed
            lock.unlock()
            for job in jobs { job() }
            if closed && jobs.isEmpty { return }
        }
    }
}
