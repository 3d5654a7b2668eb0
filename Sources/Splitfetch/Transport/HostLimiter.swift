import NIOConcurrencyHelpers
import DownloadCore

/// A session's per-host connection cap: a ``HostShares`` for each host (`host:port`, as libcurl
/// keys its connections) behind one lock, and the tasks waiting for a slot.
///
/// Thread safety: every method may be called from any task or thread; the state is behind a lock
/// and continuations are resumed outside it.
final class HostLimiter: Sendable {
    private struct State {
        var hosts: [String: HostShares] = [:]
        var waiters: [Waiter: CheckedContinuation<Bool, Never>] = [:]
        /// Waits cancelled, or granted, before their continuation was stored.
        var cancelled: Set<Waiter> = []
        var granted: Set<Waiter> = []
        var nextDownload = 0
        /// Per host: files of a batch that will ask for it and have not begun.
        var pending: [String: Int] = [:]
        /// Requests that had to wait for a slot, and the most slots of one host in use at once.
        var waits = 0
        var peakInUse = 0
        var cap: Int
        /// Hosts that answered over HTTP/2: their HTTP/2 requests share one connection.
        var speaksHTTP2: Set<String> = []
        /// Per host, the HTTP/2 connection in use: its streams, and the download whose slot it
        /// holds (the one that opened it). The connection counts once against the cap.
        var multiplexed: [String: (streams: Int, owner: Int)] = [:]
    }

    /// What a request holds while it runs (``acquire(host:download:http2:waiting:)``).
    enum Hold: Sendable, Equatable {
        /// A slot of its own.
        case slot
        /// A stream of the host's HTTP/2 connection, which holds one slot for all its streams.
        case stream
    }

    private struct Waiter: Hashable {
        var host: String
        var ticket: HostShares.Ticket
    }

    private let state: NIOLockedValueBox<State>

    /// Connections to one host at once.
    var cap: Int { state.withLockedValue { $0.cap } }

    /// Requests that waited for a slot so far, and the most slots of one host in use at once.
    var counts: (waits: Int, peakInUse: Int) { state.withLockedValue { ($0.waits, $0.peakInUse) } }

    init(cap: Int) {
        precondition(cap >= 1)
        state = NIOLockedValueBox(State(cap: cap))
    }

    /// Changes the cap of every host: a higher one grants waiting requests at once; a lower one
    /// takes effect as transfers end (no request is stopped).
    func setCap(_ cap: Int) {
        let granted = state.withLockedValue { state -> [CheckedContinuation<Bool, Never>] in
            state.cap = max(1, cap)
            var resumed: [CheckedContinuation<Bool, Never>] = []
            for host in state.hosts.keys {
                for ticket in state.hosts[host]!.setCap(state.cap) {
                    let waiter = Waiter(host: host, ticket: ticket)
                    if let continuation = state.waiters.removeValue(forKey: waiter) {
                        resumed.append(continuation)
                    } else {
                        state.granted.insert(waiter)  // told when it comes to wait
                    }
                }
                state.peakInUse = max(state.peakInUse, state.hosts[host]!.inUse)
            }
            return resumed
        }
        for continuation in granted { continuation.resume(returning: true) }
    }

    /// A number for a new download, whose slots are counted together.
    func newDownload() -> Int {
        state.withLockedValue { state in
            defer { state.nextDownload += 1 }
            return state.nextDownload
        }
    }

    /// The slots of `host` a new request would get at once: none while a request waits or a
    /// file of a batch is still to begin (``HostShares/room(pending:)``).
    func room(host: String) -> Int {
        state.withLockedValue { state in
            // A host no request has used yet has every slot free: the same rule, on a fresh value.
            state.hosts[host, default: HostShares(cap: state.cap)].room(pending: state.pending[host, default: 0])
        }
    }

    /// Counts `change` more (or, negative, fewer) files of a batch that will ask for `host` and
    /// have not begun.
    func expect(host: String, _ change: Int) {
        state.withLockedValue { state in
            let count = state.pending[host, default: 0] + change
            state.pending[host] = count > 0 ? count : nil
        }
    }

