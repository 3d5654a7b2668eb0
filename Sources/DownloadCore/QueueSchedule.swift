import DequeModule

/// A download queue's decisions as a value: which waiting download starts next, what a freed
/// slot goes to, and what pausing, removing, re-prioritising or a changed maximum does to the
/// downloads under way. The library's `DownloadQueue` carries the actions out; it decides nothing.
///
/// **Order.** A waiting download with a higher priority starts first; among equal priorities,
/// the one earlier in the queue (its *position*). A download added without a position goes to
/// the end.
///
/// **Slots.** At most ``maximumActive`` downloads hold a slot. A download holds its slot from
/// ``Action/start(_:)`` until it reports ``transferred(_:)`` (its bytes have all arrived; the
/// sync and rename need no network) or ``ended(_:_:)``. A download told to stop
/// (``Action/stop(_:)``) holds its slot until it reports that it ended, so the queue never runs
/// more than the maximum at once, not even while one winds down.
///
/// **A lower maximum** stops the active downloads beyond it, the last in start order (lowest
/// priority, latest position) first; they go back to waiting with their data kept, and start
/// again (resuming) when there is room.
///
/// **Ready ahead** (``readiesAhead``): as many more as ``maximumActive`` are started before a
/// slot is free, and stay waiting, *readied*: their local checks done and their first request
/// parked where the network lets it go (the library's gate) as soon as a download's network part
/// ends. The gate, not the schedule, decides that moment; it is reported with ``admitted(_:)``,
/// and the readied download then takes a slot and becomes active. The readied are always the
/// first waiting in start order: a waiting download moved or re-prioritised ahead of one, or a
/// lower maximum, stops the last readied (it waits again, not readied). A per-host cap counts a
/// readied download for its host.
///
/// Every method returns what the queue must do, in order: ``Action/changed(_:_:)`` for each
/// state change (the seam a store records), ``Action/stop(_:)`` and ``Action/start(_:)``.
public struct QueueSchedule: Sendable, Equatable {
    public typealias ID = String

    /// A download's state, as a user sees it.
    public enum State: String, Sendable, Codable, CaseIterable {
        /// In the queue, waiting for a slot.
        case waiting
        /// Started: probing, transferring, or syncing its file.
        case active
        /// Not to start until resumed; its data is kept.
        case paused
        /// The file is under its final name.
        case complete
        /// It failed; it may be resumed (tried again).
        case failed
        /// Taken out of the queue.
        case removed

        /// Whether nothing more happens to it by itself.
        public var isFinal: Bool { self == .complete || self == .failed || self == .removed }
    }

    /// How a started download ended.
    public enum Outcome: Sendable, Equatable {
        case completed
        case failed
        /// It stopped because it was told to (``Action/stop(_:)``).
        case stopped
    }

    public enum Action: Sendable, Equatable {
        /// Start (or resume) this download.
        case start(ID)
        /// Stop this download under way, keeping its data; it reports ``Outcome/stopped``.
        case stop(ID)
        /// This download's state is now this.
        case changed(ID, State)
    }

    public struct Entry: Sendable, Equatable {
        public let id: ID
        public internal(set) var state: State
        public internal(set) var priority: Int
        /// Holds a slot: started, and neither transferred nor ended.
        public internal(set) var holdsSlot = false
        /// Started and not yet ended (it may have transferred).
        public internal(set) var running = false
        /// Told to stop, and not yet ended.
        public internal(set) var stopping = false
        /// Started ahead and waiting for the network (``QueueSchedule/readiesAhead``): it holds
        /// no slot yet, and its state is still waiting.
        public internal(set) var readied = false
        /// Orders entries by position: lower is earlier.
        var rank: Int
        /// The server it downloads from, for the per-host cap; `nil` for none.
        public internal(set) var host: String? = nil
    }

