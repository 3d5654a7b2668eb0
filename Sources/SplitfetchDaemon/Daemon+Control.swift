import DownloadCore
import Splitfetch

/// Pausing, resuming and removing jobs: in the daemon's own queue, or, in a fleet, in the
/// database, whichever daemon runs the job (it stops it when it hears of the change).
extension Daemon {
    /// Pauses a waiting or active job.
    func pause(_ gid: String) async throws(RPCError) {
        try await change([gid], to: .paused, from: [.waiting, .active], orFail: "GID#\(gid) cannot be paused now") { self.queue.pause(gid) }
    }

    /// Lets a paused job wait for a slot again.
    func unpause(_ gid: String) async throws(RPCError) {
        try await change([gid], to: .waiting, from: [.paused], orFail: "GID#\(gid) cannot be unpaused now") { self.queue.resume(gid) }
    }

    /// Takes an unfinished job out of the queue (its data is kept).
    func remove(_ gid: String) async throws(RPCError) {
        try await change([gid], to: .removed, from: [.waiting, .active, .paused], orFail: "Active Download not found for GID#\(gid)") { self.queue.remove(gid) }
    }

    /// Pauses every unfinished job, or (`pausing` false) lets every paused one wait again.
    func pauseAll(_ pausing: Bool) async throws(RPCError) {
        let gids = allJobs().filter { !$0.state.isFinal }.map(\.gid)
        if fleet != nil {
            if pausing {
                try await command(gids, to: .paused, from: [.waiting, .active])
            } else {
                try await command(gids, to: .waiting, from: [.paused])
            }
            return
        }
        if pausing { queue.pauseAll() } else { queue.resumeAll() }
        try await recordQueueState(gids)
    }

    private func change(_ gids: [String], to target: DownloadState, from: Set<DownloadState>, orFail message: String,
                        local: () -> Bool) async throws(RPCError) {
        if fleet != nil {
            guard try await command(gids, to: target, from: from) > 0 else { throw RPCError.failed(message) }
            return
        }
        guard gids.allSatisfy({ job($0).map { from.contains($0.state) } == true }), local() else { throw RPCError.failed(message) }
        try await recordQueueState(gids)
    }


    /// A change of state made in the fleet's database; the daemon's copy and its clients learn
    /// it at once, the daemon that runs a job when it hears. Returns how many jobs changed.
    @discardableResult
    private func command(_ gids: [String], to target: DownloadState, from: Set<DownloadState>) async throws(RPCError) -> Int {
        guard let fleet, !gids.isEmpty else { return 0 }
        // A database that does not answer at all (a frozen host) must not hold the request, nor
        // a stop, which waits for the requests under way.
        let store = fleet.store
        let changed: [PostgresJobStore.Row]
        switch await within(seconds: commandSeconds, { try await store.command(gids, to: target, from: Array(from)) }) {
        case .success(let rows):
            changed = rows
        case .failure(let error):
            throw RPCError.failed("the queue's database did not take the change: \(PostgresJobStore.describe(error))")
        case nil:
            throw RPCError.failed("the queue's database did not answer in \(Int(commandSeconds)) s: "
                                  + "the change may or may not be made (list the queue)")
        }
        apply(changed, asked: changed.map(\.job.gid), fleet)
        if target == .waiting { fleet.wake() }
        return changed.count
    }
}
