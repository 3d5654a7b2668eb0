import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import Splitfetch

/// The fleet daemon's copy of the whole queue (for the API): read at start, and kept fresh by
/// reading back the rows that other daemons' changes announce (see ``Fleet``).
extension Daemon {
    /// Reads the whole queue into the daemon's copy; runs nothing yet.
    func restoreFleetCopy(_ fleet: Fleet) async throws {
        let rows = try await fleet.store.loadAllRows()
        state.withLockedValue { state in for row in rows { state.store(row.job) } }
        fleet.state.withLockedValue { state in for row in rows { state.versions[row.job.gid] = row.version } }
        logger.info("queue read", metadata: ["jobs": "\(rows.count)", "worker": "\(fleet.worker)"])
    }

    /// A notification: reads the announced rows back (batched while a read is under way).
    func heard(_ change: PostgresJobStore.Change, _ fleet: Fleet) {
        if case .slotFreed = change {
            fleet.slots?.wake()
            return
        }
        if change == .missed { fleet.slots?.wake() }
        let start = fleet.state.withLockedValue { state -> Bool in
            switch change {
            case .jobs(let gids): state.announced.formUnion(gids)
            case .missed: state.rereadAll = true
            case .slotFreed: break
            }
            defer { state.reading = true }
            return !state.reading
        }
        fleet.wake()
        guard start else { return }
        Task { await self.readAnnounced(fleet) }
    }

    private func readAnnounced(_ fleet: Fleet) async {
        var backoff = 0.25
        while !Task.isCancelled {
            let (gids, all) = fleet.state.withLockedValue { state -> ([String], Bool) in
                guard !state.announced.isEmpty || state.rereadAll else {
                    state.reading = false
                    return ([], false)
                }
                defer {
                    state.announced = []
                    state.rereadAll = false
                }
                return (Array(state.announced), state.rereadAll)
            }
            guard all || !gids.isEmpty else { return }
            // A read of every row also asks about the jobs of the copy that it may not return:
            // those that were in the database before the read began. A job whose add is being
            // committed now is not one of them: its row may come after the read.
            let known = all ? state.withLockedValue { state in Set(state.jobs.keys).subtracting(state.saving.values) } : []
            do {
                // A read the database never answers (a connection lost as it went away, which
                // postgres-nio may wait on for ever) would leave this copy as it is for good:
                // every later announcement waits behind it. It counts as failed after its limit
                // (10 s, more for a large queue) and is asked again.
                let store = fleet.store
                let limit = max(10, Double(known.count) / 2_000)
                let answer = await within(seconds: limit) {
                    all ? try await store.loadAllRows() : try await store.load(gids)
                }
                guard let answer else { throw NoAnswer(seconds: limit) }
                let rows = try answer.get()
                let asked = all ? Array(Set(rows.map(\.job.gid)).union(known)) : gids
                apply(rows, asked: asked, fleet)
                backoff = 0.25
            } catch {
                if Task.isCancelled { return }
                logger.debug("reading the queue's changes failed; asking again", metadata: [
                    "error": "\(PostgresJobStore.describe(error))", "whole queue": "\(all)"])
                fleet.state.withLockedValue { state in
                    state.announced.formUnion(gids)
                    if all { state.rereadAll = true }
                }
                try? await Task.sleep(for: .seconds(backoff))
                backoff = min(backoff * 2, 8)
            }
        }
    }

    /// Takes the database's rows of `asked` into the daemon's copy: a job this daemon runs is
    /// stopped when the row says it may not run here any more; a job that is gone is forgotten.
    /// A change of state is announced to this daemon's API clients.
    func apply(_ rows: [PostgresJobStore.Row], asked: [String], _ fleet: Fleet) {
        let found = Dictionary(rows.map { ($0.job.gid, $0) }, uniquingKeysWith: { a, _ in a })
        var stop: [String] = []
        var changed: [(String, DownloadState)] = []
        // Rows no newer than what the daemon knows are old reads (a read under way while the
        // job was claimed or changed): skipped.
        let (held, fresh) = fleet.state.withLockedValue { state -> (Set<String>, Set<String>) in
            var fresh: Set<String> = []
            for gid in asked {
                guard let row = found[gid] else {
                    state.versions[gid] = nil
                    fresh.insert(gid)
                    continue
                }
                if let known = state.versions[gid], row.version <= known { continue }
                state.versions[gid] = row.version
                fresh.insert(gid)
            }
            return (state.held, fresh)
        }
        state.withLockedValue { state in
            for gid in asked where fresh.contains(gid) {
                guard let row = found[gid] else {
                    if held.contains(gid) { stop.append(gid) }
                    if let job = state.jobs[gid] { state.forget(job) }
                    continue
                }
                if held.contains(gid) {
                    // Ours while the row says so: this daemon's record is the newer one.
                    if row.holder == fleet.worker && (row.job.state == .active || row.job.state == .waiting) { continue }
                    // Paused, removed or claimed elsewhere: stopped. Ended here (the end read
                    // back): let go, with nothing left to stop.
                    stop.append(gid)
                } else if row.holder == fleet.worker && row.job.state == .active {
                    // Claimed by this daemon and not held yet: the claim's answer is being
                    // adopted, which records the job as waiting until the queue starts it. Taken
                    // from the row, the job showed as running while it was not in the queue, and
                    // its start was announced twice.
                    continue
                }
                let old = state.jobs[gid]
                state.store(row.job)
                if old?.state != row.job.state { changed.append((gid, row.job.state)) }
            }
        }
        if !stop.isEmpty { letGo(stop, fleet) }
        for (gid, newState) in changed {
            if let method = Self.notification(for: newState) { notify(Notification(method: method, gid: gid)) }
        }
    }
}
