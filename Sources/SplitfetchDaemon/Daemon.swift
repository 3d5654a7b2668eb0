import DownloadCore
import FoundationEssentials
public import Logging
import NIOConcurrencyHelpers
public import Splitfetch
import SystemPackage

/// The daemon's queue: the library's ``DownloadQueue`` for what runs, a ``JobStore`` for what
/// must survive, and the jobs' records between the two.
///
/// **What is durable when.** Every change is written through one serial writer that takes all
/// the changes waiting at that moment into one transaction (group commit), reading each job's
/// state as it is then, so the last write always holds the latest state. A caller that changed
/// something (an add, a pause, a move) returns only once its change is committed.
public final class Daemon: Sendable {
    /// The directory every download goes under.
    public let root: DownloadRoot
    /// The library queue that runs the downloads.
    public let queue: DownloadQueue
    let store: any JobStore
    let logger: Logger
    /// Settings of every download that its own options do not set.
    let defaults: DownloadOptions
    let state: NIOLockedValueBox<State>
    let writer: StoreWriter
    /// Followers of the daemon's notifications (aria2's `onDownload…`), one per WebSocket.
    let listeners = NIOLockedValueBox<[UInt64: AsyncStream<Notification>.Continuation]>([:])
    let sessionID: String
    let events: Task<Void, Never>
    /// The limits over time: the daemon's own, and the schedule's inside its windows.
    let limits: ScheduleRunner
    /// What runs when a download finishes.
    let hooks: Hooks
    /// How long a pause, resume or removal in a fleet waits for the queue's database.
    let commandSeconds: Double
    let webhook: Webhook?
    /// The daemon's part in a fleet, when the queue is in PostgreSQL (``Fleet``); `nil` for a
    /// queue of its own.
    let fleet: Fleet?
    /// The session made for a per-host connection cap (the queue's own otherwise).
    let ownedSession: Session?
    /// Makes a job's options when it starts (``optionsAtStart(_:)``): one closure that every job
    /// in the library queue shares, instead of one holding each job's values (80 bytes a job).
    let startOptions: @Sendable (String) throws(DownloadError) -> DownloadOptions

    /// The daemon, not kept alive by what refers to it this way.
    struct WeakDaemon {
        weak var daemon: Daemon?
    }

    /// A notification for the API's clients: aria2's method name and the GID.
    public struct Notification: Sendable, Equatable {
        public var method: String
        public var gid: String
    }

