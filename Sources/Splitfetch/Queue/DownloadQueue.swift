public import SystemPackage
import DownloadCore
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// A live queue of downloads: downloads are added while it runs, each with an identifier, a
/// state, a priority and a position; up to ``maximumActive`` run at once over one ``Session``.
///
/// ```swift
/// let queue = DownloadQueue(maximumActive: 3)
/// let id = try queue.add("https://example.org/a.iso", to: "/data/a.iso")
/// Task { for await event in queue.subscribe() { show(event) } }
/// queue.pause(id)
/// queue.resume(id)
/// await queue.waitUntilIdle()
/// await queue.shutdown()
/// ```
///
/// **Decisions.** Which waiting download starts next, what a freed slot goes to and what a
/// changed maximum stops are decided by a pure value (the download core's `QueueSchedule`,
/// proven by table tests): the highest priority first, then the earliest position. A download
/// frees its slot once its bytes have all arrived, so the next starts while its file is synced.
///
/// **Pausing** stops a running download and keeps its data and manifest; resuming starts it
/// again, and it resumes where its data is. A failed download can be resumed too: it is tried
/// again.
///
/// **Events.** Every state change and every event of every download reaches each subscriber
/// (``subscribe(to:keepingProgress:statesOnly:endsOnly:)``), in order, at its own pace: a slow subscriber loses only
/// its own oldest progress events, and never slows a download. The state changes are the seam a
/// store records to persist the queue.
///
/// **Limits** change while downloads run: the queue's rate (``setBytesPerSecond(_:)``), one
/// download's (``setBytesPerSecond(_:for:)``), the most active (``setMaximumActive(_:)``) and,
/// with a session that has one, the per-host cap (``Session/setMaximumConnectionsPerHost(_:)``).
///
/// The queue is in memory: persisting it is its owner's job.
///
/// Thread safety: `Sendable`; every method may be called from any task or thread.
public final class DownloadQueue: Sendable {
    public typealias ID = String

    /// Kept small: a daemon holds tens of thousands of waiting downloads, and the options, an
    /// error and statistics (about 700 bytes together) live behind references; its host is its
    /// schedule entry's.
    struct Record {
        var url: String
        var destination: FilePath
        /// Its settings, made at each start.
        let options: @Sendable (ID) throws(DownloadError) -> DownloadOptions
        /// Its own budget, within the queue's: made when it first starts or is given a rate, so
        /// that a waiting download costs no budget (a daemon holds tens of thousands).
        var limit: RateLimit?
        var task: Task<Void, Never>?
        /// Which run is under way: reports of an earlier one are ignored.
        var run = 0
        var progress: Boxed<DownloadProgress>?
        /// How runs ended: the last run's error, and the statistics of a complete one.
        var ending: Ending?
        /// Counted as work waiting for its host (``Session``'s per-host cap).
        var expected = false
    }

    /// A value a record keeps by reference: a waiting download's record (most of a daemon's tens of
    /// thousands) has none, and stays small.
    final class Boxed<Value: Sendable>: Sendable {
        let value: Value
        init(_ value: Value) { self.value = value }
    }

    final class Ending: Sendable {
        let error: DownloadError?
        let statistics: DownloadStatistics?

        init(error: DownloadError?, statistics: DownloadStatistics?) {
            self.error = error
            self.statistics = statistics
        }
    }

    struct State {
        var schedule: QueueSchedule
        var records: [ID: Record] = [:]
        var subscribers: [Subscription] = []
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        var closed = false
    }

    /// What to do once the lock is let go.
    struct Effects {
        var stops: [Task<Void, Never>] = []
        var wakes: [CheckedContinuation<Void, Never>] = []
        var ended: [EventSubscriber<QueueEvent>] = []

        func run() {
            for task in stops { task.cancel() }
            for waiter in wakes { waiter.resume() }
            for subscriber in ended { subscriber.finish() }
        }
    }