    /// Waits for a slot of `host` for `download`. `waiting` is called (before the wait) only when
    /// there is a wait. Returns `false`, without a slot, when the task is cancelled while waiting.
    func acquire(host: String, download: Int, waiting: () -> Void = {}) async -> Bool {
        let answer = state.withLockedValue { state -> HostShares.Answer in
            let answer = state.hosts[host, default: HostShares(cap: state.cap)].request(for: download)
            if case .waiting = answer { state.waits += 1 }
            state.peakInUse = max(state.peakInUse, state.hosts[host]!.inUse)
            return answer
        }
        guard case .waiting(let ticket) = answer else { return true }
        waiting()
        let waiter = Waiter(host: host, ticket: ticket)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let decided = state.withLockedValue { state -> Bool? in
                    if state.cancelled.remove(waiter) != nil { return false }
                    if state.granted.remove(waiter) != nil { return true }
                    state.waiters[waiter] = continuation
                    return nil
                }
                if let decided { continuation.resume(returning: decided) }
            }
        } onCancel: {
            let continuation = state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
                // Granted already: the caller holds the slot and releases it.
                guard state.hosts[host]?.withdraw(ticket) == true else { return nil }
                guard let continuation = state.waiters.removeValue(forKey: waiter) else {
                    state.cancelled.insert(waiter)
                    return nil
                }
                return continuation
            }
            continuation?.resume(returning: false)
        }
    }

    /// Takes a slot of `host` for `download` if a new request would get one at once
    /// (``room(host:)``), without waiting: `true` when taken, to give back with
    /// ``release(host:download:)``.
    func takeFreeSlot(host: String, download: Int) -> Bool {
        state.withLockedValue { state in
            guard state.hosts[host, default: HostShares(cap: state.cap)].room(pending: state.pending[host, default: 0]) > 0,
                  state.hosts[host, default: HostShares(cap: state.cap)].request(for: download) == .granted else { return false }
            state.peakInUse = max(state.peakInUse, state.hosts[host]!.inUse)
            return true
        }
    }

    /// Waits for what a request to `host` needs. A request that may go over HTTP/2 (`http2`), to a
    /// host that answered over HTTP/2 before, becomes a stream of the host's connection: at once
    /// while that connection has streams, or else with a slot taken for the connection. Any
    /// other request takes a slot of its own. `nil`: cancelled while waiting, holding nothing.
    func acquire(host: String, download: Int, http2: Bool, waiting: () -> Void = {}) async -> Hold? {
        guard http2 else { return await acquire(host: host, download: download, waiting: waiting) ? .slot : nil }
        let joined = state.withLockedValue { state -> Bool? in
            guard state.speaksHTTP2.contains(host) else { return nil }
            guard let entry = state.multiplexed[host] else { return false }
            state.multiplexed[host] = (entry.streams + 1, entry.owner)
            return true
        }
        switch joined {
        case nil: return await acquire(host: host, download: download, waiting: waiting) ? .slot : nil
        case true?: return .stream
        case false?: break
        }
        guard await acquire(host: host, download: download, waiting: waiting) else { return nil }
        // The slot is the connection's, unless another stream opened it meanwhile: then this
        // one joins it, and the slot goes back.
        let opened = state.withLockedValue { state -> Bool in
            if let entry = state.multiplexed[host] {
                state.multiplexed[host] = (entry.streams + 1, entry.owner)
                return false
            }
            state.multiplexed[host] = (1, download)
            return true
        }
        if !opened { release(host: host, download: download) }
        return .stream
    }

    /// Gives back what ``acquire(host:download:http2:waiting:)`` returned: a slot, or a stream
    /// (the last stream of the connection gives back its slot).
    func release(_ hold: Hold, host: String, download: Int) {
        switch hold {
        case .slot:
            release(host: host, download: download)
        case .stream:
            let owner = state.withLockedValue { state -> Int? in
                guard let entry = state.multiplexed[host] else { return nil }
                if entry.streams > 1 {
                    state.multiplexed[host] = (entry.streams - 1, entry.owner)
                    return nil
                }
                state.multiplexed[host] = nil
                return entry.owner
            }
            if let owner { release(host: host, download: owner) }
        }
    }

    /// `host` answered over HTTP/2: its later HTTP/2 requests are streams of one connection.
    func learnedHTTP2(host: String) {
        state.withLockedValue { _ = $0.speaksHTTP2.insert(host) }
    }

    /// Gives back a slot of `host` held by `download`; the freed slot goes to a waiter, if any.
    func release(host: String, download: Int) {
        let granted = state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
            guard let ticket = state.hosts[host]?.release(by: download) else {
                if state.hosts[host]?.inUse == 0 { state.hosts[host] = nil }
                return nil
            }
            let waiter = Waiter(host: host, ticket: ticket)
            state.peakInUse = max(state.peakInUse, state.hosts[host]!.inUse)
            guard let continuation = state.waiters.removeValue(forKey: waiter) else {
                state.granted.insert(waiter)  // told when it comes to wait
                return nil
            }
            return continuation
        }
        granted?.resume(returning: true)
    }
}
