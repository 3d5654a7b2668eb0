import DownloadCore
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import Splitfetch

/// The fleet's loops: claiming, renewing, and listening for other daemons' changes (read back
/// in Daemon+FleetCopy.swift; see ``Fleet``).
extension Daemon {
    /// Starts claiming, renewing and listening.
    func startFleet(_ fleet: Fleet) async {
        await fleet.slots?.start(logger: logger)
        let changes = fleet.store.changes()
        let tasks: [Task<Void, Never>] = [
            Task { [weak self] in _ = await self?.claimLoop(fleet) },
            Task { [weak self] in _ = await self?.renewLoop(fleet) },
            Task { [weak self] in
                for await change in changes {
                    guard let self else { return }
                    self.heard(change, fleet)
                }
            },
            // The slow poll: a claim now and then even when no notification came.
            Task { [fleet] in
                while !Task.isCancelled {
                    fleet.wake()
                    try? await Task.sleep(for: .seconds(fleet.pollSeconds))
                }
            },
        ]
        fleet.state.withLockedValue { $0.tasks = tasks }
    }

    /// Claims as many jobs as there are free slots, whenever woken.
    private func claimLoop(_ fleet: Fleet) async {
        var backoff = 0.25
        for await _ in fleet.wakes {
            while !Task.isCancelled {
                let (held, running) = fleet.state.withLockedValue { ($0.held, $0.running) }
                let free = queue.maximumActive - running
                guard free > 0 else { break }
                let jobs: [PostgresJobStore.Row]
                do {
                    let sent = fleet.now
                    fleet.state.withLockedValue { $0.claiming = true }
                    defer { fleet.state.withLockedValue { $0.claiming = false } }
                    // A claim the database never answers (a host that froze) would hold every later
                    // claim: it counts as failed after its limit. Rows it took meanwhile are
                    // claimed again by the next claim (they name this worker) or run out.
                    // A claim waiting for a lock is ended by the server at the same limit, so that
                    // it does not keep a connection of the pool once given up.
                    let (store, worker, seconds, limit) = (fleet.store, fleet.worker, fleet.leaseSeconds, fleet.claimSeconds)
                    let answer = await within(seconds: limit) {
                        try await store.claimRows(owner: worker, count: free, seconds: seconds, holding: Array(held), lockWait: limit)
                    }
                    guard let answer else { throw NoAnswer(seconds: limit) }
                    jobs = try answer.get()
                    let took = fleet.now - sent
                    fleet.state.withLockedValue { state in
                        state.statistics.claims += 1
                        state.statistics.claimedJobs += jobs.count
                        state.statistics.claimSeconds += took
                    }
                    backoff = 0.25
                    if fleet.state.withLockedValue({ state in defer { state.claimWarned = false }; return state.claimWarned }) {
                        logger.notice("claiming again: the queue's database answers")
                    }
                } catch {
                    // Stopping (the claim was cancelled with the loop): not a failure to tell.
                    if Task.isCancelled { return }
                    if !fleet.state.withLockedValue({ state in defer { state.claimWarned = true }; return state.claimWarned }) {
                        logger.warning("cannot claim jobs; running downloads go on, claims retry with backoff",
                                       metadata: ["error": "\(PostgresJobStore.describe(error))"])
                    }
                    try? await Task.sleep(for: .seconds(backoff))
                    backoff = min(backoff * 2, 8)
                    break
                }
                // Stopping meanwhile: these leases are let go with the others (release).
                if fleet.state.withLockedValue({ $0.stopped }) { return }
                if !jobs.isEmpty {
                    logger.debug("claimed", metadata: ["gids": "\(jobs.map { "\($0.job.gid)@\($0.version)" })"])
                }
                var unanswered = false
                for job in jobs where !(await adopt(job, fleet)) { unanswered = true }
                // A job let go for want of an answer is claimed again (its row names this worker)
                // once the database answers: asked again after the backoff, not at once.
                if unanswered {
                    try? await Task.sleep(for: .seconds(backoff))
                    backoff = min(backoff * 2, 8)
                    fleet.wake()
                    break
                }
                if jobs.count < free { break }
            }
        }
    }

