import Synchronization

/// Where workers with nothing to do wait: until another worker's transfer ends (its segment may be
/// complete, failed or free to take), a poll interval passes (a stalled owner can only be noticed
/// by time), or the task is cancelled.
///
/// Without it an idle worker slept a fixed 100 ms, and the download could not finish until the
/// last sleeper woke: every download whose connections ended a moment apart lost up to 100 ms.
final class IdleWaiters: Sendable {
    private struct State {
        var generation = 0
        var nextID = 0
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        /// Waiters cancelled before their continuation was stored.
        var cancelledEarly: Set<Int> = []
    }

    private let state = Mutex(State())

    /// Read before looking at the segment table; pass to ``wait(since:timeout:)`` so that a change
    /// in between is not missed.
    var generation: Int { state.withLock { $0.generation } }

    /// Wakes every waiter; called whenever a worker's transfer ends or a worker leaves.
    func wakeAll() {
        let woken = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.generation &+= 1
            defer { s.waiting.removeAll() }
            return Array(s.waiting.values)
        }
        for continuation in woken { continuation.resume() }
    }

    /// Returns after a ``wakeAll()`` later than `generation` (at once if one already happened),
    /// after `timeout`, or on cancellation.
    func wait(since generation: Int, timeout: Duration) async {
        let id = state.withLock { s -> Int in
            s.nextID &+= 1
            return s.nextID
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForWake(id: id, since: generation) }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
        // A cancellation that came after a wake left a mark nobody will consume.
        _ = state.withLock { $0.cancelledEarly.remove(id) }
    }

    private func waitForWake(id: Int, since generation: Int) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.generation != generation || s.cancelledEarly.remove(id) != nil { return true }
                    s.waiting[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            resume(id)
        }
    }

    /// Resumes one waiter if it is waiting; otherwise remembers that it must not wait.
    private func resume(_ id: Int) {
        let continuation = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let c = s.waiting.removeValue(forKey: id) { return c }
            s.cancelledEarly.insert(id)
            return nil
        }
        continuation?.resume()
    }
}
