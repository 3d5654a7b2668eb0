public import Splitfetch
import FoundationEssentials
import PostgresNIO

/// Claims and leases: how workers that share one queue take jobs without taking the same one.
///
/// A worker claims waiting jobs (and active ones whose lease ran out: their worker died) with
/// `FOR UPDATE SKIP LOCKED`, so claims never wait for each other and never overlap; each claim
/// holds a lease until a time the worker renews while the job runs. A worker writes a job only
/// while it holds the lease, or while nobody does (``save(upserting:deleting:)``): a worker that
/// lost its lease (it stalled, the job was claimed again) writes nothing, so a job is never
/// completed twice.
extension PostgresJobStore {
    /// Claims up to `count` jobs for `owner`, for `seconds` (negative: already expired, for
    /// tests), highest priority first, then queue order: waiting and active ones nobody holds a
    /// live lease on, and the ones `owner` itself held before (a restarted worker of the same
    /// name takes its jobs back at once), except `holding` (the ones it runs now). The jobs come
    /// back marked active.
    public func claim(owner: String, count: Int, seconds: Double, holding: [String] = []) async throws -> [Job] {
        try await claimRows(owner: owner, count: count, seconds: seconds, holding: holding).map(\.job)
    }

    /// A job's row as read: the job, the worker named by its lease (live or not), and the row's
    /// version (one more at each change), by which an older read is told from a newer one.
    public struct Row: Sendable {
        public var job: Job
        public var holder: String?
        public var version: Int64
    }

    /// ``claim(owner:count:seconds:holding:)``, with each row's version. With `lockWait`, the
    /// server ends the claim once it has waited that long for a lock (the table locked by a
    /// migration, a dump, an administrator): a claim its caller gave up on no longer holds one of
    /// the pool's connections until the lock goes. Those abandoned claims, one per wake, took
    /// every connection within 20 s of a locked table, and reads of announced changes waited
    /// for ever behind them.
    public func claimRows(owner: String, count: Int, seconds: Double, holding: [String] = [],
                          lockWait: Double? = nil) async throws -> [Row] {
        let logger = logger
        return try await onConnection { connection in try await Self.limitingLockWaits(connection, to: lockWait, logger: logger) { connection in
            var jobs: [Row] = []
            let rows = try await connection.query("""
                WITH next AS (
                    SELECT gid FROM splitfetch_job
                    WHERE state IN ('waiting', 'active')
                        AND (lease_until IS NULL OR lease_until < now() OR lease_owner = \(owner))
                        AND NOT gid = ANY(\(holding)::text[])
                    ORDER BY priority DESC, sort_order
                    FOR UPDATE SKIP LOCKED
                    LIMIT \(Int64(count))
                )
                UPDATE splitfetch_job AS job
                SET lease_owner = \(owner), lease_until = now() + make_interval(secs => \(seconds)), state = 'active',
                    record = jsonb_set(job.record, '{state}', '"active"'), updated_at = now()
                FROM next WHERE job.gid = next.gid
                RETURNING job.record::text, job.lease_owner, job.version
                """, logger: logger)
            for try await row in rows.decode((String, String?, Int64).self) { jobs.append(try Self.row(row)) }
            return jobs.sorted { ($0.job.priority, -$0.job.order) > ($1.job.priority, -$1.job.order) }
        } }
    }

    /// Runs `body` in a transaction whose waits for locks end after `seconds` (`lock_timeout`,
    /// local to the transaction: the pool's connection keeps no limit); without `seconds`, as
    /// it is.
    static func limitingLockWaits<T: Sendable>(_ connection: PostgresConnection, to seconds: Double?, logger: Logger,
                                               _ body: (PostgresConnection) async throws -> T) async throws -> T {
        guard let seconds else { return try await body(connection) }
        let milliseconds = String(max(1, Int((seconds * 1000).rounded())))
        return try await connection.withTransaction(logger: logger) { connection in
            _ = try await connection.query("SELECT set_config('lock_timeout', \(milliseconds), true)", logger: logger)
            return try await body(connection)
        }
    }

    /// Extends `owner`'s leases on `gids` by `seconds` from now; returns the ones it still holds.
    /// With `lockWait`, the server ends a renewal that waited that long for a lock (as a claim's,
    /// ``claimRows(owner:count:seconds:holding:lockWait:)``).
    public func renew(owner: String, gids: [String], seconds: Double, lockWait: Double? = nil) async throws -> Set<String> {
        guard !gids.isEmpty else { return [] }
        let logger = logger
        return try await onConnection { connection in try await Self.limitingLockWaits(connection, to: lockWait, logger: logger) { connection in
            var held: Set<String> = []
            let rows = try await connection.query("""
                UPDATE splitfetch_job SET lease_until = now() + make_interval(secs => \(seconds))
                WHERE lease_owner = \(owner) AND gid = ANY(\(gids)::text[])
                RETURNING gid
                """, logger: logger)
            for try await gid in rows.decode(String.self) { held.insert(gid) }
            return held
        } }
    }