    /// Runs a claimed job here. Returns `false` when the job was let go because the database
    /// did not answer what its adoption asked (see below); `true` otherwise.
    func adopt(_ claimed: PostgresJobStore.Row, _ fleet: Fleet) async -> Bool {
        var job = claimed.job
        // Let go here a moment ago and still stopping: its download must end before it runs again.
        if let stopping = fleet.state.withLockedValue({ $0.stopping[job.gid] }) {
            await stopping.value
            fleet.state.withLockedValue { _ = $0.stopping.removeValue(forKey: job.gid) }
        }
        // Changed since the claim (paused or removed through any daemon while the claim was
        // answered: the copy has read the newer row): not run here; the change let the lease go.
        let current = fleet.state.withLockedValue { state -> Bool in
            if let known = state.versions[job.gid], known > claimed.version { return false }
            state.held.insert(job.gid)
            state.versions[job.gid] = claimed.version
            return true
        }
        guard current else {
            logger.debug("a claimed job changed meanwhile; not run", metadata: ["gid": "\(job.gid)"])
            fleet.wake()
            return true
        }
        // Waiting here until the library queue starts it: that start is what this daemon's
        // clients hear (onDownloadStart), as for a job of its own queue.
        job.state = .waiting
        state.withLockedValue { $0.store(job) }
        // Finished by a worker that died before it recorded it (shared storage): the file is in
        // place and its partial gone, and no other job of the queue completed that file (a job
        // added for a file that another completed a moment before fails: it is not a second
        // completion of the same file).
        let destination = job.destination
        let finishedFile = await IOQueue().run { () -> Int64? in
            guard FileManagerLite.exists(destination), !FileManagerLite.exists(destination + ".part") else { return nil }
            return FileManagerLite.size(destination)
        }
        // Let go meanwhile (paused through the API, say: the copy has the row's record already),
        // or the daemon is stopping (the lease is let go or runs out).
        guard fleet.mayStart(job.gid) else { return true }
        if let finishedFile, job.optionList["conditional-get"] != "true" {
            let (store, gid) = (fleet.store, job.gid)
            let answer = await within(seconds: fleet.claimSeconds) {
                try await store.completedJob(writing: destination, except: gid)
            }
            guard fleet.mayStart(job.gid) else { return true }
            let other: String?
            switch answer {
            case .success(let found)?: other = found
            case .failure, nil:
                // Neither complete nor refused without the database's word. (Refused, the job of
                // a worker that died as it renamed the file failed: the fleet kill loop saw it as
                // the database went away.) Let go, and claimed again once the database answers.
                let error = NoAnswer.describe(answer, limit: fleet.claimSeconds)
                logger.warning("a claimed job's file is in place; whether another job completed it is asked again once the database answers",
                               metadata: ["gid": "\(job.gid)", "error": "\(error)"])
                fleet.state.withLockedValue { _ = $0.held.remove(job.gid) }
                return false
            }
            if let other {
                job.state = .failed
                job.errorCode = DownloadError.Code.usage.description
                job.errorMessage = "\(job.destination) exists: job \(other) completed it (nothing is overwritten)"
                job.finishedAt = Date().timeIntervalSince1970
                finishAdopted(job, fleet)
                return true
            }
            job.state = .complete
            job.totalLength = finishedFile
            job.completedLength = finishedFile
            job.finishedAt = Date().timeIntervalSince1970
            finishAdopted(job, fleet)
            return true
        }
        do {
            try enqueue(job, paused: false)
        } catch {
            job.state = .failed
            job.errorCode = error.code.description
            job.errorMessage = error.message
            job.finishedAt = Date().timeIntervalSince1970
            finishAdopted(job, fleet)
            return true
        }
        // Let go (or stopping) between the check above and the queue's add: that letting go found
        // nothing to stop, and an unheld download would run here with nobody recording it.
        if !fleet.mayStart(job.gid) { _ = await queue.discard(job.gid) }
        return true
    }

    /// Records the end of a claimed job that did not run (held until the end is read back).
    private func finishAdopted(_ job: Job, _ fleet: Fleet) {
        fleet.state.withLockedValue { _ = $0.ended.insert(job.gid) }
        state.withLockedValue { $0.store(job) }
        writer.persistSoon([job.gid], whileHeld: true)
        if let method = Self.notification(for: job.state) { notify(Notification(method: method, gid: job.gid)) }
        fleet.wake()
    }

