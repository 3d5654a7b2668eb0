/// At most `permits` downloads of a batch on the network at once, while others wait ready: their
/// local checks done and their first request made, parked here rather than on a transport.
///
/// A download holds its permit (through its ``NetworkTicket``) from its first transfer until its
/// network part is over. When that ends on the transport thread (a conditional request answered
/// `304`: the file is unchanged), the permit passes to the first download waiting there and then,
/// and its request is started by the same thread, on the connection just freed. Without the
/// gate the next file's request came after a chain of thread hand-offs (the answer to the pool,
/// the queue's next start, the local checks on an I/O thread, back to the transport thread): on
/// two cores shared with the server, 1.3 ms at the median and 2.4 on average per file, paid once
/// per round trip by a list of many small files.
///
/// The request that goes first is the one waiting longest, started by the transport thread whose
/// connection was just freed, whichever transport its download was given: so that connection is
/// the one reused, and no new one is opened elsewhere. (Given back on the pool, when a download's
/// network part ends there, the permit sends the request to that download's transport.)
///
/// A permit given without a freed connection (one of a list's first, or one a higher number of
/// permits adds) sends its request to the session's transport holding the fewest permits, the
/// download's own on a tie. Sent to the download's own, two of a list's first requests sometimes
/// went to one thread (a download readied ahead took a free permit before an active one of
/// another thread), and the two connections stayed on it to the end, each file's request waiting
/// for the other's answer to be handled.
///
/// Thread safety: any thread; the state, the tickets' stages included, is under one lock.
final class NetworkGate: Sendable {
    struct Waiter {
        let ticket: NetworkTicket
        let transfer: CurlTransfer
        let transport: CurlTransport
    }

    struct State {
        var permits: Int
        var free: Int
        var waiting: [Waiter] = []
        /// Permits held by downloads sent to each of ``NetworkGate/transports``.
        var held: [Int]
    }

    /// The transfers a permit lets go, each with the transport to start it on. Nearly always one
    /// (a download waits here with its first request), held without allocating, since it is made
    /// under the gate's lock. (Measured alone, this did not change how often the transport
    /// threads slept on that lock: 682 futex calls on it for 2,000 files against 748; the
    /// spinning lock is what helped.)
    struct Handed {
        private var first: (transfer: CurlTransfer, transport: CurlTransport)?
        private var more: [(transfer: CurlTransfer, transport: CurlTransport)] = []

        mutating func append(_ transfer: CurlTransfer, on transport: CurlTransport) {
            if first == nil { first = (transfer, transport) } else { more.append((transfer, transport)) }
        }

        mutating func append(contentsOf other: Handed) {
            other.forEach { append($0, on: $1) }
        }

        func forEach(_ body: (CurlTransfer, CurlTransport) -> Void) {
            if let first { body(first.transfer, first.transport) }
            for (transfer, transport) in more { body(transfer, transport) }
        }
    }

    /// Under a ``SpinningLock``: the transport threads of a list whose answers come in step all
    /// take it at once, to hand their permits on.
    let state: SpinningLock<State>

    /// The session's transports, which a permit given without a freed connection chooses from;
    /// empty: each download's own.
    let transports: [CurlTransport]

    init(permits: Int, transports: [CurlTransport] = []) {
        self.transports = transports
        state = SpinningLock(State(permits: max(1, permits), free: max(1, permits), held: Array(repeating: 0, count: transports.count)))
    }

    /// Changes how many downloads may be on the network at once (0 lets none go). A higher number
    /// lets the longest waiting go now, each to its own transport; a lower one takes permits back
    /// as they are given back.
    func setPermits(_ permits: Int) {
        let permits = max(0, permits)
        var admitted: [NetworkTicket] = []
        let go = state.withLock { state -> Handed in
            state.free += permits - state.permits
            state.permits = permits
            var go = Handed()
            while state.free > 0, let first = state.waiting.first?.ticket {
                state.free -= 1
                go.append(contentsOf: handOn(to: first, freedOn: nil, &state))
                admitted.append(first)
            }
            return go
        }
        for ticket in admitted { ticket.admitted?() }
        go.forEach { transfer, transport in transport.enqueue(transfer) }
    }