    /// Each download by its ID, and the IDs in position order (ended ones too, until forgotten).
    /// Kept apart so that the common operations (add at the end, a state change, a freed slot
    /// with nothing waiting) cost no walk through the queue: a daemon holds tens of thousands.
    private var byID: [ID: Entry] = [:]
    private var order: [ID] = []
    /// Slots held now.
    public private(set) var slotsHeld = 0
    /// Downloads waiting, and those started and not yet ended.
    private var waitingCount = 0
    private var runningCount = 0
    /// Downloads holding a slot at most.
    public private(set) var maximumActive: Int
    /// Whether downloads are started ahead, as many as ``maximumActive``, to wait ready.
    public let readiesAhead: Bool
    /// Readied downloads, those told to stop included.
    public private(set) var readiedCount = 0
    /// The readied downloads not told to stop (as many as the maximum at most).
    private var readyIDs: Set<ID> = []
    /// Downloads of one host holding a slot at most; `nil` for no cap.
    public private(set) var maximumPerHost: Int?
    /// Slots held per host.
    private var heldByHost: [String: Int] = [:]
    /// The waiting downloads in start order (priority, then position), kept as they change, so a
    /// freed slot looks at the first few instead of sorting the queue: with a thousand files
    /// queued, sorting them at every freed slot took a seventh of a batch's CPU. A deque, since
    /// the one that starts is nearly always the first: taken from an array, the rest moved up
    /// each time, and with 100,000 queued that was 71 % of the schedule's time.
    private var waiting: Deque<WaitingKey> = []

    /// A waiting download's place in start order: higher priority first, then lower rank.
    private struct WaitingKey: Comparable, Sendable {
        let priority: Int
        let rank: Int
        let id: ID

        static func < (a: WaitingKey, b: WaitingKey) -> Bool {
            a.priority != b.priority ? a.priority > b.priority : a.rank < b.rank
        }

        static func == (a: WaitingKey, b: WaitingKey) -> Bool { a.priority == b.priority && a.rank == b.rank }
    }

    public init(maximumActive: Int, readiesAhead: Bool = false) {
        self.maximumActive = max(1, maximumActive)
        self.readiesAhead = readiesAhead
    }

    /// The downloads in position order.
    public var entries: [Entry] { order.map { byID[$0]! } }

    public func entry(_ id: ID) -> Entry? { byID[id] }