    /// Stops running `gids` here, keeping their data: another worker holds them now, or they
    /// were paused or removed. Their records come from the database. (Also how a job that ended
    /// here is let go once its end is read back: nothing runs then.)
    func letGo(_ gids: [String], _ fleet: Fleet) {
        let dropped = fleet.state.withLockedValue { state in
            gids.filter { gid in
                state.ended.remove(gid)
                return state.held.remove(gid) != nil
            }
        }
        if !dropped.isEmpty { logger.debug("let go", metadata: ["gids": "\(dropped)"]) }
        for gid in dropped {
            let queue = queue
            let task = Task {
                await queue.discard(gid)
                fleet.state.withLockedValue { _ = $0.stopping.removeValue(forKey: gid) }
            }
            fleet.state.withLockedValue { $0.stopping[gid] = task }
        }
        if !dropped.isEmpty { fleet.wake() }
    }

    /// Renews the leases every third of a lease; stops what is no longer held. Each renewal has
    /// a time limit (``LeaseKeeping/timeLimit(at:)``): one the database never answers counts as
    /// failed, so that the jobs stop before their leases run out and another worker takes them.
    private func renewLoop(_ fleet: Fleet) async {
        var delay = fleet.state.withLockedValue { $0.keeping.renewEvery }
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(delay))
            guard !Task.isCancelled else { return }
            delay = fleet.state.withLockedValue { $0.keeping.renewEvery }
            let asked = Array(fleet.held)
            let sentAt = fleet.now
            guard !asked.isEmpty else {
                fleet.state.withLockedValue { $0.keeping.idle(at: sentAt) }
                continue
            }
            let limit = fleet.state.withLockedValue { $0.keeping.timeLimit(at: sentAt) }
            let (store, worker, seconds, slots) = (fleet.store, fleet.worker, fleet.leaseSeconds, fleet.slots?.held ?? [:])
            let answer = await within(seconds: limit) {
                try? await store.renewSlots(seconds: seconds, held: slots)
                return try await store.renew(owner: worker, gids: asked, seconds: seconds, lockWait: limit)
            }
            // Stopping (the renewal was cancelled with the loop): no decision to make.
            guard !Task.isCancelled else { return }
            switch answer {
            case .success(let still):
                // A job that ended here lets its lease go with its end: not a loss.
                let (lost, endedHere) = fleet.state.withLockedValue { state -> ([String], [String]) in
                    state.statistics.renewals += 1
                    let gone = state.keeping.renewed(sentAt: sentAt, asked: asked, held: still, running: state.held)
                    let lost = gone.filter { !state.ended.contains($0) }
                    state.statistics.leasesLost += lost.count
                    return (lost, gone.filter { state.ended.contains($0) })
                }
                if !lost.isEmpty {
                    logger.notice("leases lost; those downloads stop here", metadata: ["jobs": "\(lost.count)"])
                }
                if !lost.isEmpty || !endedHere.isEmpty { letGo(lost + endedHere, fleet) }
            case .failure, nil:
                let now = fleet.now
                let (stop, retry) = fleet.state.withLockedValue { state in
                    (state.keeping.renewalFailed(at: now), state.keeping.retryDelay(afterFailureAt: now))
                }
                delay = retry
                if stop { stopUnconfirmed(fleet, error: NoAnswer.describe(answer, limit: limit)) }
            }
        }
    }

    /// No renewal was confirmed for too long: every download running here stops, since another
    /// worker may be given its job. A job that ended here is not let go: its end is still
    /// written (the database writes it only while the row names this daemon) and it is let go
    /// when the end is read back. Let go with the others, an end still waiting to be written
    /// (behind a write the loaded database was slow to take) was dropped, and the job counted
    /// as unfinished.
    func stopUnconfirmed(_ fleet: Fleet, error: String) {
        let running = fleet.state.withLockedValue { Array($0.held.subtracting($0.ended)) }
        logger.warning("leases could not be renewed in time; downloads stop here until the database answers",
                       metadata: ["jobs": "\(running.count)", "error": "\(error)"])
        letGo(running, fleet)
    }
}

/// A call to the queue's database that got no answer within its limit.
struct NoAnswer: Error, CustomStringConvertible {
    let seconds: Double
    var description: String { "no answer in \(seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)) s" }

    /// What went wrong with a request given `limit` seconds (``within(seconds:_:)``'s answer):
    /// the database's error, or no answer in time. Empty for a success.
    static func describe<T>(_ answer: Result<T, any Error>?, limit: Double) -> String {
        switch answer {
        case .failure(let error)?: PostgresJobStore.describe(error)
        case nil: NoAnswer(seconds: limit).description
        case .success?: ""
        }
    }
}
