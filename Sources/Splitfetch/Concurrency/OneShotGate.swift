#if canImport(Glibc)
import Glibc
#endif

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
