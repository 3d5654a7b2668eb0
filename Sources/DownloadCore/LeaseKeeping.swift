/// A worker's leases on the jobs it runs from a shared queue, as decisions: when to renew, which
/// jobs to stop because another worker may hold them now.
///
/// A lease is the database's promise that nobody else runs the job until its time. The worker
/// renews every third of a lease. A renewal that answers says which jobs are still held: the
/// others are stopped at once (another worker claimed them, or an API call paused or removed
/// them). A renewal that fails (the database is away) changes nothing while the last
/// confirmation is recent: downloads go on, as the promise still holds. Once the time since the
/// last confirmed renewal reaches ``stopShare`` of a lease, the worker can no longer know that
/// nobody else was given its jobs, and stops writing them all; the jobs stay with the queue,
/// and the same worker (by name) claims them back once the database answers.
public struct LeaseKeeping: Sendable, Equatable {
    /// A lease's length, seconds.
    public let leaseSeconds: Double
    /// The share of a lease after which unconfirmed jobs are stopped: leaves room for clocks
    /// and a renewal under way.
    public static let stopShare = 0.8
    /// When the last renewal the database answered was sent (seconds, any monotonic clock).
    public private(set) var confirmedAt: Double
    /// Whether the jobs were stopped for want of a confirmation, and not claimed again since.
    public private(set) var stoppedUnconfirmed = false

    public init(leaseSeconds: Double, now: Double) {
        self.leaseSeconds = leaseSeconds
        confirmedAt = now
    }

    /// Seconds between renewals.
    public var renewEvery: Double { leaseSeconds / 3 }

    /// When the running jobs must stop unless a renewal answers first.
    public var stopAt: Double { confirmedAt + leaseSeconds * Self.stopShare }

    /// How long a renewal sent at `now` may wait for its answer before it counts as failed: a
    /// database that does not answer at all (a connection that hangs, a server that is away
    /// while the pool waits to connect) must not hold the decision past ``stopAt``. Until the
    /// stop point, but at least a second, and at most a renewal period.
    public func timeLimit(at now: Double) -> Double {
        min(renewEvery, max(1, stopAt - now))
    }

    /// Seconds from a renewal that failed at `now` to the next: the usual period, or sooner
    /// when the stop point comes first (at least half a second).
    public func retryDelay(afterFailureAt now: Double) -> Double {
        min(renewEvery, max(0.5, stopAt - now))
    }

    /// A renewal sent at `sentAt` for `asked` answered that the worker still holds `held`;
    /// `running` are the jobs it runs now (some may have ended meanwhile). Returns the jobs to
    /// stop: running, asked for, and not held.
    public mutating func renewed(sentAt: Double, asked: [String], held: Set<String>, running: Set<String>) -> [String] {
        confirmedAt = max(confirmedAt, sentAt)
        stoppedUnconfirmed = false
        return asked.filter { running.contains($0) && !held.contains($0) }
    }

    /// A renewal failed at `now`. Returns whether every running job must stop now (once per
    /// outage: later failures return `false` until a renewal or claim answers again).
    public mutating func renewalFailed(at now: Double) -> Bool {
        guard !stoppedUnconfirmed, now - confirmedAt >= leaseSeconds * Self.stopShare else { return false }
        stoppedUnconfirmed = true
        return true
    }

    /// The worker runs nothing at `now`: no lease is at stake, so nothing waits for a
    /// confirmation (a job claimed later is confirmed no earlier than this).
    public mutating func idle(at now: Double) {
        confirmedAt = max(confirmedAt, now)
        stoppedUnconfirmed = false
    }
}