    /// Writes `job` (its end, or any change) if `owner` still holds its lease, and lets the lease
    /// go when the job is no longer active. Returns `false`, writing nothing, when another
    /// worker holds it now.
    public func write(_ job: Job, owner: String) async throws -> Bool {
        let logger = logger
        return try await onConnection { connection in
            try await Self.writeHeld([job], owner: owner, on: connection, logger: logger).contains(job.gid)
        }
    }

    /// Writes each of `jobs` whose lease `owner` holds, letting the lease go with a job no longer
    /// waiting or active; returns the GIDs written.
    static func writeHeld(_ jobs: [Job], owner: String, on connection: PostgresConnection, logger: Logger) async throws -> Set<String> {
        let encoder = JSONEncoder()
        let records = try jobs.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
        let rows = try await connection.query("""
            UPDATE splitfetch_job AS job
            SET record = batch.record::jsonb, state = batch.state, sort_order = batch.sort_order, priority = batch.priority,
                lease_owner = CASE WHEN batch.state IN ('waiting', 'active') THEN job.lease_owner END,
                lease_until = CASE WHEN batch.state IN ('waiting', 'active') THEN job.lease_until END,
                updated_at = now()
            FROM unnest(\(jobs.map(\.gid))::text[], \(jobs.map(\.state.rawValue))::text[], \(records)::text[],
                        \(jobs.map(\.order))::float8[], \(jobs.map { Int64($0.priority) })::int8[])
                AS batch(gid, state, record, sort_order, priority)
            WHERE job.gid = batch.gid AND job.lease_owner = \(owner)
            RETURNING job.gid
            """, logger: logger)
        var written: Set<String> = []
        for try await gid in rows.decode(String.self) { written.insert(gid) }
        return written
    }

    /// Lets go of `owner`'s leases on its unfinished jobs (a worker that stops): they wait again,
    /// for any worker, at once.
    public func release(owner: String) async throws {
        let logger = logger
        return try await onConnection { connection in
            _ = try await connection.query("""
                UPDATE splitfetch_job SET lease_owner = NULL, lease_until = NULL, state = 'waiting',
                    record = jsonb_set(record, '{state}', '"waiting"'), updated_at = now()
                WHERE lease_owner = \(owner) AND state IN ('waiting', 'active')
                """, logger: logger)
        }
    }

    /// Changes the state of the jobs in `gids` that are in one of `from` to `to`, whoever holds
    /// them (an API call on any worker: pause, unpause, remove), and lets their leases go: the
    /// worker that runs one stops it when it hears of the change. Returns the changed jobs.
    public func command(_ gids: [String], to state: DownloadState, from: [DownloadState]) async throws -> [Row] {
        let logger = logger
        return try await onConnection { connection in
            let finished: Double? = state.isFinal ? Date().timeIntervalSince1970 : nil
            var jobs: [Row] = []
            let rows = try await connection.query("""
                UPDATE splitfetch_job
                SET state = \(state.rawValue), lease_owner = NULL, lease_until = NULL, updated_at = now(),
                    record = jsonb_set(record, '{state}', to_jsonb(\(state.rawValue)::text))
                        || jsonb_build_object('finishedAt', \(finished)::float8)
                WHERE gid = ANY(\(gids)::text[]) AND state = ANY(\(from.map(\.rawValue))::text[])
                RETURNING record::text, lease_owner, version
                """, logger: logger)
            for try await row in rows.decode((String, String?, Int64).self) { jobs.append(try Self.row(row)) }
            return jobs
        }
    }

    /// The rows of `gids` as they are now, each with the worker that holds its lease (a live
    /// one or not); a job not returned was deleted.
    public func load(_ gids: [String]) async throws -> [Row] {
        let logger = logger
        return try await onConnection { connection in
            var rows: [Row] = []
            for try await row in try await connection.query(
                "SELECT record::text, lease_owner, version FROM splitfetch_job WHERE gid = ANY(\(gids)::text[])", logger: logger
            ).decode((String, String?, Int64).self) {
                rows.append(try Self.row(row))
            }
            return rows
        }
    }

    /// The GID of a complete job, other than `gid`, whose file is `destination`, if any.
    public func completedJob(writing destination: String, except gid: String) async throws -> String? {
        let logger = logger
        return try await onConnection { connection in
            let rows = try await connection.query("""
                SELECT gid FROM splitfetch_job
                WHERE state = 'complete' AND record->>'destination' = \(destination) AND gid <> \(gid) LIMIT 1
                """, logger: logger)
            for try await other in rows.decode(String.self) { return other }
            return nil
        }
    }

    /// Every row with its lease holder: what a worker reads after it missed notifications.
    public func loadAllRows() async throws -> [Row] {
        let logger = logger
        return try await onConnection { connection in
            var rows: [Row] = []
            for try await row in try await connection.query("SELECT record::text, lease_owner, version FROM splitfetch_job",
                                                        logger: logger).decode((String, String?, Int64).self) {
                rows.append(try Self.row(row))
            }
            return rows
        }
    }

    static func row(_ columns: (String, String?, Int64)) throws -> Row {
        Row(job: try JSONDecoder().decode(Job.self, from: Data(columns.0.utf8)), holder: columns.1, version: columns.2)
    }
}