    /// Loads the store and puts its unfinished jobs back in a new queue, in their order: active and
    /// waiting ones wait for a slot (and resume from their manifests), paused ones stay paused.
    /// Finished ones stay in the history.
    ///
    /// - Parameters:
    ///   - schedule: a bandwidth schedule in `--schedule`'s form (see the manual), or `nil`.
    ///   - maximumPerHost: downloads from one host at once, at most; `nil` for no cap.
    ///   - maximumConnectionsPerHost: connections to one host at once, over every download; with
    ///     a shared queue, over every daemon of the fleet (``FleetHostSlots``). `nil` for no cap.
    ///   - leaseSeconds: with a shared queue (a ``PostgresJobStore``), how long a claim holds a
    ///     job without renewal; `pollSeconds`, how often a worker looks for jobs when no
    ///     notification wakes it; `commandSeconds`, how long a pause, resume or removal waits
    ///     for its database before it is refused (it may or may not have been made), and how
    ///     long a stop waits for its last writes and for the leases to be let go.
    public init(store: any JobStore, root: DownloadRoot, maximumActive: Int = 5, maximumPerHost: Int? = nil,
                maximumConnectionsPerHost: Int? = nil, bytesPerSecond: Int64? = nil,
                schedule: String? = nil, hooks: Hooks = Hooks(), webhook: Webhook? = nil,
                defaults: DownloadOptions = DownloadOptions(), leaseSeconds: Double = 30, pollSeconds: Double = 5,
                commandSeconds: Double = 10, logger: Logger) async throws {
        let fleet = (store as? PostgresJobStore).map {
            Fleet(store: $0, leaseSeconds: leaseSeconds, pollSeconds: pollSeconds, hostCap: maximumConnectionsPerHost)
        }
        self.fleet = fleet
        self.hooks = hooks
        self.commandSeconds = commandSeconds
        self.webhook = webhook
        let parsedSchedule: BandwidthSchedule?
        do {
            parsedSchedule = try schedule.map { text throws(ScheduleError) in try BandwidthSchedule(parsing: text) }
        } catch {
            throw RPCError.invalidParams("--schedule: \(error)")
        }
        self.store = store
        self.root = root
        self.logger = logger
        self.defaults = defaults
        let session = maximumConnectionsPerHost.map { Session(maximumConnectionsPerHost: $0, sharedHostCap: fleet?.slots) }
        ownedSession = session
        // Ready ahead (as `-i` does): the next jobs wait with their first request made, and go
        // the moment a job's network part ends. Not in a fleet, which claims only the jobs it
        // can run now (nor, by the queue's rule, under a cap on connections per host).
        queue = DownloadQueue(session: session, maximumActive: maximumActive, bytesPerSecond: bytesPerSecond,
                              readyAhead: fleet == nil)
        queue.setMaximumActivePerHost(maximumPerHost)
        writer = StoreWriter(store: store) { [logger] error in
            logger.error("job changes could not be saved", metadata: ["error": "\(error)"])
        }
        sessionID = Self.newGID()
        limits = ScheduleRunner(queue: queue, bytesPerSecond: bytesPerSecond, maximumActive: maximumActive)
        let subscription = queue.subscribe(keepingProgress: 1, statesOnly: true)
        var initial = State()
        initial.globalOptions = [
            "dir": root.path.string,
            "max-concurrent-downloads": String(maximumActive),
            "max-overall-download-limit": String(bytesPerSecond ?? 0),
            "split": String(defaults.connections),
            "max-connection-per-server": String(defaults.connections),
            "min-split-size": String(defaults.minimumSegmentSize),
            "user-agent": defaults.userAgent,
        ]
        state = NIOLockedValueBox(initial)
        // Filled in below; the task only reads `self` once started.
        let box = NIOLockedValueBox<Daemon?>(nil)
        let owner = NIOLockedValueBox(WeakDaemon())
        startOptions = { gid throws(DownloadError) in
            guard let daemon = owner.withLockedValue({ $0.daemon }) else { throw DownloadError(.interrupted, "the daemon stopped") }
            return try daemon.optionsAtStart(gid)
        }
        events = Task {
            for await event in subscription {
                guard let state = event.state, let daemon = box.withLockedValue({ $0 }) else { continue }
                // Already recorded (a job added paused, a pause the API recorded): nothing to do;
                // a later change has an event of its own.
                guard daemon.job(event.id)?.state != state else { continue }
                daemon.stateChanged(event.id)
            }
        }
        box.withLockedValue { $0 = self }
        owner.withLockedValue { $0.daemon = self }
        writer.readRows { [weak self] gids in
            guard let self else { return ([], []) }
            // Which jobs are held is read first: a job let go meanwhile (paused by a command,
            // say) has its record from the database in the copy by then, since the copy is
            // updated before the job is let go (``apply(_:asked:_:)``).
            let held = self.fleet?.held.intersection(gids) ?? []
            return (self.state.withLockedValue { state in gids.compactMap { state.jobs[$0] } }, held)
        }
        if let fleet {
            try await restoreFleetCopy(fleet)
            limits.setSchedule(parsedSchedule, text: schedule ?? "")
            // Pending hooks and webhooks are not run at a start: in a fleet, another daemon may
            // have ended the job (a hook runs at most once, never twice).
            await startFleet(fleet)
            return
        }
        try await restore()
        limits.setSchedule(parsedSchedule, text: schedule ?? "")
        // Hooks that were due when the daemon stopped (never one that already started).
        for job in allJobs() where job.hookPending { runHook(job.gid) }
        for job in allJobs() where job.webhookPending { sendWebhook(job.gid) }
    }