    /// Permits not held.
    var free: Int { state.withLock { $0.free } }

    /// Requests waiting for a permit.
    var waiting: Int { state.withLock { $0.waiting.count } }

    /// The transport `transfer` (of the download holding `ticket`, given `transport`) goes to
    /// now, or nil: it waits here, and is handed to a transport when its download gets a permit.
    /// A transfer already asked to cancel goes at once (its transport ends it).
    func admit(_ transfer: CurlTransfer, ticket: NetworkTicket, on transport: CurlTransport) -> CurlTransport? {
        let (go, holds) = state.withLock { state -> (CurlTransport?, Bool) in
            if transfer.cancelRequested.load(ordering: .acquiring) { return (transport, false) }
            switch ticket.stage {
            case .holding, .released:
                return (transport, false)
            case .none where state.free > 0:
                state.free -= 1
                ticket.stage = .holding
                let chosen = place(ticket, own: transport, freedOn: nil, &state)
                if chosen !== transport { transfer.owner = chosen }
                return (chosen, true)
            case .none, .waiting:
                if ticket.stage == .none { ticket.waitingSince = .now }
                ticket.stage = .waiting
                state.waiting.append(Waiter(ticket: ticket, transfer: transfer, transport: transport))
                ticket.waitingTransfers += 1
                return (nil, false)
            }
        }
        if holds { ticket.admitted?() }
        return go
    }

    /// Under the lock: where the download of `ticket`, given a permit now, starts, counted there:
    /// `freedOn` when given; else the transport holding the fewest permits, `own` on a tie.
    private func place(_ ticket: NetworkTicket, own: CurlTransport, freedOn: CurlTransport?, _ state: inout State) -> CurlTransport {
        guard let least = state.held.min() else { return freedOn ?? own }
        let index: Int
        if let freedOn, let freed = transports.firstIndex(where: { $0 === freedOn }) {
            index = freed
        } else if let mine = transports.firstIndex(where: { $0 === own }), state.held[mine] == least {
            index = mine
        } else {
            index = state.held.firstIndex(of: least)!
        }
        state.held[index] += 1
        ticket.heldOn = index
        return transports[index]
    }

    /// Takes a waiting transfer out (its task was cancelled); `false` when it is not waiting
    /// (it went to its transport, which ends it).
    func withdraw(_ transfer: CurlTransfer) -> Bool {
        state.withLock { state in
            guard let index = state.waiting.firstIndex(where: { $0.transfer === transfer }) else { return false }
            let ticket = state.waiting.remove(at: index).ticket
            ticket.waitingTransfers -= 1
            if ticket.waitingTransfers == 0 {
                ticket.stage = .none
                if let since = ticket.waitingSince { ticket.waitedTotal += .now - since }
                ticket.waitingSince = nil
            }
            return true
        }
    }

    /// Under the lock: gives up `ticket`'s permit, if it holds one, to the download waiting
    /// longest (unless fewer permits are wanted now); returns the transfers that may now start,
    /// each with its transport: `freedOn` when given (the thread giving the permit back starts
    /// them), else its own; and the ticket that got the permit, if one did.
    func release(_ ticket: NetworkTicket, freedOn: CurlTransport?,
                 _ state: inout State) -> (go: Handed, admitted: NetworkTicket?) {
        let held = ticket.stage
        ticket.stage = .released
        switch held {
        case .released, .none:
            return (Handed(), nil)
        case .waiting:
            // Its download ended while a transfer of it waited: they go, and end at once.
            return (handOn(to: ticket, freedOn: freedOn, &state), nil)
        case .holding:
            if let index = ticket.heldOn {
                state.held[index] -= 1
                ticket.heldOn = nil
            }
            guard state.free >= 0, let first = state.waiting.first?.ticket else {
                state.free += 1
                return (Handed(), nil)
            }
            return (handOn(to: first, freedOn: freedOn, &state), first)
        }
    }