    /// Where `id` is in the queue, from 0: a binary search by rank, which increases along the
    /// order (a daemon asks this of one download among tens of thousands).
    public func position(of id: ID) -> Int? {
        guard let rank = byID[id]?.rank else { return nil }
        var low = 0, high = order.count
        while low < high {
            let middle = (low + high) / 2
            if byID[order[middle]]!.rank < rank { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Whether nothing runs and nothing waits: every download is paused or final.
    public var isIdle: Bool { runningCount == 0 && waitingCount == 0 }

    // MARK: - Operations

    /// Adds a download at `position` (the end when `nil`, clamped to the queue).
    ///
    /// - Precondition: `id` is not in the queue.
    public mutating func add(_ id: ID, priority: Int = 0, at position: Int? = nil, paused: Bool = false, host: String? = nil) -> [Action] {
        precondition(byID[id] == nil, "\(id) is already in the queue")
        let state: State = paused ? .paused : .waiting
        if let position, position < order.count {
            order.insert(id, at: max(0, position))
            byID[id] = Entry(id: id, state: state, priority: priority, rank: 0, host: host)
            renumber()  // (`waiting` too, this one included)
        } else {
            byID[id] = Entry(id: id, state: state, priority: priority, rank: (order.last.flatMap { byID[$0]?.rank } ?? -1) + 1,
                             host: host)
            order.append(id)
            if state == .waiting { insertWaiting(id) }
        }
        if state == .waiting { waitingCount += 1 }
        return [.changed(id, state)] + fill()
    }

    /// Takes `id` out of the queue: stopped first when it runs. A final download is marked
    /// removed.
    public mutating func remove(_ id: ID) -> [Action] {
        guard let entry = byID[id], entry.state != .removed else { return [] }
        return set(id, .removed) + stopIfRunning(id) + fill()
    }

    /// Forgets a final download altogether. Returns whether it did.
    @discardableResult
    public mutating func forget(_ id: ID) -> Bool {
        guard let entry = byID[id], entry.state.isFinal, !entry.running else { return false }
        let position = position(of: id)!
        byID[id] = nil
        order.remove(at: position)
        return true
    }

    /// Pauses a waiting or active download (an active one stops, keeping its data).
    public mutating func pause(_ id: ID) -> [Action] {
        guard let entry = byID[id], entry.state == .waiting || entry.state == .active else { return [] }
        return set(id, .paused) + stopIfRunning(id) + fill()
    }

    /// Lets a paused or failed download wait for a slot again.
    public mutating func resume(_ id: ID) -> [Action] {
        guard let entry = byID[id], entry.state == .paused || entry.state == .failed else { return [] }
        return set(id, .waiting) + fill()
    }

    public mutating func pauseAll() -> [Action] {
        var actions: [Action] = []
        for id in order where byID[id]!.state == .waiting || byID[id]!.state == .active {
            actions += set(id, .paused) + stopIfRunning(id)
        }
        return actions + fill()
    }

    public mutating func resumeAll() -> [Action] {
        var actions: [Action] = []
        for id in order where byID[id]!.state == .paused { actions += set(id, .waiting) }
        return actions + fill()
    }

    /// Moves `id` to `position` (clamped). It changes which waiting download starts next, not
    /// the ones under way.
    public mutating func move(_ id: ID, to position: Int) -> [Action] {
        guard let from = self.position(of: id) else { return [] }
        order.remove(at: from)
        order.insert(id, at: min(max(0, position), order.count))
        renumber()
        return fill()
    }

    public mutating func setPriority(_ id: ID, _ priority: Int) -> [Action] {
        guard let entry = byID[id] else { return [] }
        if entry.state == .waiting { removeWaiting(entry) }
        byID[id]!.priority = priority
        if entry.state == .waiting { insertWaiting(id) }
        return fill()
    }

    /// Changes the most downloads holding a slot at once. A lower maximum stops the active
    /// downloads beyond it, the last in start order first, and they wait again; 0 holds the whole
    /// queue (a schedule's pause) without marking anything paused.
    public mutating func setMaximumActive(_ maximum: Int) -> [Action] {
        maximumActive = max(0, maximum)
        var actions: [Action] = []
        let holding = startOrder(of: order.filter { byID[$0]!.holdsSlot && !byID[$0]!.stopping })
        for id in holding.dropFirst(maximumActive).reversed() {
            actions += set(id, .waiting) + stopIfRunning(id)
        }
        for id in readiedInStartOrder().dropFirst(maximumActive).reversed() { actions += stopIfRunning(id) }
        return actions + fill()
    }

    /// Changes the most downloads of one host holding a slot at once (`nil`: no cap). A lower cap
    /// stops none: it holds back the next starts.
    public mutating func setMaximumPerHost(_ maximum: Int?) -> [Action] {
        maximumPerHost = maximum.map { max(1, $0) }
        return fill()
    }

    // MARK: - Reports from the downloads

    /// A readied download got its place on the network: it takes a slot and is active (unless
    /// told to stop meanwhile: it holds the slot until it ends, its state as the stop left it).
    public mutating func admitted(_ id: ID) -> [Action] {
        guard let entry = byID[id], entry.readied else { return [] }
        byID[id]!.readied = false
        readiedCount -= 1
        readyIDs.remove(id)
        byID[id]!.holdsSlot = true
        slotsHeld += 1
        return (entry.stopping ? [] : set(id, .active)) + fill()
    }

    /// `id`'s bytes have all arrived: its slot is free while its file is synced and renamed. (A
    /// readied download whose admission is not reported yet is active from now.)
    public mutating func transferred(_ id: ID) -> [Action] {
        guard let entry = byID[id] else { return [] }
        if entry.readied {
            unready(entry)
            return (entry.stopping ? [] : set(id, .active)) + fill()
        }
        guard entry.holdsSlot else { return [] }
        byID[id]!.holdsSlot = false
        release(entry)
        return fill()
    }

    /// A started download ended. A download told to stop keeps the state the stop gave it
    /// (paused, waiting or removed); otherwise it is complete or failed (a stop nobody asked for
    /// is a failure).
    public mutating func ended(_ id: ID, _ outcome: Outcome) -> [Action] {
        guard let entry = byID[id], entry.running else { return [] }
        if entry.holdsSlot { release(entry) }
        if entry.readied { unready(entry) }
        runningCount -= 1
        byID[id]!.running = false
        byID[id]!.holdsSlot = false
        byID[id]!.stopping = false
        var actions: [Action] = []
        if !entry.stopping {
            actions += set(id, outcome == .completed ? .complete : .failed)
        } else if outcome == .completed && entry.state != .removed {
            actions += set(id, .complete)  // it finished before the stop reached it
        }
        return actions + fill()
    }

    // MARK: - Decisions

    /// Starts waiting downloads while slots are free, the highest priority first, then the
    /// earliest position, passing over those whose host has its cap of slots. With no slot free,
    /// or nothing waiting, it looks at nothing.
    private mutating func fill() -> [Action] {
        if readiesAhead { return keepReadiedFirst() + ready() }
        var free = maximumActive - slotsHeld
        guard free > 0, waitingCount > 0 else { return [] }
        var actions: [Action] = []
        // Those started leave `waiting` as they start (`set`): the walk goes on from the same index.
        var index = 0
        while free > 0, index < waiting.count {
            let id = waiting[index].id
            // One waiting to end (told to stop) cannot start again yet.
            if byID[id]!.running { index += 1; continue }
            if let cap = maximumPerHost, let host = byID[id]!.host, heldByHost[host, default: 0] >= cap { index += 1; continue }
            byID[id]!.running = true
            byID[id]!.holdsSlot = true
            runningCount += 1
            slotsHeld += 1
            if let host = byID[id]!.host { heldByHost[host, default: 0] += 1 }
            free -= 1
            actions += set(id, .active) + [.start(id)]
        }
        return actions
    }

    /// ``fill()`` when readying ahead: the first waiting downloads in start order are started,
    /// still waiting, while those holding a slot and those readied are fewer than twice the
    /// maximum and the readied fewer than the maximum. Their slots come with ``admitted(_:)``.
    private mutating func ready() -> [Action] {
        var free = min(2 * maximumActive - slotsHeld, maximumActive) - readiedCount
        guard free > 0, waitingCount > 0 else { return [] }
        var actions: [Action] = []
        var index = 0
        while free > 0, index < waiting.count {
            let id = waiting[index].id
            index += 1
            if byID[id]!.running { continue }
            if let cap = maximumPerHost, let host = byID[id]!.host, heldByHost[host, default: 0] >= cap { continue }
            byID[id]!.running = true
            byID[id]!.readied = true
            runningCount += 1
            readiedCount += 1
            readyIDs.insert(id)
            if let host = byID[id]!.host { heldByHost[host, default: 0] += 1 }
            free -= 1
            actions.append(.start(id))
        }
        return actions
    }

    /// A readied download that transferred or ended before its admission was reported: readied
    /// no more, and the count its host took at readying is given back (an admitted one's goes
    /// with its slot, ``release(_:)``).
    private mutating func unready(_ entry: Entry) {
        byID[entry.id]!.readied = false
        readiedCount -= 1
        readyIDs.remove(entry.id)
        if let host = entry.host {
            heldByHost[host, default: 1] -= 1
            if heldByHost[host] == 0 { heldByHost[host] = nil }
        }
    }

    /// Stops the last readied download while a waiting one that is not readied comes before it
    /// in start order (added, resumed, moved or re-prioritised there, or no longer held back by
    /// its host's cap): the readied are always the first waiting. Looks at the waiting up to the
    /// last readied only.
    private mutating func keepReadiedFirst() -> [Action] {
        // Most often (a download added at the end) none that waits unstarted comes before the
        // last readied: found without sorting the readied, at every add of a long list.
        var lastReadied: WaitingKey?
        for id in readyIDs {
            let readied = key(byID[id]!)
            if lastReadied.map({ $0 < readied }) ?? true { lastReadied = readied }
        }
        guard let lastReadied else { return [] }
        var unstartedBefore = false
        for key in waiting {
            guard key < lastReadied else { break }
            if !byID[key.id]!.running { unstartedBefore = true; break }
        }
        guard unstartedBefore else { return [] }
        var actions: [Action] = []
        var readied = readiedInStartOrder().map { key(byID[$0]!) }
        for key in waiting {
            guard let last = readied.last, key < last else { break }
            if byID[key.id]!.running { continue }
            // One its host's cap holds back would not be readied in place of the one stopped.
            if let cap = maximumPerHost, let host = byID[key.id]!.host, heldByHost[host, default: 0] >= cap { continue }
            actions += stopIfRunning(last.id)
            readied.removeLast()
        }
        return actions
    }

    /// The readied downloads not told to stop, in start order (they are all waiting: the
    /// others were told to stop when they left it).
    private func readiedInStartOrder() -> [ID] {
        readyIDs.map { key(byID[$0]!) }.sorted().map(\.id)
    }

    /// A slot given back.
    private mutating func release(_ entry: Entry) {
        slotsHeld -= 1
        if let host = entry.host {
            heldByHost[host, default: 1] -= 1
            if heldByHost[host] == 0 { heldByHost[host] = nil }
        }
    }

    /// `ids` by priority (highest first), then position.
    private func startOrder(of ids: [ID]) -> [ID] {
        ids.sorted { (-byID[$0]!.priority, byID[$0]!.rank) < (-byID[$1]!.priority, byID[$1]!.rank) }
    }

    /// Ranks from the order, after an insertion or a move.
    private mutating func renumber() {
        for (rank, id) in order.enumerated() { byID[id]!.rank = rank }
        waiting = Deque(order.compactMap { id in byID[id].flatMap { $0.state == .waiting ? key($0) : nil } }.sorted())
    }

    private func key(_ entry: Entry) -> WaitingKey { WaitingKey(priority: entry.priority, rank: entry.rank, id: entry.id) }

    /// Where `key` goes in `waiting` (the first index whose key is not before it).
    private func waitingIndex(of key: WaitingKey) -> Int {
        var low = 0, high = waiting.count
        while low < high {
            let middle = (low + high) / 2
            if waiting[middle] < key { low = middle + 1 } else { high = middle }
        }
        return low
    }

    private mutating func insertWaiting(_ id: ID) {
        let key = key(byID[id]!)
        waiting.insert(key, at: waitingIndex(of: key))
    }

    /// Takes `entry` (as it is in `byID` now: same priority and rank) out of `waiting`.
    private mutating func removeWaiting(_ entry: Entry) {
        let key = key(entry)
        let index = waitingIndex(of: key)
        if index < waiting.count && waiting[index].id == entry.id {
            waiting.remove(at: index)
        } else if let found = waiting.firstIndex(where: { $0.id == entry.id }) {
            assertionFailure("\(entry.id) is out of place among the waiting")
            waiting.remove(at: found)
        }
    }

    private mutating func stopIfRunning(_ id: ID) -> [Action] {
        guard let entry = byID[id], entry.running, !entry.stopping else { return [] }
        byID[id]!.stopping = true
        readyIDs.remove(id)
        return [.stop(id)]
    }

    private mutating func set(_ id: ID, _ state: State) -> [Action] {
        let old = byID[id]!.state
        guard old != state else { return [] }
        if old == .waiting {
            waitingCount -= 1
            removeWaiting(byID[id]!)
        }
        byID[id]!.state = state
        if state == .waiting {
            waitingCount += 1
            insertWaiting(id)
        }
        return [.changed(id, state)]
    }

    public static func == (a: QueueSchedule, b: QueueSchedule) -> Bool {
        a.entries == b.entries && a.maximumActive == b.maximumActive
    }
}
