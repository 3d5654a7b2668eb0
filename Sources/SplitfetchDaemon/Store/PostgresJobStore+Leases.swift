import FoundationEssentials
import PostgresNIO

/// Claims and leases: how workers that share one queue take jobs without taking the same one.
///
/// A worker claims waiting jobs (and active ones whose lease ran out: their worker died) with
/// `FOR UPDATE SKIP LOCKED`, so claims never wait for each other and never overlap; each claim
/// holds a lease until a time the worker renews while the job runs. A worker writes a job's end
/// only while it still holds the lease: a worker that lost its lease (it stalled, the job was
/// claimed again) writes nothing, so a job is never completed twice.
///
/// These are the store's half of many daemons on one queue; the daemon does not use them yet.
extension PostgresJobStore {
    /// Claims up to `count` jobs for `owner`, for `seconds` (negative: already expired, for
    /// tests), highest priority first, then queue order. The jobs come back marked active.
    public func claim(owner: String, count: Int, seconds: Double) async throws -> [Job] {
        let decoder = JSONDecoder()
        var jobs: [Job] = []
        let rows = try await client.query("""
            WITH next AS (
                SELECT gid FROM splitfetch_job
                WHERE state IN ('waiting', 'active') AND (lease_until IS NULL OR lease_until < now())
                ORDER BY priority DESC, sort_order
                FOR UPDATE SKIP LOCKED
                LIMIT \(Int64(count))
            )
            UPDATE splitfetch_job AS job
            SET lease_owner = \(owner), lease_until = now() + make_interval(secs => \(seconds)), state = 'active',
                record = jsonb_set(job.record, '{state}', '"active"'), updated_at = now()
            FROM next WHERE job.gid = next.gid
            RETURNING job.record::text
            """, logger: logger)
        for try await text in rows.decode(String.self) {
            jobs.append(try decoder.decode(Job.self, from: Data(text.utf8)))
        }
        return jobs.sorted { ($0.priority, -$0.order) > ($1.priority, -$1.order) }
    }

    /// Extends `owner`'s leases on `gids` by `seconds` from now; returns the ones it still holds.
    public func renew(owner: String, gids: [String], seconds: Double) async throws -> Set<String> {
        var held: Set<String> = []
        let rows = try await client.query("""
            UPDATE splitfetch_job SET lease_until = now() + make_interval(secs => \(seconds))
            WHERE lease_owner = \(owner) AND gid = ANY(\(gids)::text[])
            RETURNING gid
            """, logger: logger)
        for try await gid in rows.decode(String.self) { held.insert(gid) }
        return held
    }

    /// Writes `job` (its end, or any change) if `owner` still holds its lease, and lets the lease
    /// go when the job is no longer active. Returns `false`, writing nothing, when another
    /// worker holds it now.
    public func write(_ job: Job, owner: String) async throws -> Bool {
        let record = String(decoding: try JSONEncoder().encode(job), as: UTF8.self)
        let keep = job.state == .active
        var written = false
        let rows = try await client.query("""
            UPDATE splitfetch_job
            SET record = \(record)::jsonb, state = \(job.state.rawValue), sort_order = \(job.order), priority = \(Int64(job.priority)),
                lease_owner = CASE WHEN \(keep) THEN lease_owner END, lease_until = CASE WHEN \(keep) THEN lease_until END,
                updated_at = now()
            WHERE gid = \(job.gid) AND lease_owner = \(owner)
            RETURNING gid
            """, logger: logger)
        for try await _ in rows.decode(String.self) { written = true }
        return written
    }
}