    /// The connections the downloads share.
    public let session: Session
    private let ownsSession: Bool
    /// The queue's budget: every download's own is within it. Unlimited unless set.
    let limit: RateLimit
    /// Under a ``SpinningLock``, as the batch's ``NetworkGate``: each file's end, event and
    /// admission takes it from the pool's threads, often at once.
    let state: SpinningLock<State>
    /// Sees each run's ``Download`` before it runs (``Session/download(_:jobs:observe:)``).
    let observe: (@Sendable (ID, Download) -> Void)?
    /// Where readied downloads wait for the network (``QueueSchedule/readiesAhead``): as many
    /// permits as ``maximumActive``. `nil` when the queue does not ready ahead.
    let gate: NetworkGate?

    /// - Parameters:
    ///   - session: the session to download over; by default one of the queue's own, ended by
    ///     ``shutdown()``.
    ///   - maximumActive: downloads running at once (at least 1).
    ///   - bytesPerSecond: the queue's rate limit, over every download; `nil` for none.
    ///   - readyAhead: start as many more ahead, still waiting in every view, their local checks
    ///     done and their first request parked at the queue's network gate, so that a download
    ///     whose network part ends hands its place straight to a ready one. On a list of many
    ///     small files this saves a chain of thread hand-offs per file and round trip. Not over a
    ///     session with a cap on connections per host: a download ready at the gate would hold a
    ///     connection of its host that a running one could use.
    public convenience init(session: Session? = nil, maximumActive: Int = 5, bytesPerSecond: Int64? = nil,
                            readyAhead: Bool = false) {
        self.init(session: session, maximumActive: maximumActive, bytesPerSecond: bytesPerSecond, readyAhead: readyAhead,
                  observe: nil)
    }

    init(session: Session?, maximumActive: Int, bytesPerSecond: Int64?, readyAhead: Bool = false,
         observe: (@Sendable (ID, Download) -> Void)?) {
        self.observe = observe
        self.session = session ?? Session()
        ownsSession = session == nil
        limit = RateLimit(unlimitedWithin: nil)
        if let bytesPerSecond { limit.setBytesPerSecond(max(1, bytesPerSecond)) }
        let ahead = readyAhead && self.session.limiter == nil
        state = SpinningLock(State(schedule: QueueSchedule(maximumActive: maximumActive, readiesAhead: ahead)))
        gate = ahead ? NetworkGate(permits: max(1, maximumActive), transports: self.session.transports) : nil
    }

    // MARK: - Adding and changing downloads

    /// Adds a download; it starts when a slot is free and it comes first.
    ///
    /// - Parameters:
    ///   - url: an `http` or `https` URL.
    ///   - destination: where the finished file goes; its directory must exist.
    ///   - id: its identifier; by default a new one of 16 hexadecimal digits.
    ///   - priority: higher starts first; among equals, the earlier position.
    ///   - position: its place in the queue from 0; by default the end.
    ///   - paused: added paused, to start when resumed.
    ///   - options: its settings. Its ``DownloadOptions/rateLimit`` is replaced by one of the
    ///     queue's, within the queue's limit, with the same rate; change it with
    ///     ``setBytesPerSecond(_:for:)``.
    /// - Returns: its identifier.
    /// - Throws: ``DownloadError`` (``DownloadError/Code/usage``) for bad options, a URL that is
    ///   not `http` or `https`, an identifier already in the queue, or a queue shut down.
    @discardableResult
    public func add(_ url: String, to destination: FilePath, options: DownloadOptions = DownloadOptions(), id: ID? = nil,
                    priority: Int = 0, at position: Int? = nil, paused: Bool = false) throws(DownloadError) -> ID {
        try options.validate()
        return try add(url, to: destination, id: id, priority: priority, at: position, paused: paused,
                       bytesPerSecond: options.rateLimit?.bytesPerSecond, optionsAtStart: { _ in options })
    }

