#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex with a condition variable, for the I/O thread's queue.
///
/// `@unchecked Sendable`: the pthread objects are designed to be shared between threads; they are
/// allocated once, never moved, and destroyed in `deinit` when no thread can hold them.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }
    /// Wakes one waiting thread (none if none waits).
    func signal() { pthread_cond_signal(condition) }

    /// Waits for a signal. Call with the lock held.
    func wait() {
        pthread_cond_wait(condition, mutex)
    }
}

/// A gate a thread waits at until another opens it, once. For a thread that may block (never one
/// of Swift's cooperative pool).
///
/// Thread safety: `@unchecked Sendable` because `isOpen` is guarded by `lock`.
final class OneShotGate: @unchecked Sendable {
    private let lock = ConditionLock()
    private var isOpen = false

    func open() {
        lock.lock()
        isOpen = true
        lock.unlock()
        lock.signal()
    }

    func wait() {
        lock.lock()
        while !isOpen { lock.wait() }
        lock.unlock()
    }
}
