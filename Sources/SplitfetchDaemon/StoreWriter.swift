import NIOConcurrencyHelpers

/// Writes the daemon's changes in order, batching what waits into one transaction.
///
/// A write that fails is told to whoever waits for it, and its records are written again with
/// the next batch, after a backoff (0.25 s doubling to 8 s): a change nobody waits for (a
/// download's end) is not lost while the store is away (a database restarting), only late.
/// After ``close()`` a failed write is given up (logged).
///
/// A batch the store refuses for one of its jobs (``StoreError/isRefusal``: a file another job
/// completed or writes) is written again group by group, each waiter's jobs together and each
/// job nobody waits for alone: the refusal reaches only the writes it concerns, and is not
/// retried.
///
/// In a fleet, a change of a download's state is written only while the daemon still holds the
/// job's lease when its batch is read (``persistSoon(_:whileHeld:)``). A job let go meanwhile
/// (paused through another daemon, say) has the database's record in the copy: written back
/// later, after an unpause and a new claim by this same daemon, it undid the unpause.
final class StoreWriter: Sendable {
    let store: any JobStore
    /// The records of these jobs as they are now (the daemon's), read when a batch is written,
    /// and which of them the daemon runs under a lease (a fleet's), as it was before the records
    /// were read (see ``JobStore/save(upserting:deleting:held:)``).
    ///
    /// The closure is kept inside a struct: a bare function type in a generic box is reabstracted
    /// on each `inout` access, and every read through `withLockedValue` stored it back wrapped in
    /// two more thunks. After n batches, a batch called through 2n thunks (127 frames deep, the
    /// most `perf` shows, after 1,000 downloads), a cost growing without bound and in the end a
    /// stack overflow.
    private let rows = NIOLockedValueBox<RowSource?>(nil)

    /// The daemon's records of some jobs, and which of them it runs under a lease.
    struct RowSource: Sendable {
        let read: @Sendable ([String]) -> (jobs: [Job], held: Set<String>)
    }
    /// Told of a write that failed (logged: a change nobody waits for has nobody else to tell).
    let failed: @Sendable (any Error) -> Void
    private let state = NIOLockedValueBox(Pending())

    /// Someone waiting for these jobs to be written (or deleted), together.
    private struct Waiter {
        let id: Int
        let upserts: [String]
        let deletes: [String]
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct Pending {
        /// Jobs to write that nobody waits for.
        var upserts: [String] = []
        /// Those of `upserts` written only while the daemon holds them (a fleet's lease).
        var whileHeld: Set<String> = []
        /// Waiters not in a batch yet.
        var waiting: [Waiter] = []
        /// Waiters whose batch is being written; answered once (``abandonWaiters(_:)`` may
        /// answer them first).
        var inFlight: [Int: Waiter] = [:]
        var nextID = 0
        var running = false
        var idle: [CheckedContinuation<Void, Never>] = []
        var closing = false
        /// The pause in which changes nobody waits for gather; ended early by a waiter or a close.
        var gathering: Task<Void, Never>?
    }

    /// How long changes nobody waits for gather before they are written together. Each batch is
    /// a commit and its sync: a download's start and end each wrote a batch of their own
    /// (scenario d, 1,000 downloads 8 at a time: the writer's thread took 0.40 CPU s; 0.17-0.20
    /// gathering 10 ms; 0.05-0.07 gathering 50 ms). A kill before the write loses nothing: a
    /// restart finds a finished download's file in place, and an active one is resumed like a
    /// waiting one.
    static let gatheringTime = Duration.milliseconds(50)

    init(store: any JobStore, failed: @escaping @Sendable (any Error) -> Void) {
        self.store = store
        self.failed = failed
    }

    /// Where the records are read when a batch is written (set once, before the first write).
    func readRows(from read: @escaping @Sendable ([String]) -> (jobs: [Job], held: Set<String>)) {
        rows.withLockedValue { $0 = RowSource(read: read) }
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
    /// for a sync in turn, gathered for ``gatheringTime`` first. ``flush()`` waits for them.
    ///
    /// `whileHeld`: a fleet's daemon records the downloads it runs under their leases; a job no
    /// longer held when its batch is read is not written (its record is the database's then).
    func persistSoon(_ gids: [String], whileHeld: Bool = false) {
        let start = state.withLockedValue { pending -> Bool in
            pending.upserts += gids
            if whileHeld { pending.whileHeld.formUnion(gids) }
            defer { pending.running = true }
            return !pending.running
        }
        if start { Task { await self.drain() } }
    }

    private func enqueue(upserts: [String], deletes: [String]) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let start = state.withLockedValue { pending -> Bool in
                pending.waiting.append(Waiter(id: pending.nextID, upserts: upserts, deletes: deletes, continuation: continuation))
                pending.nextID += 1
                pending.gathering?.cancel()
                defer { pending.running = true }
                return !pending.running
            }
            if start { Task { await self.drain() } }
        }
    }

