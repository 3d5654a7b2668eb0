import FoundationEssentials
import PostgresNIO

/// Connection slots per host, shared by the workers of a fleet: the per-host cap across them.
///
/// A host has slots 1…cap (rows made when first asked for). A worker leases a slot per request
/// and gives it back when the request's connection is closed; its slots' leases are renewed with
/// its jobs', and a worker that died loses them when they expire (or at once, when it starts
/// again under the same name). A slot given back is announced on the jobs' channel as
/// `slot:HOST`, so waiting workers ask again at once.
extension PostgresJobStore {
    /// Takes up to `count` free slots of `host` among its first `cap`, for `seconds`; returns
    /// their numbers.
    public func takeSlots(host: String, count: Int, cap: Int, seconds: Double) async throws -> [Int32] {
        guard count > 0 else { return [] }
        let (owner, logger) = (worker, logger)
        return try await onConnection { connection in
            _ = try await connection.query("""
                INSERT INTO splitfetch_host_slot (host, slot)
                SELECT \(host), generate_series(1, \(Int32(cap))) ON CONFLICT DO NOTHING
                """, logger: logger)
            var slots: [Int32] = []
            let rows = try await connection.query("""
                WITH free AS (
                    SELECT slot FROM splitfetch_host_slot
                    WHERE host = \(host) AND slot <= \(Int32(cap)) AND (owner IS NULL OR lease_until < now())
                    ORDER BY slot
                    FOR UPDATE SKIP LOCKED
                    LIMIT \(Int64(count))
                )
                UPDATE splitfetch_host_slot AS s SET owner = \(owner), lease_until = now() + make_interval(secs => \(seconds))
                FROM free WHERE s.host = \(host) AND s.slot = free.slot
                RETURNING s.slot
                """, logger: logger)
            for try await slot in rows.decode(Int32.self) { slots.append(slot) }
            return slots
        }
    }

    /// Gives back slots of `host` this worker holds, and announces them.
    public func releaseSlots(host: String, slots: [Int32]) async throws {
        guard !slots.isEmpty else { return }
        let (worker, logger) = (worker, logger)
        return try await onConnection { connection in
            _ = try await connection.query("""
                WITH freed AS (
                    UPDATE splitfetch_host_slot SET owner = NULL, lease_until = NULL
                    WHERE host = \(host) AND slot = ANY(\(slots)::int4[]) AND owner = \(worker)
                    RETURNING host
                )
                SELECT pg_notify('\(unescaped: Self.channel)', 'slot:' || host) FROM (SELECT DISTINCT host FROM freed) AS hosts
                """, logger: logger)
        }
    }

    /// Renews the leases of `held`, the slots this worker's requests hold now (by host). Only
    /// those: a slot whose release did not reach the database (it was away) is not kept alive
    /// by the renewals, and its lease runs out.
    public func renewSlots(seconds: Double, held: [String: [Int32]]) async throws {
        let pairs = held.flatMap { host, slots in slots.map { (host, $0) } }
        guard !pairs.isEmpty else { return }
        let (worker, logger) = (worker, logger)
        return try await onConnection { connection in
            _ = try await connection.query("""
                UPDATE splitfetch_host_slot AS s SET lease_until = now() + make_interval(secs => \(seconds))
                FROM unnest(\(pairs.map(\.0))::text[], \(pairs.map(\.1))::int4[]) AS held(host, slot)
                WHERE s.owner = \(worker) AND s.host = held.host AND s.slot = held.slot
                """, logger: logger)
        }
    }

    /// Frees the slots held under this worker's name by an earlier run of it (whose connections
    /// ended with it).
    public func freeOwnSlots() async throws {
        let (worker, logger) = (worker, logger)
        return try await onConnection { connection in
            _ = try await connection.query("""
                WITH freed AS (
                    UPDATE splitfetch_host_slot SET owner = NULL, lease_until = NULL WHERE owner = \(worker) RETURNING host
                )
                SELECT pg_notify('\(unescaped: Self.channel)', 'slot:' || host) FROM (SELECT DISTINCT host FROM freed) AS hosts
                """, logger: logger)
        }
    }
}
