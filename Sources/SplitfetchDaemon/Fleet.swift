import DownloadCore
import NIOConcurrencyHelpers

/// A daemon's part in a fleet: many daemons, on many hosts, sharing one queue in PostgreSQL.
///
/// Every daemon keeps a copy of the whole queue (for the API: any daemon lists, adds, pauses and
/// removes any job), kept fresh by the table's `NOTIFY`s. It runs only the jobs it claimed: at
/// most its `max-concurrent-downloads`, each under a lease it renews (``LeaseKeeping``). The
/// database row is the truth: a daemon that finds a job it runs paused, removed, or held by
/// another worker stops it at once, keeping its data for whoever resumes it.
final class Fleet: Sendable {
    let store: PostgresJobStore
    /// Seconds a claim or renewal holds a job.
    let leaseSeconds: Double
    /// Seconds between claims when no notification wakes the daemon (the fallback).
    let pollSeconds: Double
    /// Seconds a claim waits for its answer before it counts as failed: half a lease.
    var claimSeconds: Double { max(1, leaseSeconds / 2) }
    let state: NIOLockedValueBox<State>
    let wakes: AsyncStream<Void>
    private let wakeUp: AsyncStream<Void>.Continuation
    private let started = ContinuousClock.now
    /// The per-host cap across the fleet, when there is one.
    let slots: FleetHostSlots?

    struct State {
        /// The jobs this daemon claimed and has not let go: running, or ended with the end not
        /// yet read back from the database (its row names this daemon until then).
        var held: Set<String> = []
        /// The held jobs that ended here: their slots are free already.
        var ended: Set<String> = []

        /// Held jobs that take a slot here.
        var running: Int { held.subtracting(ended).count }
        var keeping: LeaseKeeping
        /// Jobs let go whose downloads are still stopping here: claimed again, they wait for it.
        var stopping: [String: Task<Void, Never>] = [:]
        /// Each job's row version as last read: an older read is skipped.
        var versions: [String: Int64] = [:]
        /// Jobs announced changed and not yet read back.
        var announced: Set<String> = []
        var reading = false
        /// Whether every row must be read again (the listener reconnected).
        var rereadAll = false
        var tasks: [Task<Void, Never>] = []
        /// A claim failed: warned once until one succeeds.
        var claimWarned = false
        /// A claim query is out, not answered yet.
        var claiming = false
        /// The daemon is stopping: a claim answered now is not run here (its lease is let go).
        var stopped = false
        var statistics = Statistics()
    }

    /// What claiming cost this daemon so far (`splitfetch.getFleetStat`).
    struct Statistics: Sendable {
        /// Claim queries answered, the jobs they returned, and their time in all.
        var claims = 0
        var claimedJobs = 0
        var claimSeconds = 0.0
        /// Leases renewed (queries) and lost.
        var renewals = 0
        var leasesLost = 0
    }

    init(store: PostgresJobStore, leaseSeconds: Double, pollSeconds: Double, hostCap: Int?) {
        self.store = store
        slots = hostCap.map { FleetHostSlots(store: store, cap: $0, leaseSeconds: leaseSeconds) }
        self.leaseSeconds = leaseSeconds
        self.pollSeconds = pollSeconds
        state = NIOLockedValueBox(State(keeping: LeaseKeeping(leaseSeconds: leaseSeconds, now: 0)))
        (wakes, wakeUp) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    var worker: String { store.worker }

    /// Seconds since the daemon started (monotonic).
    var now: Double {
        let elapsed = ContinuousClock.now - started
        return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    }

    /// Asks the claimer to look for work now.
    func wake() { wakeUp.yield() }

    func holds(_ gid: String) -> Bool { state.withLockedValue { $0.held.contains(gid) } }

    /// Whether a claimed job may still start here: held, and the daemon not stopping.
    func mayStart(_ gid: String) -> Bool { state.withLockedValue { $0.held.contains(gid) && !$0.stopped } }

    var held: Set<String> { state.withLockedValue { $0.held } }

    /// Stops the fleet's loops: no claim is adopted after this returns. A loop waiting for the
    /// database (a claim sent as it went away) may never be answered: it is waited for at most
    /// ``stopWaitSeconds``, then left to end on its own (it starts nothing once stopped).
    func stop() async {
        slots?.stop()
        wakeUp.finish()
        let tasks = state.withLockedValue { state in
            state.stopped = true
            return state.tasks
        }
        for task in tasks { task.cancel() }
        _ = await within(seconds: Self.stopWaitSeconds) { for task in tasks { await task.value } }
    }

    static let stopWaitSeconds = 5.0
}