    /// Puts the stored jobs back.
    private func restore() async throws {
        var stored = try await store.loadAll()
        stored.sort { $0.order < $1.order }
        state.withLockedValue { state in
            // Room for them all at once: no table grown and rehashed twice over on the way.
            state.jobs.reserveCapacity(stored.count)
            state.destinations.reserveCapacity(stored.count)
            for job in stored { state.store(job) }
        }
        var changed: [Job] = []
        for var job in stored where !job.state.isFinal {
            // Finished just before the daemon stopped, and not recorded: the file is in place and
            // its partial gone (a file that was there before is never accepted by `add`). A
            // paused job cannot have finished.
            if job.state != .paused, FileManagerLite.exists(job.destination), !FileManagerLite.exists(job.destination + ".part") {
                job.state = .complete
                job.totalLength = FileManagerLite.size(job.destination)
                job.completedLength = job.totalLength
                job.finishedAt = Date().timeIntervalSince1970
                job.hookPending = hooks.command(for: .complete) != nil
                job.webhookPending = webhook != nil
                changed.append(job)
                continue
            }
            do {
                try enqueue(job, paused: job.state == .paused)
            } catch {
                job.state = .failed
                job.errorCode = error.code.description
                job.errorMessage = error.message
                changed.append(job)
            }
        }
        state.withLockedValue { state in for job in changed { state.store(job) } }
        try await store.save(upserting: changed, deleting: [])
        logger.info("queue restored", metadata: ["jobs": "\(stored.count)", "unfinished": "\(stored.filter { !$0.state.isFinal }.count)"])
    }

    /// Stops every download (each keeps its data and a final checkpoint), then waits for the
    /// last writes. Their state stays as stored, so the next start resumes them.
    public func shutdown() async {
        await fleet?.stop()
        limits.stop()
        await queue.shutdown()
        await ownedSession?.shutdown()
        events.cancel()
        if let fleet {
            // The database may be away: its part of stopping has a time limit, so a stop is never
            // held up by it (a service manager would kill the daemon). What is not written then
            // is not lost: the leases expire, and the worker that claims a job finds its data
            // (a finished file is recognised as such).
            let (writer, logger) = (writer, logger)
            let done = await within(seconds: commandSeconds) {
                await writer.close()
                // The jobs it ran wait again, for any worker, at once (their data is kept).
                do { try await fleet.store.release(owner: fleet.worker) } catch {
                    logger.warning("leases not let go; they expire", metadata: ["error": "\(PostgresJobStore.describe(error))"])
                }
            }
            if !done {
                logger.warning("the queue's database did not answer: the last changes are not written; the leases expire",
                               metadata: ["waited": "\(Int(commandSeconds)) s", "lease": "\(Int(fleet.leaseSeconds)) s"])
            }
        } else {
            await writer.close()
        }
        for listener in listeners.withLockedValue({ $0.values }) { listener.finish() }
    }

    /// The daemon was told to stop (a signal). In a fleet, requests still waiting for the
    /// queue's database (an add, a purge) are answered now: the database may be away, and the
    /// server's graceful stop waits for every request.
    func stopRequested() {
        guard fleet != nil else { return }
        writer.abandonWaiters(RPCError.failed(
            "the daemon is stopping before the queue's database answered: the change may or may not be saved (list the queue)"))
    }

    func notify(_ notification: Notification) {
        for listener in listeners.withLockedValue({ Array($0.values) }) { listener.yield(notification) }
    }

    /// The daemon's notifications, until the daemon stops or the stream is dropped. At most
    /// `buffer` wait for a slow reader; older ones are dropped.
    public func notifications(buffer: Int = 1024) -> AsyncStream<Notification> {
        let (stream, continuation) = AsyncStream<Notification>.makeStream(bufferingPolicy: .bufferingNewest(buffer))
        let id = state.withLockedValue { state -> UInt64 in
            state.nextListener += 1
            return state.nextListener
        }
        listeners.withLockedValue { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.listeners.withLockedValue { $0.removeValue(forKey: id) } }
        return stream
    }

    /// A job's record with its live state.
    public func job(_ gid: String) -> Job? { state.withLockedValue { $0.jobs[gid] } }

    /// Every job's record.
    public func allJobs() -> [Job] { state.withLockedValue { Array($0.jobs.values) } }

    /// The unfinished jobs in these states, in queue order, from `offset` (from the end,
    /// backwards, for a negative one, as aria2 counts), at most `count`.
    func unfinished(_ states: Set<DownloadState>, offset: Int, count: Int) -> [Job] {
        state.withLockedValue { state in
            if states == [.active] {
                let active = state.active.compactMap { state.jobs[$0] }.sorted { ($0.priority, -$0.order) > ($1.priority, -$1.order) }
                return Array(active.dropFirst(max(0, offset)).prefix(count))
            }
            var order = state.queueOrder()
            var skip = offset
            if offset < 0 {
                order.reverse()
                skip = -offset - 1
            }
            var picked: [Job] = []
            for gid in order {
                guard picked.count < count else { break }
                guard let job = state.jobs[gid], states.contains(job.state) else { continue }
                if skip > 0 { skip -= 1 } else { picked.append(job) }
            }
            return picked
        }
    }

