import Logging
import NIOConcurrencyHelpers
import Splitfetch

/// The per-host connection cap across a fleet (``SharedHostCap``): a slot of the database's
/// `splitfetch_host_slot` per request, leased while the request runs.
///
/// Requests that wait are served in the order they asked, by one broker task: each time it is
/// woken (a slot given back anywhere in the fleet, announced by `NOTIFY`; or once a second) it
/// asks the database for as many slots as requests wait, in one query. A slot given back always
/// goes through the database, so the daemons share a host's slots, and a closed connection is
/// a database round trip old before anyone opens the next.
final class FleetHostSlots: SharedHostCap, Sendable {
    let store: PostgresJobStore
    let cap: Int
    let leaseSeconds: Double
    private let state = NIOLockedValueBox(State())
    private let wakes: AsyncStream<Void>
    private let wakeUp: AsyncStream<Void>.Continuation
    private let broker = NIOLockedValueBox<Task<Void, Never>?>(nil)

    private struct State {
        /// Per host, the requests waiting, in order.
        var waiting: [String: [(id: UInt64, continuation: CheckedContinuation<Bool, Never>)]] = [:]
        /// Per host, the slot numbers held.
        var held: [String: [Int32]] = [:]
        var nextID: UInt64 = 0
        /// Asked before the continuation was stored: cancelled already.
        var cancelled: Set<UInt64> = []
        var stopped = false
        /// Slot queries answered, the slots they gave, and their time in all.
        var queries = 0
        var granted = 0
        var seconds = 0.0
    }

    /// The slots this daemon's requests hold now, by host (the ones to renew).
    var held: [String: [Int32]] { state.withLockedValue { $0.held.filter { !$0.value.isEmpty } } }

    /// Slot queries answered, slots granted, and the queries' time in all (seconds).
    var statistics: (queries: Int, granted: Int, seconds: Double) {
        state.withLockedValue { ($0.queries, $0.granted, $0.seconds) }
    }

    init(store: PostgresJobStore, cap: Int, leaseSeconds: Double) {
        self.store = store
        self.cap = max(1, cap)
        self.leaseSeconds = leaseSeconds
        (wakes, wakeUp) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Frees what an earlier run under this name held, then starts serving requests.
    func start(logger: Logger) async {
        do { try await store.freeOwnSlots() } catch {
            logger.warning("slots of an earlier run not freed; they expire", metadata: ["error": "\(PostgresJobStore.describe(error))"])
        }
        let task = Task { [weak self] in _ = await self?.serve(logger: logger) }
        broker.withLockedValue { $0 = task }
        // The fallback: a look once a second while requests wait, even without a notification.
        Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                guard let self, !self.state.withLockedValue({ $0.stopped }) else { return }
                if self.state.withLockedValue({ !$0.waiting.isEmpty }) { self.wake() }
            }
        }
    }

    func wake() { wakeUp.yield() }

    func stop() {
        let waiters = state.withLockedValue { state in
            state.stopped = true
            defer { state.waiting = [:] }
            return state.waiting.values.flatMap { $0.map(\.continuation) }
        }
        for waiter in waiters { waiter.resume(returning: false) }
        wakeUp.finish()
        broker.withLockedValue { $0?.cancel() }
    }

    func acquire(host: String) async -> Bool {
        let id = state.withLockedValue { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let refused = state.withLockedValue { state -> Bool in
                    if state.stopped || state.cancelled.remove(id) != nil { return true }
                    state.waiting[host, default: []].append((id, continuation))
                    return false
                }
                if refused { continuation.resume(returning: false) } else { wake() }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state -> CheckedContinuation<Bool, Never>? in
                guard let index = state.waiting[host]?.firstIndex(where: { $0.id == id }) else {
                    state.cancelled.insert(id)
                    return nil
                }
                return state.waiting[host]!.remove(at: index).continuation
            }
            waiter?.resume(returning: false)
        }
    }

    /// How long the slot of a closed connection stays taken before it goes back: a server counts
    /// a connection until its event loop has processed the close (its own, after a response
    /// asked with `Connection: close`; or the client's reset of a response cut short), which
    /// takes a fraction of a millisecond on an idle server and can take several on a busy one.
    /// Without it, a slot passed on at once was seen to let the server count one connection
    /// more than the cap for a moment. Its cost: each slot idles this long after each request.
    static let closeGrace: Duration = .milliseconds(20)
    /// A response cut short: the server sees the reset only when its event loop gets to it.
    static let earlyCloseGrace: Duration = .milliseconds(50)

    func release(host: String, early: Bool) {
        let slot = state.withLockedValue { state -> Int32? in state.held[host]?.popLast() }
        guard let slot else { return }
        let store = store
        Task { [weak self] in
            try? await Task.sleep(for: early ? Self.earlyCloseGrace : Self.closeGrace)
            // Given back through the database (announced to every daemon), asked again for a
            // while when the database is away; then its lease runs out (it is no longer renewed).
            for attempt in 0..<10 {
                if case .success = await within(seconds: 5, { try await store.releaseSlots(host: host, slots: [slot]) }) { break }
                try? await Task.sleep(for: .seconds(min(8, 0.25 * Double(1 << attempt))))
            }
            self?.wake()
        }
    }

    /// Hands out slots to waiting requests whenever woken.
    private func serve(logger: Logger) async {
        var warned = false
        for await _ in wakes {
            let hosts = state.withLockedValue { state in state.waiting.filter { !$0.value.isEmpty }.map { ($0.key, $0.value.count) } }
            for (host, count) in hosts {
                let slots: [Int32]
                do {
                    let sent = ContinuousClock.now
                    // A database that does not answer at all must not hold the broker: it asks
                    // again. (Slots taken by a query given up on are not held: their leases run out.)
                    let (store, cap, leaseSeconds) = (store, cap, leaseSeconds)
                    guard let answer = await within(seconds: 5, {
                        try await store.takeSlots(host: host, count: count, cap: cap, seconds: leaseSeconds)
                    }) else { throw NoAnswer(seconds: 5) }
                    slots = try answer.get()
                    let took = ContinuousClock.now - sent
                    state.withLockedValue { state in
                        state.queries += 1
                        state.granted += slots.count
                        state.seconds += Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
                    }
                    warned = false
                } catch {
                    if !warned {
                        logger.warning("cannot take connection slots; new requests wait", metadata: ["error": "\(PostgresJobStore.describe(error))"])
                        warned = true
                    }
                    try? await Task.sleep(for: .milliseconds(500))
                    wake()
                    continue
                }
                var granted: [CheckedContinuation<Bool, Never>] = []
                let spare = state.withLockedValue { state -> [Int32] in
                    var spare: [Int32] = []
                    for slot in slots {
                        if var queue = state.waiting[host], !queue.isEmpty {
                            granted.append(queue.removeFirst().continuation)
                            state.waiting[host] = queue.isEmpty ? nil : queue
                            state.held[host, default: []].append(slot)
                        } else {
                            spare.append(slot)
                        }
                    }
                    return spare
                }
                for waiter in granted { waiter.resume(returning: true) }
                // Requests cancelled meanwhile: their slots go back (or their leases run out: a
                // database that does not answer must not hold the broker).
                if !spare.isEmpty { _ = await within(seconds: 5) { [store] in try await store.releaseSlots(host: host, slots: spare) } }
            }
        }
    }
}