    /// Adds a download whose options are made when it starts (at each start), by
    /// `optionsAtStart`, given the download's identifier: a waiting download then holds only what
    /// the closure captures, and one closure that looks the identifier up can serve them all,
    /// which matters to a program that keeps tens of thousands waiting. If it throws, or its
    /// options do not pass ``DownloadOptions/validate()``, the download fails when it starts,
    /// with that error.
    ///
    /// - Parameters:
    ///   - url: an `http` or `https` URL.
    ///   - destination: where the finished file goes; its directory must exist.
    ///   - id: its identifier; by default a new one of 16 hexadecimal digits.
    ///   - priority: higher starts first; among equals, the earlier position.
    ///   - position: its place in the queue from 0; by default the end.
    ///   - paused: added paused, to start when resumed.
    ///   - bytesPerSecond: its own rate limit, within the queue's; `nil` for none.
    ///   - optionsAtStart: makes the settings of the download with this identifier, or throws
    ///     why it cannot. Their
    ///     ``DownloadOptions/rateLimit`` is replaced by the download's own.
    /// - Returns: its identifier.
    /// - Throws: ``DownloadError`` (``DownloadError/Code/usage``) for a URL that is not `http`,
    ///   `https`, `ftp`, `ftps` or `sftp`, an identifier already in the queue, or a queue shut down;
    ///   (``DownloadError/Code/network``) when libcurl cannot be loaded (see ``Libcurl``; the first
    ///   add loads it on the caller's thread unless ``Libcurl/ready()`` was awaited).
    @discardableResult
    public func add(_ url: String, to destination: FilePath, id: ID? = nil, priority: Int = 0, at position: Int? = nil,
                    paused: Bool = false, bytesPerSecond: Int64? = nil,
                    optionsAtStart: @escaping @Sendable (ID) throws(DownloadError) -> DownloadOptions) throws(DownloadError) -> ID {
        try RemoteScheme.check(url)
        let id = id ?? Self.newID()
        let own = bytesPerSecond.map { RateLimit(bytesPerSecond: max(1, $0), within: limit) }
        let record = Record(url: url, destination: destination, options: optionsAtStart, limit: own)
        try change { state throws(DownloadError) in
            guard !state.closed else { throw DownloadError(.usage, "the queue is shut down") }
            guard state.records[id] == nil else { throw DownloadError(.usage, "\(id) is already in the queue") }
            state.records[id] = record
            return state.schedule.add(id, priority: priority, at: position, paused: paused, host: Connector.host(of: url))
        }
        return id
    }

    /// Adds every partial download under `directory` (``PartialDownload/list(in:)``), paused or
    /// not, each under the identifier of its destination's path, with `options` and its
    /// mirrors: after a restart, the queue picks up where the data is.
    ///
    /// - Returns: the identifiers added, in the listing's order.
    @discardableResult
    public func addPartials(in directory: FilePath, options: DownloadOptions = DownloadOptions(),
                            paused: Bool = false) async throws(DownloadError) -> [ID] {
        var ids: [ID] = []
        for partial in try await PartialDownload.list(in: directory) {
            var each = options
            each.mirrors.urls = partial.mirrors
            ids.append(try add(partial.url, to: partial.destination, options: each, id: partial.destination.string, paused: paused))
        }
        return ids
    }

    /// Pauses a waiting or active download; an active one stops and keeps its data.
    @discardableResult
    public func pause(_ id: ID) -> Bool { act { $0.pause(id) } }

    /// Lets a paused or failed download wait for a slot again.
    @discardableResult
    public func resume(_ id: ID) -> Bool { act { $0.resume(id) } }

    public func pauseAll() { _ = act { $0.pauseAll() } }

    public func resumeAll() { _ = act { $0.resumeAll() } }

    /// Moves a download to `position` (from 0, clamped): it changes which waiting download
    /// starts next, not those under way.
    /// Returns whether the download is in the queue.
    @discardableResult
    public func move(_ id: ID, to position: Int) -> Bool {
        var found = false
        act { schedule in
            found = schedule.position(of: id) != nil
            return schedule.move(id, to: position)
        }
        return found
    }

    /// Changes a download's priority: higher starts first. Returns whether it is in the queue.
    @discardableResult
    public func setPriority(_ id: ID, _ priority: Int) -> Bool {
        var found = false
        act { schedule in
            found = schedule.position(of: id) != nil
            return schedule.setPriority(id, priority)
        }
        return found
    }

    /// Downloads running at once.
    public var maximumActive: Int { state.withLock { $0.schedule.maximumActive } }

    /// Downloads from one host (its name and port) running at once, at most; `nil` for no cap.
    public var maximumActivePerHost: Int? { state.withLock { $0.schedule.maximumPerHost } }

