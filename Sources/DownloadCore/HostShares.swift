/// One host's connection cap, shared fairly among the downloads that use it: the decisions of
/// ``Session``'s per-host limit, as a value.
///
/// Every request holds a slot from before it is sent until its transfer ends. A request that
/// finds every slot taken waits with a ticket. A freed slot goes to the waiting download that
/// holds the fewest slots, the earliest ticket on a tie, so a download that arrives while
/// another holds every slot gets one as soon as any transfer ends, and over a few transfers the
/// downloads hold equal shares. A download whose connection goes idle thereby gives its slot to
/// another download of the same host.
public struct HostShares: Sendable, Equatable {
    public struct Ticket: Sendable, Hashable, Comparable {
        public let value: Int
        public static func < (a: Ticket, b: Ticket) -> Bool { a.value < b.value }
    }

    /// What a request gets.
    public enum Answer: Sendable, Equatable {
        case granted
        case waiting(Ticket)
    }

    /// Slots at once. It may change while requests hold slots (``setCap(_:)``).
    public private(set) var cap: Int
    /// Slots in use, over every download.
    public private(set) var inUse = 0
    private var held: [Int: Int] = [:]
    private var waiting: [(ticket: Ticket, download: Int)] = []
    private var nextTicket = 0

    public init(cap: Int) {
        precondition(cap >= 1)
        self.cap = cap
    }

    /// Slots `download` holds.
    public func held(by download: Int) -> Int { held[download, default: 0] }

    /// The slots a new request would get at once while `pending` more requests are known to be
    /// coming (files of a batch not begun): the free ones when no request waits and none is
    /// coming, else none. Work not yet started comes first: a download splits a healthy range
    /// only with room (``DownloadMachine/hostRoom``).
    public func room(pending: Int = 0) -> Int {
        waiting.isEmpty && pending <= 0 ? max(0, cap - inUse) : 0
    }

    /// Requests waiting, in ticket order.
    public var waitingDownloads: [Int] { waiting.map(\.download) }

    /// Asks for a slot for `download`: granted at once when one is free (nobody waits then),
    /// or a ticket to wait with.
    public mutating func request(for download: Int) -> Answer {
        if inUse < cap {
            take(for: download)
            return .granted
        }
        let ticket = Ticket(value: nextTicket)
        nextTicket += 1
        waiting.append((ticket, download))
        return .waiting(ticket)
    }

    /// Gives back a slot of `download`; returns the ticket that now holds it, if one waited
    /// (none while more slots are in use than a lowered cap allows).
    public mutating func release(by download: Int) -> Ticket? {
        guard let count = held[download], count > 0 else { return nil }
        held[download] = count == 1 ? nil : count - 1
        inUse -= 1
        return grantNext()
    }

    /// Changes the cap (at least 1). A higher cap grants waiting requests at once, in the order a
    /// freed slot would go to them; the tickets returned now hold a slot. A lower cap takes no
    /// slot back: the requests holding slots keep them, and no slot is granted until fewer than
    /// the new cap are in use.
    public mutating func setCap(_ newCap: Int) -> [Ticket] {
        cap = max(1, newCap)
        var granted: [Ticket] = []
        while let ticket = grantNext() { granted.append(ticket) }
        return granted
    }

    /// Grants a slot to the waiter whose download holds the fewest slots (the earliest ticket
    /// on a tie), when one is free.
    private mutating func grantNext() -> Ticket? {
        guard inUse < cap, let index = waiting.indices.min(by: {
            (held(by: waiting[$0].download), waiting[$0].ticket) < (held(by: waiting[$1].download), waiting[$1].ticket)
        }) else { return nil }
        let chosen = waiting.remove(at: index)
        take(for: chosen.download)
        return chosen.ticket
    }

    /// A waiting request gives up (its task was cancelled). Returns whether it was waiting.
    @discardableResult
    public mutating func withdraw(_ ticket: Ticket) -> Bool {
        guard let index = waiting.firstIndex(where: { $0.ticket == ticket }) else { return false }
        waiting.remove(at: index)
        return true
    }

    private mutating func take(for download: Int) {
        held[download, default: 0] += 1
        inUse += 1
    }

    public static func == (a: HostShares, b: HostShares) -> Bool {
        a.cap == b.cap && a.inUse == b.inUse && a.held == b.held && a.nextTicket == b.nextTicket
            && a.waiting.map(\.ticket) == b.waiting.map(\.ticket) && a.waiting.map(\.download) == b.waiting.map(\.download)
    }
}
