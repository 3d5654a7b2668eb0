import NIOConcurrencyHelpers

/// Taking downloads out of the queue: removed (stopped, data kept), discarded (removed and
/// forgotten once stopped), forgotten (a finished one dropped from the snapshots).
extension DownloadQueue {
    /// Takes a download out of the queue, stopping it if it runs (its data is kept, so adding
    /// it again resumes). Returns whether it was in the queue and not removed already.
    @discardableResult
    public func remove(_ id: ID) -> Bool { act { $0.remove(id) } }

    /// Takes a download out of the queue (its data is kept) and forgets it once it has stopped:
    /// when this returns, its identifier may be used again. Returns whether it was in the queue.
    @discardableResult
    public func discard(_ id: ID) async -> Bool {
        guard state.withLock({ $0.records[id] != nil }) else { return false }
        remove(id)
        // The run's task reports its end before it returns; then the download is final and
        // stopped.
        let task = state.withLock { $0.records[id]?.task }
        await task?.value
        forget(id)
        return true
    }

    /// Forgets a complete, failed or removed download: it is no longer in snapshots, and its
    /// identifier may be used again. Returns whether it did.
    @discardableResult
    public func forget(_ id: ID) -> Bool {
        state.withLock { state in
            guard state.schedule.forget(id) else { return false }
            state.records[id] = nil
            return true
        }
    }
}