    /// Changes the most downloads from one host running at once (`nil`: no cap; at least 1). A
    /// lower cap stops nothing; it holds back the next starts. It is beside the session's cap on
    /// connections per host (``Session/setMaximumConnectionsPerHost(_:)``).
    public func setMaximumActivePerHost(_ maximum: Int?) { _ = act { $0.setMaximumPerHost(maximum) } }

    /// Changes the most downloads running at once. A lower maximum stops the last started
    /// beyond it; they wait again with their data kept. 0 holds the whole queue (nothing
    /// starts, and nothing is marked paused) until the maximum is raised again.
    public func setMaximumActive(_ maximum: Int) {
        _ = act { schedule in
            // The gate's permits change with the schedule's maximum, under the queue's lock so
            // that two changes land in the same order in both.
            gate?.setPermits(max(0, maximum))
            return schedule.setMaximumActive(maximum)
        }
    }

    /// The queue's rate limit over every download; `nil` for none.
    public var bytesPerSecond: Int64? { limit.bytesPerSecond }

    /// Changes the queue's rate limit over every download, from now on; `nil` lifts it.
    public func setBytesPerSecond(_ bytesPerSecond: Int64?) { limit.setBytesPerSecond(bytesPerSecond.map { max(1, $0) }) }

    /// Changes one download's own rate limit (within the queue's), from now on; `nil` lifts it.
    /// Returns whether the download is in the queue.
    @discardableResult
    public func setBytesPerSecond(_ bytesPerSecond: Int64?, for id: ID) -> Bool {
        let (found, own) = state.withLock { state -> (Bool, RateLimit?) in
            guard var record = state.records[id] else { return (false, nil) }
            // No budget yet and no rate to give: the one made at its start is unlimited anyway.
            if record.limit == nil, bytesPerSecond == nil { return (true, nil) }
            if let limit = record.limit { return (true, limit) }
            let made = RateLimit(unlimitedWithin: limit)
            record.limit = made
            state.records[id] = record
            return (true, made)
        }
        own?.setBytesPerSecond(bytesPerSecond.map { max(1, $0) })
        return found
    }

    /// Waits until nothing runs or waits (``waitUntilIdle()``), then shuts the queue down: what
    /// a batch does once every file is added. Cancelling the calling task shuts it down at once:
    /// the downloads under way stop and keep their data (each reports it was interrupted), and
    /// those not begun are not begun.
    public func finish() async {
        await withTaskCancellationHandler {
            await waitUntilIdle()
        } onCancel: {
            Task { await self.shutdown() }
        }
        await shutdown()
    }

    /// Stops every running download (each keeps its data, so a new queue resumes it), ends
    /// every subscriber's stream, and, if the queue made its session, shuts that down. The
    /// states stay as they were; nothing can be added afterwards.
    public func shutdown() async {
        let (tasks, effects) = state.withLock { state -> ([Task<Void, Never>], Effects) in
            state.closed = true
            var effects = Effects()
            effects.wakes = state.idleWaiters
            effects.ended = state.subscribers.map(\.subscriber)
            state.idleWaiters = []
            state.subscribers = []
            for id in state.records.keys {
                if state.records[id]!.expected {
                    state.records[id]!.expected = false
                    session.limiter?.expect(host: state.schedule.entry(id)?.host ?? Connector.host(of: state.records[id]!.url), -1)
                }
            }
            return (state.records.values.compactMap(\.task), effects)
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        effects.run()
        if ownsSession { await session.shutdown() }
    }

    /// 16 hexadecimal digits from the system's random source, as aria2's GIDs.
    static func newID() -> ID {
        var generator = SystemRandomNumberGenerator()
        let value = generator.next() as UInt64
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}

extension DownloadState {
    init(_ state: QueueSchedule.State) {
        self.init(rawValue: state.rawValue)
    }
}

/// A subscriber of a ``DownloadQueue``'s events, and which it wants.
struct Subscription {
    /// Which events a subscriber wants: all of them, or only state changes, runs' last events, or
    /// both.
    struct Interest {
        let states: Bool
        let ends: Bool

        /// Whether `event` is one of them.
        func wants(_ event: QueueEvent) -> Bool {
            if !states && !ends { return true }
            return (states && event.state != nil) || (ends && event.event?.isLast == true)
        }
    }

    let id: DownloadQueue.ID?
    let interest: Interest
    let subscriber: EventSubscriber<QueueEvent>
}