    /// How many jobs are in each state.
    func counts() -> [DownloadState: Int] { state.withLockedValue { $0.counts } }

    /// Changes a job's record and the store's, then returns what `body` returned.
    func update<T>(_ gid: String, _ body: (inout Job) throws(RPCError) -> T) async throws(RPCError) -> T {
        let result = try state.withLockedValue { state -> Result<T, RPCError> in
            guard var job = state.jobs[gid] else { return .failure(RPCError.notFound(gid)) }
            do throws(RPCError) {
                let result = try body(&job)
                state.store(job)
                return .success(result)
            } catch {
                return .failure(error)
            }
        }.get()
        do { try await writer.persist([gid]) } catch { throw RPCError.failed("could not be saved: \(error)") }
        return result
    }

    /// Records the queue's state of `gids` now (after a pause, a resume, a removal).
    /// Several at once (pauseAll, unpauseAll) share one commit.
    func recordQueueState(_ gids: [String]) async throws(RPCError) {
        let snapshots = gids.compactMap { queue.snapshot($0) }
        state.withLockedValue { state in
            for snapshot in snapshots {
                guard var job = state.jobs[snapshot.id] else { continue }
                job.state = snapshot.state
                job.priority = snapshot.priority
                if snapshot.state.isFinal, job.finishedAt == nil { job.finishedAt = Date().timeIntervalSince1970 }
                state.store(job)
            }
        }
        do { try await writer.persist(snapshots.map(\.id)) } catch { throw RPCError.failed("could not be saved: \(error)") }
        for snapshot in snapshots {
            if snapshot.state.isFinal { queue.forget(snapshot.id) }
            if let method = Self.notification(for: snapshot.state), snapshot.state != .active {
                notify(Notification(method: method, gid: snapshot.id))
            }
        }
    }

    /// Deletes finished jobs from the history (and the store).
    func purge(_ gids: [String]) async throws(RPCError) {
        // In a fleet, a read of these rows still under way must not bring them back: every
        // version of them is old now (the delete's own notification finds no row).
        fleet?.state.withLockedValue { state in for gid in gids { state.versions[gid] = .max } }
        state.withLockedValue { state in
            for gid in gids { if let job = state.jobs[gid] { state.forget(job) } }
        }
        do { try await writer.delete(gids) } catch { throw RPCError.failed("could not be saved: \(error)") }
    }

    /// Moves a job in the queue; the new sort key is the midpoint of its new neighbours'.
    func move(_ gid: String, to position: Int) async throws(RPCError) -> Int {
        if fleet != nil {
            // The queue's order is the database's: a new sort key between the new neighbours.
            let order = state.withLockedValue { state -> Double? in
                var live = state.queueOrder().filter { $0 != gid }
                guard state.jobs[gid] != nil else { return nil }
                let index = max(0, min(live.count, position))
                live.insert(gid, at: index)
                let before = index > 0 ? state.jobs[live[index - 1]]?.order : nil
                let after = index + 1 < live.count ? state.jobs[live[index + 1]]?.order : nil
                return switch (before, after) {
                case (let b?, let a?): (b + a) / 2
                case (let b?, nil): b + 1
                case (nil, let a?): a - 1
                case (nil, nil): 0
                }
            }
            guard let order else { throw RPCError.notFound(gid) }
            try await update(gid) { $0.order = order }
            return max(0, position)
        }
        guard queue.move(gid, to: position), let moved = queue.snapshot(gid) else { throw RPCError.notFound(gid) }
        let ordered = queue.snapshots().filter { !$0.state.isFinal }.sorted { $0.position < $1.position }
        let orders = state.withLockedValue { state in ordered.map { state.jobs[$0.id]?.order ?? 0 } }
        let index = ordered.firstIndex { $0.id == gid } ?? 0
        let before = index > 0 ? orders[index - 1] : nil
        let after = index + 1 < orders.count ? orders[index + 1] : nil
        let order: Double = switch (before, after) {
        case (let b?, let a?): (b + a) / 2
        case (let b?, nil): b + 1
        case (nil, let a?): a - 1
        case (nil, nil): 0
        }
        try await update(gid) { $0.order = order }
        return moved.position
    }

}
