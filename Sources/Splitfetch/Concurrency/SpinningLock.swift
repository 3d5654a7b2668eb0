#if canImport(Glibc)
import Glibc
#endif

/// A value behind a pthread mutex of glibc's adaptive kind, which spins a moment before it sleeps:
/// for the locks that the transport threads of a list answered in step all take at once (the
/// batch's gate, the queue). Behind `NIOLock`, whose mutex sleeps at once, the transport threads
/// made 748 futex calls on the gate's lock for 2,000 files (`perf record`, the bench's list):
/// each a thread put to sleep or woken. Not the standard library's `Mutex`, whose hand-off
/// through the kernel ThreadSanitizer cannot see (it reported a race between
/// two accesses inside the queue's lock).
///
/// `@unchecked Sendable`: the value is only reached inside ``withLock(_:)``, under the mutex; the
/// mutex is allocated once, never moved, and destroyed in `deinit` when no thread can hold it.
final class SpinningLock<Value>: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var value: Value

    init(_ value: Value) {
        self.value = value
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
