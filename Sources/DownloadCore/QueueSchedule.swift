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
    }

    /// The downloads in position order (ended ones too, until forgotten).
    public private(set) var entries: [Entry] = []
    /// Downloads holding a slot at most.
    public private(set) var maximumActive: Int

    public init(maximumActive: Int) {
        self.maximumActive = max(1, maximumActive)
    }

    public func entry(_ id: ID) -> Entry? { entries.first { $0.id == id } }

    /// Where `id` is in the queue, from 0.
    public func position(of id: ID) -> Int? { entries.firstIndex { $0.id == id } }

    /// Slots held now.
    public var slotsHeld: Int { entries.count { $0.holdsSlot } }

    /// Whether nothing runs and nothing waits: every download is paused or final.
    public var isIdle: Bool { entries.allSatisfy { !$0.running && $0.state != .waiting } }

    // MARK: - Operations

    /// Adds a download at `position` (the end when `nil`, clamped to the queue).
    ///
    /// - Precondition: `id` is not in the queue.
    public mutating func add(_ id: ID, priority: Int = 0, at position: Int? = nil, paused: Bool = false) -> [Action] {
        precondition(index(id) == nil, "\(id) is already in the queue")
        let entry = Entry(id: id, state: paused ? .paused : .waiting, priority: priority)
        entries.insert(entry, at: min(max(0, position ?? entries.count), entries.count))
        return [.changed(id, entry.state)] + fill()
    }

    /// Takes `id` out of the queue: stopped first when it runs. A final download is marked
    /// removed.
    public mutating func remove(_ id: ID) -> [Action] {
        guard let i = index(id), entries[i].state != .removed else { return [] }
        return set(i, .removed) + stopIfRunning(i) + fill()
    }

    /// Forgets a final download altogether. Returns whether it did.
    @discardableResult
    public mutating func forget(_ id: ID) -> Bool {
        guard let i = index(id), entries[i].state.isFinal, !entries[i].running else { return false }
        entries.remove(at: i)
        return true
    }

    /// Pauses a waiting or active download (an active one stops, keeping its data).
    public mutating func pause(_ id: ID) -> [Action] {
        guard let i = index(id), entries[i].state == .waiting || entries[i].state == .active else { return [] }
        return set(i, .paused) + stopIfRunning(i) + fill()
    }

    /// Lets a paused or failed download wait for a slot again.
    public mutating func resume(_ id: ID) -> [Action] {
        guard let i = index(id), entries[i].state == .paused || entries[i].state == .failed else { return [] }
        return set(i, .waiting) + fill()
    }

    public mutating func pauseAll() -> [Action] {
        var actions: [Action] = []
        for i in entries.indices where entries[i].state == .waiting || entries[i].state == .active {
            actions += set(i, .paused) + stopIfRunning(i)
        }
        return actions + fill()
    }

    public mutating func resumeAll() -> [Action] {
        var actions: [Action] = []
        for i in entries.indices where entries[i].state == .paused { actions += set(i, .waiting) }
        return actions + fill()
    }

    /// Moves `id` to `position` (clamped). It changes which waiting download starts next, not
    /// the ones under way.
    public mutating func move(_ id: ID, to position: Int) -> [Action] {
        guard let i = index(id) else { return [] }
        let entry = entries.remove(at: i)
        entries.insert(entry, at: min(max(0, position), entries.count))
        return fill()
    }

    public mutating func setPriority(_ id: ID, _ priority: Int) -> [Action] {
        guard let i = index(id) else { return [] }
        entries[i].priority = priority
        return fill()
    }

    /// Changes the most downloads holding a slot at once (at least 1). A lower maximum stops
    /// the active downloads beyond it, the last in start order first, and they wait again.
    public mutating func setMaximumActive(_ maximum: Int) -> [Action] {
        maximumActive = max(1, maximum)
        var actions: [Action] = []
        var excess = entries.count { $0.holdsSlot && !$0.stopping } - maximumActive
        for i in startOrder(of: entries.indices.filter { entries[$0].holdsSlot && !entries[$0].stopping }).reversed() where excess > 0 {
            actions += set(i, .waiting) + stopIfRunning(i)
            excess -= 1
        }
        return actions + fill()
    }

    // MARK: - Reports from the downloads

    /// `id`'s bytes have all arrived: its slot is free while its file is synced and renamed.
    public mutating func transferred(_ id: ID) -> [Action] {
        guard let i = index(id), entries[i].holdsSlot else { return [] }
        entries[i].holdsSlot = false
        return fill()
    }

    /// A started download ended. A download told to stop keeps the state the stop gave it
    /// (paused, waiting or removed); otherwise it is complete or failed (a stop nobody asked for
    /// is a failure).
    public mutating func ended(_ id: ID, _ outcome: Outcome) -> [Action] {
        guard let i = index(id), entries[i].running else { return [] }
        let wasStopping = entries[i].stopping
        entries[i].running = false
        entries[i].holdsSlot = false
        entries[i].stopping = false
        var actions: [Action] = []
        if !wasStopping {
            actions += set(i, outcome == .completed ? .complete : .failed)
        } else if outcome == .completed && entries[i].state != .removed {
            actions += set(i, .complete)  // it finished before the stop reached it
        }
        return actions + fill()
    }

    // MARK: - Decisions

    /// Starts waiting downloads while slots are free, the highest priority first, then the
    /// earliest position.
    private mutating func fill() -> [Action] {
        var actions: [Action] = []
        var free = maximumActive - slotsHeld
        let candidates = startOrder(of: entries.indices.filter { entries[$0].state == .waiting && !entries[$0].running })
        for i in candidates where free > 0 {
            entries[i].running = true
            entries[i].holdsSlot = true
            actions += set(i, .active) + [.start(entries[i].id)]
            free -= 1
        }
        return actions
    }

    /// `indices` by priority (highest first), then position.
    private func startOrder(of indices: [Int]) -> [Int] {
        indices.sorted { (-entries[$0].priority, $0) < (-entries[$1].priority, $1) }
    }

    private mutating func stopIfRunning(_ i: Int) -> [Action] {
        guard entries[i].running, !entries[i].stopping else { return [] }
        entries[i].stopping = true
        return [.stop(entries[i].id)]
    }

    private mutating func set(_ i: Int, _ state: State) -> [Action] {
        guard entries[i].state != state else { return [] }
        entries[i].state = state
        return [.changed(entries[i].id, state)]
    }

    private func index(_ id: ID) -> Int? { entries.firstIndex { $0.id == id } }
}
