#if canImport(Glibc)
import Glibc
#endif

/// A pthread mutex with a condition variable, for the checkpoint thread's timed waits.
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
    func signal() { pthread_cond_broadcast(condition) }

    /// Waits for a signal or until `deadline` (seconds on the monotonic clock; `nil` waits for a
    /// signal only). Call with the lock held.
    func wait(until deadline: Double?) {
        guard let deadline else {
            pthread_cond_wait(condition, mutex)
            return
        }
        var ts = timespec()
        ts.tv_sec = Int(deadline)
        ts.tv_nsec = Int((deadline - Double(Int(deadline))) * 1e9)
        pthread_cond_timedwait(condition, mutex, &ts)
    }

    /// Seconds on the monotonic clock.
    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