    /// Under the lock: `next` holds a permit (or, released, passes freely); its waiting
    /// transfers leave the queue, to go to `freedOn`, or else (``place(_:own:freedOn:_:)``) the
    /// transport holding the fewest permits; released, to `freedOn` or their own.
    private func handOn(to next: NetworkTicket, freedOn: CurlTransport?, _ state: inout State) -> Handed {
        let getsPermit = next.stage == .waiting
        if getsPermit {
            next.stage = .holding
            if let since = next.waitingSince { next.waitedTotal += .now - since }
            next.waitingSince = nil
        }
        var placed: CurlTransport?
        var go = Handed()
        // Nearly always the first waiter alone: the search stops at the last of `next`'s, and
        // the others are not looked at (nor retained, which under this lock others wait for).
        var index = 0
        while next.waitingTransfers > 0, index < state.waiting.count {
            guard state.waiting[index].ticket === next else {
                index += 1
                continue
            }
            let waiter = state.waiting.remove(at: index)
            next.waitingTransfers -= 1
            if getsPermit && placed == nil { placed = place(next, own: waiter.transport, freedOn: freedOn, &state) }
            let transport = placed ?? freedOn ?? waiter.transport
            if transport !== waiter.transport { waiter.transfer.owner = transport }
            go.append(waiter.transfer, on: transport)
        }
        return go
    }
}

/// One download's claim on a ``NetworkGate``: none yet, a transfer waiting, a permit held, or
/// given back for good (later transfers of the download pass freely).
///
/// `@unchecked Sendable`: `stage`, `waitingTransfers`, `waitingSince`, `waitedTotal` and
/// `heldOn` are read and written only under the gate's lock.
final class NetworkTicket: @unchecked Sendable {
    enum Stage { case none, waiting, holding, released }

    let gate: NetworkGate
    /// Told (on the thread that lets it go, outside the gate's lock) when the download gets its
    /// permit: a queue readying ahead then counts it active.
    let admitted: (@Sendable () -> Void)?
    var stage = Stage.none
    /// How many of its transfers wait at the gate.
    var waitingTransfers = 0
    /// Since when a transfer of it waits at the gate; `nil` when none does.
    var waitingSince: ContinuousClock.Instant?
    /// How long its transfers waited at the gate, in all.
    var waitedTotal: Duration = .zero
    /// While it holds a permit: the index, in the gate's transports, of the one it was sent to.
    var heldOn: Int?

    init(gate: NetworkGate, admitted: (@Sendable () -> Void)? = nil) {
        self.gate = gate
        self.admitted = admitted
    }

    /// How long the download waited at the gate for its permit: not part of its time (its time
    /// limit, its duration and speed count from its start less this wait, as a download waiting
    /// for a queue's slot had not begun).
    var waited: Duration { gate.state.withLock { _ in waitedTotal } }

    /// Gives the permit back (once; later calls do nothing) and hands it on: the transfers that
    /// may start go to `freedOn` (the transport where a connection was freed; without one, each to
    /// its own), started there by `startHere` when the caller is that transport's thread.
    ///
    /// The download given the permit is told (``admitted``) here, after its requests are on their
    /// way; with `tellLater`, it is returned instead, for a transport thread to tell once it has
    /// sent them (the news starts a task, whose wake-up of Swift's pool would come first).
    /// Permits are counted under the gate's lock either way.
    @discardableResult
    func release(freedOn: CurlTransport? = nil, tellLater: Bool = false,
                 startHere: ((CurlTransfer) -> Void)? = nil) -> NetworkTicket? {
        let (go, next) = gate.state.withLock { gate.release(self, freedOn: freedOn, &$0) }
        go.forEach { transfer, transport in
            if let startHere, transport === freedOn {
                startHere(transfer)
            } else {
                transport.enqueue(transfer)
            }
        }
        if tellLater { return next }
        next?.admitted?()
        return nil
    }
}