    /// Answers every waiter now with `error`, written or not (the daemon stops while the store
    /// does not answer: its API requests must end). Their writes may still happen.
    func abandonWaiters(_ error: any Error) {
        let waiters = state.withLockedValue { pending -> [Waiter] in
            defer {
                pending.waiting = []
                pending.inFlight = [:]
            }
            return pending.waiting + Array(pending.inFlight.values)
        }
        for waiter in waiters { waiter.continuation.resume(throwing: error) }
    }

    /// Answers a waiter of the batch under way, unless it was answered already.
    private func answer(_ waiter: Waiter, _ error: (any Error)?) {
        guard state.withLockedValue({ $0.inFlight.removeValue(forKey: waiter.id) }) != nil else { return }
        if let error { waiter.continuation.resume(throwing: error) } else { waiter.continuation.resume() }
    }

    /// Writes batch after batch until nothing waits.
    private func drain() async {
        let source = rows.withLockedValue { $0 }
        var backoff = 0.25
        while true {
            let gathering = state.withLockedValue { pending -> Task<Void, Never>? in
                guard pending.waiting.isEmpty, !pending.upserts.isEmpty, !pending.closing else { return nil }
                pending.gathering = Task { try? await Task.sleep(for: Self.gatheringTime) }
                return pending.gathering
            }
            if let gathering {
                await gathering.value
                state.withLockedValue { $0.gathering = nil }
            }
            let batch = state.withLockedValue { pending -> (soon: [String], whileHeld: Set<String>, waiters: [Waiter])? in
                if pending.waiting.isEmpty && pending.upserts.isEmpty {
                    pending.running = false
                    return nil
                }
                let batch = (pending.upserts, pending.whileHeld, pending.waiting)
                for waiter in pending.waiting { pending.inFlight[waiter.id] = waiter }
                pending.upserts = []
                pending.whileHeld = []
                pending.waiting = []
                return batch
            }
            guard let batch else { break }
            // Each record as it is now: a later change already in memory is written too. A job
            // to write only while held and no longer held is left out (a waiter's is not).
            let write = { (upserts: [String], deletes: [String], whileHeld: Set<String>) async throws in
                let deleted = Set(deletes)
                var (jobs, held) = source?.read(Array(Set(upserts).subtracting(deleted))) ?? ([], [])
                if !whileHeld.isEmpty { jobs.removeAll { whileHeld.contains($0.gid) && !held.contains($0.gid) } }
                guard !jobs.isEmpty || !deleted.isEmpty else { return }
                try await self.store.save(upserting: jobs, deleting: Array(deleted), held: held)
            }
            let waited = Set(batch.waiters.flatMap(\.upserts))
            let whileHeld = batch.whileHeld.subtracting(waited)
            let groups = batch.waiters.count + batch.soon.count
            var retry: [String] = []
            do {
                try await write(batch.soon + batch.waiters.flatMap(\.upserts), batch.waiters.flatMap(\.deletes), whileHeld)
                for waiter in batch.waiters { answer(waiter, nil) }
            } catch let refusal as StoreError where refusal.isRefusal && groups > 1 {
                for waiter in batch.waiters {
                    do { try await write(waiter.upserts, waiter.deletes, []); answer(waiter, nil) } catch {
                        failed(error)
                        answer(waiter, error)
                        if !((error as? StoreError)?.isRefusal ?? false) { retry += waiter.upserts }
                    }
                }
                for gid in Set(batch.soon) {
                    do { try await write([gid], [], whileHeld.intersection([gid])) } catch {
                        failed(error)
                        if !((error as? StoreError)?.isRefusal ?? false) { retry.append(gid) }
                    }
                }
            } catch {
                failed(error)
                for waiter in batch.waiters { answer(waiter, error) }
                if !((error as? StoreError)?.isRefusal ?? false) {
                    // The records as they are in memory (a purge that failed was told so: not again).
                    retry = batch.soon + batch.waiters.flatMap(\.upserts)
                }
            }
            guard !retry.isEmpty else {
                backoff = 0.25
                continue
            }
            let again = state.withLockedValue { pending -> Bool in
                guard !pending.closing else { return false }
                pending.upserts += retry
                pending.whileHeld.formUnion(whileHeld.intersection(retry))
                return true
            }
            if again {
                try? await Task.sleep(for: .seconds(backoff))
                backoff = min(backoff * 2, 8)
            }
        }
        for waiter in state.withLockedValue({ pending in defer { pending.idle = [] }; return pending.idle }) { waiter.resume() }
    }

    /// Stops retrying failed writes, then waits for the writes under way.
    func close() async {
        state.withLockedValue { pending in
            pending.closing = true
            pending.gathering?.cancel()
        }
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
