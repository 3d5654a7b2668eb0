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
    let webhook: Webhook?

    struct State {
        var jobs: [String: Job] = [:]
        /// The files of the unfinished jobs: a second job for one of them is refused.
        var destinations: Set<String> = []
        /// The largest sort key given so far: an appended job takes the next.
        var lastOrder: Double = 0
        /// The global options as aria2 reports them (`getGlobalOption`).
        var globalOptions: [String: String] = [:]
        var nextListener: UInt64 = 0
        /// How many jobs are in each state.
        var counts: [DownloadState: Int] = [:]
        /// The jobs active now.
        var active: Set<String> = []
        /// The unfinished jobs in queue order (priority, then `order`), made when asked for after a
        /// change of the set or of its order; `nil` until then.
        var ordered: [String]?

        /// Records a job (added, changed or loaded); a finished job's file is free again.
        mutating func store(_ job: Job) {
            let old = jobs.updateValue(job, forKey: job.gid)
            if let old { counts[old.state, default: 0] -= 1 }
            counts[job.state, default: 0] += 1
            if job.state == .active { active.insert(job.gid) } else { active.remove(job.gid) }
            if old == nil || old!.state.isFinal != job.state.isFinal || old!.order != job.order || old!.priority != job.priority {
                ordered = nil
            }
            lastOrder = max(lastOrder, job.order)
            if job.state.isFinal { destinations.remove(job.destination) } else { destinations.insert(job.destination) }
        }

        /// Drops a job: one never committed, or a finished one purged.
        mutating func forget(_ job: Job) {
            guard let old = jobs.removeValue(forKey: job.gid) else { return }
            counts[old.state, default: 0] -= 1
            active.remove(old.gid)
            if !old.state.isFinal {
                destinations.remove(old.destination)
                ordered = nil
            }
        }

        /// The unfinished jobs' GIDs in queue order.
        mutating func queueOrder() -> [String] {
            if let ordered { return ordered }
            let made = jobs.values.filter { !$0.state.isFinal }
                .sorted { ($0.priority, -$0.order) > ($1.priority, -$1.order) }.map(\.gid)
            ordered = made
            return made
        }

        /// A sort key for a job placed at `position` among the unfinished ones (the end if `nil`).
        func order(at position: Int?) -> Double {
            guard let position else { return lastOrder + 1 }
            let live = jobs.values.filter { !$0.state.isFinal }.map(\.order).sorted()
            guard position < live.count else { return lastOrder + 1 }
            let index = max(0, position)
            let after = live[index]
            let before = index > 0 ? live[index - 1] : after - 2
            return (before + after) / 2
        }
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
    public init(store: any JobStore, root: DownloadRoot, maximumActive: Int = 5, maximumPerHost: Int? = nil, bytesPerSecond: Int64? = nil,
                schedule: String? = nil, hooks: Hooks = Hooks(), webhook: Webhook? = nil,
                defaults: DownloadOptions = DownloadOptions(), logger: Logger) async throws {
        self.hooks = hooks
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
        queue = DownloadQueue(maximumActive: maximumActive, bytesPerSecond: bytesPerSecond)
        queue.setMaximumActivePerHost(maximumPerHost)
        writer = StoreWriter(store: store) { [logger] error in
            logger.error("job changes could not be saved", metadata: ["error": "\(error)"])
        }
        sessionID = Self.newGID()
        limits = ScheduleRunner(queue: queue, bytesPerSecond: bytesPerSecond, maximumActive: maximumActive)
        let subscription = queue.subscribe(keepingProgress: 1)
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
        writer.rows.withLockedValue { rows in
            rows = { [weak self] gids in
                guard let self else { return [] }
                return self.state.withLockedValue { state in gids.compactMap { state.jobs[$0] } }
            }
        }
        try await restore()
        limits.setSchedule(parsedSchedule, text: schedule ?? "")
        // Hooks that were due when the daemon stopped (never one that already started).
        for job in allJobs() where job.hookPending { runHook(job.gid) }
        for job in allJobs() where job.webhookPending { sendWebhook(job.gid) }
    }

    /// Puts the stored jobs back.
    private func restore() async throws {
        let stored = try await store.loadAll().sorted { $0.order < $1.order }
        state.withLockedValue { state in for job in stored { state.store(job) } }
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
        limits.stop()
        await queue.shutdown()
        events.cancel()
        await writer.flush()
        for listener in listeners.withLockedValue({ $0.values }) { listener.finish() }
    }

    // MARK: - Jobs

    /// Adds a download, committed before this returns.
    ///
    /// - Parameters:
    ///   - uris: its URL, then its mirrors.
    ///   - options: aria2 options (see ``Aria2Options``).
    ///   - position: its place among the unfinished jobs; the end by default.
    /// - Returns: its GID.
    public func add(uris: [String], options: [String: String], position: Int? = nil) async throws(RPCError) -> String {
        try await add([(uris, options, position)])[0].get()
    }

    /// Adds several downloads with one commit (a `system.multicall` of `addUri`s): each is
    /// checked and placed in order, all that passed are committed together, then queued.
    public func add(_ requests: [(uris: [String], options: [String: String], position: Int?)]) async -> [Result<String, RPCError>] {
        var results: [Result<String, RPCError>] = []
        var accepted: [(job: Job, options: DownloadOptions, position: Int?)] = []
        for request in requests {
            do throws(RPCError) {
                let (job, options) = try prepare(uris: request.uris, options: request.options, position: request.position)
                accepted.append((job, options, request.position))
                results.append(.success(job.gid))
            } catch {
                results.append(.failure(error))
            }
        }
        guard !accepted.isEmpty else { return results }
        do {
            try await writer.persist(accepted.map(\.job.gid))
        } catch {
            state.withLockedValue { state in
                for entry in accepted { state.forget(entry.job) }
            }
            let failure = RPCError.failed("the job could not be saved: \(error)")
            return results.map { $0.flatMap { _ in .failure(failure) } }
        }
        for entry in accepted {
            do {
                try enqueue(entry.job, paused: entry.job.state == .paused, position: entry.position)
                logger.info("added", metadata: ["gid": "\(entry.job.gid)", "url": "\(redactedURL(entry.job.uris[0]))"])
            } catch {
                var job = entry.job
                job.state = .failed
                job.errorCode = error.code.description
                job.errorMessage = error.message
                job.finishedAt = Date().timeIntervalSince1970
                state.withLockedValue { $0.store(job) }
                try? await writer.persist([job.gid])
                if let index = results.firstIndex(where: { (try? $0.get()) == job.gid }) { results[index] = .failure(.failed(error.message)) }
            }
        }
        return results
    }

    /// Checks one add and reserves its place and its file; nothing is committed yet.
    private func prepare(uris: [String], options: [String: String], position: Int?) throws(RPCError) -> (Job, DownloadOptions) {
        guard let url = uris.first, !url.isEmpty else { throw RPCError.invalidParams("addUri needs at least one URI") }
        let parsed = try Aria2Options.parse(options, base: downloadOptions(), root: root, resolvingPaths: true)
        var download = parsed.options
        download.mirrors.urls = Array(uris.dropFirst())
        let name = if let out = parsed.out { out } else { try Self.fileName(for: url) }
        let destination = try root.file(name, in: parsed.dir ?? root.path)
        do { try download.validate() } catch { throw RPCError.invalidParams(error.message) }
        guard let scheme = url.split(separator: ":", maxSplits: 1).first?.lowercased(), scheme == "http" || scheme == "https" else {
            throw RPCError.invalidParams("\(redactedURL(url)): only http and https URLs are supported")
        }
        if FileManagerLite.exists(destination.string) {
            throw RPCError.failed("\(destination) exists; choose another `out` (nothing is overwritten)")
        }
        let gid = Self.newGID()
        return try state.withLockedValue { state -> Result<(Job, DownloadOptions), RPCError> in
            guard !state.destinations.contains(destination.string) else {
                return .failure(RPCError.failed("another download in the queue writes \(destination)"))
            }
            let job = Job(gid: gid, order: state.order(at: position), uris: uris, destination: destination.string,
                          options: parsed.reported, state: parsed.paused ? .paused : .waiting,
                          bytesPerSecond: parsed.bytesPerSecond, addedAt: Date().timeIntervalSince1970)
            state.store(job)
            return .success((job, download))
        }.get()
    }

    /// Hands a job to the library queue. Its options are made from the job's aria2 options
    /// when it starts, so that a waiting job costs the queue only a small record (they were
    /// checked when the job was added; its file is already decided).
    private func enqueue(_ job: Job, paused: Bool, position: Int? = nil) throws(DownloadError) {
        // The closure holds the options dictionary (shared with the job's record), not a
        // DownloadOptions value (about 460 bytes per waiting job).
        let (given, mirrors) = (job.options, Array(job.uris.dropFirst()))
        try queue.add(job.uris[0], to: FilePath(job.destination), id: job.gid, priority: job.priority, at: position, paused: paused,
                      bytesPerSecond: job.bytesPerSecond) { [weak self] () throws(DownloadError) -> DownloadOptions in
            guard let self else { throw DownloadError(.interrupted, "the daemon stopped") }
            do throws(RPCError) {
                var options = try Aria2Options.parse(given, base: self.downloadOptions(), root: self.root, resolvingPaths: false).options
                options.mirrors.urls = mirrors
                return options
            } catch {
                throw DownloadError(.usage, error.message)
            }
        }
    }

    /// The settings every download starts from: the daemon's, with the global options applied.
    func downloadOptions() -> DownloadOptions {
        var options = defaults
        // The queue's files are resumed by later runs of the daemon, never overwritten.
        options.allowOverwrite = false
        return options
    }

    /// The queue reported a state change: record the download's state as it is now.
    func stateChanged(_ gid: String) {
        guard let snapshot = queue.snapshot(gid) else { return }
        let (changed, notification) = state.withLockedValue { state -> (Bool, String?) in
            guard var job = state.jobs[gid], job.state != snapshot.state else { return (false, nil) }
            job.state = snapshot.state
            job.priority = snapshot.priority
            if let total = snapshot.progress?.totalBytes { job.totalLength = total }
            if let done = snapshot.progress?.bytesWritten { job.completedLength = done }
            switch snapshot.state {
            case .complete:
                job.totalLength = snapshot.statistics?.size ?? job.totalLength
                job.completedLength = job.totalLength
                job.sha256 = snapshot.statistics?.digests.first { $0.algorithm == .sha256 }?.hex
                job.finishedAt = Date().timeIntervalSince1970
            case .failed:
                job.errorCode = snapshot.error?.code.description
                job.errorMessage = snapshot.error?.message
                job.finishedAt = Date().timeIntervalSince1970
            case .removed:
                job.finishedAt = Date().timeIntervalSince1970
            default:
                break
            }
            if hooks.command(for: snapshot.state) != nil { job.hookPending = true }
            if webhook != nil, snapshot.state == .complete || snapshot.state == .failed { job.webhookPending = true }
            state.store(job)
            return (true, Self.notification(for: snapshot.state))
        }
        guard changed else { return }
        writer.persistSoon([gid])
        if snapshot.state.isFinal { queue.forget(gid) }
        if hooks.command(for: snapshot.state) != nil { runHook(gid) }
        if webhook != nil, snapshot.state == .complete || snapshot.state == .failed { sendWebhook(gid) }
        if let notification { notify(Notification(method: notification, gid: gid)) }
    }

    /// Runs a finished job's hook once: the pending mark is cleared and committed first, so a
    /// kill during the hook never runs it again (the hook itself is not killed with the daemon).
    func runHook(_ gid: String) {
        let (hooks, logger) = (hooks, logger)
        Task {
            guard let job = self.job(gid), job.hookPending, let command = hooks.command(for: job.state) else { return }
            do {
                try await self.update(gid) { $0.hookPending = false }
            } catch {
                logger.error("a hook's start could not be recorded; it is not run", metadata: ["gid": "\(gid)", "error": "\(error)"])
                return
            }
            await Hooks.run(command, for: job, timeout: hooks.timeout, logger: logger)
        }
    }

    /// Delivers a finished job's webhook, then records it delivered.
    func sendWebhook(_ gid: String) {
        guard let webhook else { return }
        let logger = logger
        Task {
            guard let job = self.job(gid), job.webhookPending else { return }
            await webhook.deliver(job, logger: logger)
            try? await self.update(gid) { $0.webhookPending = false }
        }
    }

    static func notification(for state: DownloadState) -> String? {
        switch state {
        case .active: "aria2.onDownloadStart"
        case .paused: "aria2.onDownloadPause"
        case .complete: "aria2.onDownloadComplete"
        case .failed: "aria2.onDownloadError"
        case .removed: "aria2.onDownloadStop"
        default: nil
        }
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

    /// Records the queue's state of `gid` now (after a pause, a resume, a removal).
    func recordQueueState(_ gid: String) async throws(RPCError) {
        guard let snapshot = queue.snapshot(gid) else { return }
        try await update(gid) { job in
            job.state = snapshot.state
            job.priority = snapshot.priority
            if snapshot.state.isFinal, job.finishedAt == nil { job.finishedAt = Date().timeIntervalSince1970 }
        }
        if snapshot.state.isFinal { queue.forget(gid) }
        if let method = Self.notification(for: snapshot.state), snapshot.state != .active {
            notify(Notification(method: method, gid: gid))
        }
    }

    /// Deletes finished jobs from the history (and the store).
    func purge(_ gids: [String]) async throws(RPCError) {
        state.withLockedValue { state in
            for gid in gids { if let job = state.jobs[gid] { state.forget(job) } }
        }
        do { try await writer.delete(gids) } catch { throw RPCError.failed("could not be saved: \(error)") }
    }

    /// Moves a job in the queue; the new sort key is the midpoint of its new neighbours'.
    func move(_ gid: String, to position: Int) async throws(RPCError) -> Int {
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

    // MARK: - Names

    static func fileName(for url: String) throws(RPCError) -> String {
        let name = defaultFileName(forURL: url)
        guard let safe = safeFileName(name) else { throw RPCError.invalidParams("no file name in \(redactedURL(url)); give `out`") }
        return safe
    }

    /// 16 hexadecimal digits, as aria2's GIDs.
    static func newGID() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

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
