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
