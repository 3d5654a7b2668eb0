#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex with a condition variable, for the I/O threads' queue and the timer thread.
/// Timed waits measure `CLOCK_MONOTONIC`, which no change of the wall clock moves.
///
/// `@unchecked Sendable`: the pthread objects are designed to be shared between threads; they are
/// allocated once, never moved, and destroyed in `deinit` when no thread can hold them.
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
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

    /// Waits for a signal, or until `nanoseconds` have passed. Call with the lock held.
    func wait(nanoseconds: Int64) {
        let (seconds, rest) = max(0, nanoseconds).quotientAndRemainder(dividingBy: 1_000_000_000)
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let total = Int64(deadline.tv_nsec) + rest
        deadline.tv_sec += Int(seconds + total / 1_000_000_000)
        deadline.tv_nsec = Int(total % 1_000_000_000)
        pthread_cond_timedwait(condition, mutex, &deadline)
    }
}
