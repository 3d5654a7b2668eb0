import NIOConcurrencyHelpers

/// Writes the daemon's changes in order, batching what waits into one transaction.
///
/// A write that fails is told to whoever waits for it, and its records are written again with
/// the next batch, after a backoff (0.25 s doubling to 8 s): a change nobody waits for (a
/// download's end) is not lost while the store is away (a database restarting), only late.
/// After ``close()`` a failed write is given up (logged).
final class StoreWriter: Sendable {
    let store: any JobStore
    /// The records of these jobs as they are now (the daemon's), read when a batch is written,
    /// and which of them the daemon runs under a lease (a fleet's), as it was before the records
    /// were read (see ``JobStore/save(upserting:deleting:held:)``).
    let rows = NIOLockedValueBox<(@Sendable ([String]) -> (jobs: [Job], held: Set<String>))?>(nil)
    /// Told of a write that failed (logged: a change nobody waits for has nobody else to tell).
    let failed: @Sendable (any Error) -> Void
    private let state = NIOLockedValueBox(Pending())

    struct Pending {
        var upserts: [String] = []
        var deletes: [String] = []
        var waiters: [CheckedContinuation<Void, any Error>] = []
        var running = false
        var idle: [CheckedContinuation<Void, Never>] = []
        var closing = false
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
        var backoff = 0.25
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
            let (upserts, held) = source?(Array(Set(batch.upserts).subtracting(deleted))) ?? ([], [])
            do {
                try await store.save(upserting: upserts, deleting: Array(deleted), held: held)
                for waiter in batch.waiters { waiter.resume() }
                backoff = 0.25
            } catch {
                failed(error)
                for waiter in batch.waiters { waiter.resume(throwing: error) }
                let retry = state.withLockedValue { pending -> Bool in
                    guard !pending.closing else { return false }
                    // The records as they are in memory (a purge that failed was told so: not again).
                    pending.upserts += upserts.map(\.gid)
                    return true
                }
                if retry {
                    try? await Task.sleep(for: .seconds(backoff))
                    backoff = min(backoff * 2, 8)
                }
            }
        }
        for waiter in state.withLockedValue({ pending in defer { pending.idle = [] }; return pending.idle }) { waiter.resume() }
    }

    /// Stops retrying failed writes, then waits for the writes under way.
    func close() async {
        state.withLockedValue { $0.closing = true }
        await flush()
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
