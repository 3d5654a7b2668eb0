import NIOConcurrencyHelpers

/// Writes the daemon's changes in order, batching what waits into one transaction.
final class StoreWriter: Sendable {
    let store: any JobStore
    /// The records of these jobs as they are now (the daemon's), read when a batch is written.
    let rows = NIOLockedValueBox<(@Sendable ([String]) -> [Job])?>(nil)
    /// Told of a write that failed (logged: a change nobody waits for has nobody else to tell).
    let failed: @Sendable (any Error) -> Void
    private let state = NIOLockedValueBox(Pending())

    struct Pending {
        var upserts: [String] = []
        var deletes: [String] = []
        var waiters: [CheckedContinuation<Void, any Error>] = []
        var running = false
        var idle: [CheckedContinuation<Void, Never>] = []
    }

    init(store: any JobStore, failed: @escaping @Sendable (any Error) -> Void) {
        self.store = store
        self.failed = failed
    }

    /// Writes these jobs' records as they are when the write happens.
    func persist(_ gids: [String]) async throws {
        try await enqueue(upserts: gids, deletes: [])
    }

    func delete(_ gids: [String]) async throws {
        try await enqueue(upserts: [], deletes: gids)
    }

    /// Writes these jobs' records soon, without waiting: for changes nobody is answered about
    /// (the queue's own state changes), so that they share transactions instead of each waiting
    /// for a sync in turn. ``flush()`` waits for them.
    func persistSoon(_ gids: [String]) {
        let start = state.withLockedValue { pending -> Bool in
            pending.upserts += gids
            defer { pending.running = true }
            return !pending.running
        }
        if start { Task { await self.drain() } }
    }

    private func enqueue(upserts: [String], deletes: [String]) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let start = state.withLockedValue { pending -> Bool in
                pending.upserts += upserts
                pending.deletes += deletes
                pending.waiters.append(continuation)
                defer { pending.running = true }
                return !pending.running
            }
            if start { Task { await self.drain() } }
        }
    }

    /// Writes batch after batch until nothing waits.
    private func drain() async {
        let source = rows.withLockedValue { $0 }
        while true {
            let batch = state.withLockedValue { pending -> Pending? in
                if pending.waiters.isEmpty && pending.upserts.isEmpty && pending.deletes.isEmpty {
                    pending.running = false
                    return nil
                }
                let batch = pending
                pending.upserts = []
                pending.deletes = []
                pending.waiters = []
                return batch
            }
            guard let batch else { break }
            let deleted = Set(batch.deletes)
            // Each record as it is now: a later change already in memory is written too.
            let upserts = source?(Array(Set(batch.upserts).subtracting(deleted))) ?? []
            do {
                try await store.save(upserting: upserts, deleting: Array(deleted))
                for waiter in batch.waiters { waiter.resume() }
            } catch {
                failed(error)
                for waiter in batch.waiters { waiter.resume(throwing: error) }
            }
        }
        for waiter in state.withLockedValue({ pending in defer { pending.idle = [] }; return pending.idle }) { waiter.resume() }
    }

    /// Returns once every write asked for so far is done.
    func flush() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLockedValue { pending -> Bool in
                if !pending.running { return true }
                pending.idle.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }
}
