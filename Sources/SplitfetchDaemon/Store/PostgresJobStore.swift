import FoundationEssentials
public import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The daemon's jobs in PostgreSQL, through postgres-nio: the queue a team already runs a
/// database for, and the start of many daemons sharing one queue.
///
/// Every ``save(upserting:deleting:)`` is one transaction, committed before it returns (the
/// server's `synchronous_commit`, on by default, syncs its WAL first). The schema is created and
/// migrated by the store, in versions, under an advisory lock, so two daemons starting at once
/// are safe.
///
/// Many daemons share one queue, each under a worker name of its own (``worker``): while a
/// daemon has the store open it holds an advisory lock on that name, on a connection of its own,
/// so a second daemon under the same name is refused. Jobs are taken with claims and leases
/// (`PostgresJobStore+Leases`); a change of a job is announced with `NOTIFY` (``changes()``).
///
/// postgres-nio runs on SwiftNIO's event loops; no call blocks Swift's cooperative pool.
public final class PostgresJobStore: JobStore {
    /// Where the store is, without its password (for messages and logs).
    public let address: PostgresAddress
    /// The name this daemon holds leases in: unique among the daemons of the queue.
    public let worker: String
    let client: PostgresClient
    /// The requests under way on each of the client's connections (``onConnection(_:)``).
    let watch = ConnectionWatch()
    private let runner: Task<Void, Never>
    private let owner = NIOLockedValueBox<Task<Void, Never>?>(nil)
    let logger: Logger

    /// `pg_advisory_lock` keys: migrations (one 64-bit key), and a worker's name (the two-key
    /// form, a separate key space: this class, and the name's hash).
    static let migrationLock: Int64 = 0x5370_6C69_7446_0001
    static let workerLockClass: Int32 = 0x5370_6C69

    /// The channel of `NOTIFY`: each payload is the GID of a job added, changed or deleted.
    static let channel = "splitfetch_job"

    /// Connects, migrates the schema, and takes the worker name `worker`.
    ///
    /// - Throws: ``StoreError`` when the server cannot be reached or refuses the login, a
    ///   migration fails, or another daemon runs under the same worker name.
    public init(_ address: PostgresAddress, worker: String = "splitfetch",
                logger: Logger = Logger(label: "splitfetch.postgres")) async throws(StoreError) {
        self.address = address
        self.worker = worker
        self.logger = logger
        // One connection first: the pool retries a refused login in the background, while a
        // daemon given a wrong password or address should say so at once.
        do {
            let check = try await PostgresConnection.connect(
                configuration: .init(host: address.host, port: address.port, username: address.user, password: address.password,
                                     database: address.database, tls: .disable),
                id: 0, logger: logger)
            try await check.close()
        } catch {
            throw .cannotOpen(path: address.description, detail: Self.describe(error))
        }
        var configuration = PostgresClient.Configuration(host: address.host, port: address.port, username: address.user,
                                                         password: address.password, database: address.database, tls: .disable)
        configuration.options.connectTimeout = .seconds(10)
        // A fleet's daemons share the server's max_connections: a few each (the manual budgets 8).
        configuration.options.maximumConnections = 6
        // The pool's own chatter (a lease asked for before its run loop is scheduled) is not news;
        // its errors are.
        var background = logger
        background.logLevel = max(logger.logLevel, .error)
        let client = PostgresClient(configuration: configuration, backgroundLogger: background)
        self.client = client
        runner = Task { await client.run() }
        do {
            try await Self.migrate(client, logger: logger)
            try await takeOwnership()
        } catch let error as StoreError {
            runner.cancel()
            throw error
        } catch {
            runner.cancel()
            throw .cannotOpen(path: address.description, detail: Self.describe(error))
        }
    }

    deinit {
        owner.withLockedValue { $0?.cancel() }
        runner.cancel()
    }

    /// Lets go of the worker name's lock and the connections, and waits until they are gone, or
    /// at most 5 s: a server that is away answers nothing (its sessions, and the lock, end with
    /// the process).
    public func close() async {
        let holder = owner.withLockedValue { task -> Task<Void, Never>? in
            defer { task = nil }
            return task
        }
        let runner = runner
        _ = await within(seconds: 5) {
            holder?.cancel()
            await holder?.value
            runner.cancel()
            await runner.value
        }
        runner.cancel()
    }

    /// Versioned migrations: a schema is only ever added to.
    static let migrations: [(version: Int32, sql: [String])] = [
        (1, ["""
            CREATE TABLE splitfetch_job (
                gid TEXT PRIMARY KEY,
                sort_order DOUBLE PRECISION NOT NULL,
                state TEXT NOT NULL,
                record JSONB NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """,
             "CREATE INDEX splitfetch_job_state ON splitfetch_job (state, sort_order)"]),
        // Leases, for workers that share a queue (PostgresJobStore+Leases).
        (2, ["ALTER TABLE splitfetch_job ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
             "ALTER TABLE splitfetch_job ADD COLUMN lease_owner TEXT",
             "ALTER TABLE splitfetch_job ADD COLUMN lease_until TIMESTAMPTZ",
             "UPDATE splitfetch_job SET priority = coalesce((record->>'priority')::integer, 0)",
             "CREATE INDEX splitfetch_job_claim ON splitfetch_job (priority DESC, sort_order) WHERE state IN ('waiting', 'active')"]),
        // Every change of a job is announced to the workers (a lease renewal is not a change),
        // and counted in its row's version, so that a worker can tell an old read from a new one.
        (3, ["ALTER TABLE splitfetch_job ADD COLUMN version BIGINT NOT NULL DEFAULT 0",
             """
             CREATE FUNCTION splitfetch_job_version() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 NEW.version := OLD.version + 1;
                 RETURN NEW;
             END $$
             """,
             "CREATE TRIGGER splitfetch_job_versioned BEFORE UPDATE ON splitfetch_job FOR EACH ROW EXECUTE FUNCTION splitfetch_job_version()",
             """
            CREATE FUNCTION splitfetch_job_notify() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP = 'DELETE' THEN
                    PERFORM pg_notify('\(channel)', OLD.gid);
                ELSE
                    PERFORM pg_notify('\(channel)', NEW.gid);
                END IF;
                RETURN NULL;
            END $$
            """,
             "CREATE TRIGGER splitfetch_job_added AFTER INSERT OR DELETE ON splitfetch_job FOR EACH ROW EXECUTE FUNCTION splitfetch_job_notify()",
             """
             CREATE TRIGGER splitfetch_job_changed AFTER UPDATE ON splitfetch_job FOR EACH ROW
             WHEN (OLD.record IS DISTINCT FROM NEW.record OR OLD.lease_owner IS DISTINCT FROM NEW.lease_owner)
             EXECUTE FUNCTION splitfetch_job_notify()
             """]),
        // Connection slots per host, leased by workers: the per-host cap across the fleet.
        (4, ["""
            CREATE TABLE splitfetch_host_slot (
                host TEXT NOT NULL,
                slot INTEGER NOT NULL,
                owner TEXT,
                lease_until TIMESTAMPTZ,
                PRIMARY KEY (host, slot)
            )
            """,
             // One unfinished job per file across the fleet (each daemon checks only its copy).
             """
             CREATE UNIQUE INDEX splitfetch_job_file ON splitfetch_job ((record->>'destination'))
             WHERE state IN ('waiting', 'active', 'paused')
             """,
             // The complete jobs of a file, for the check that a new job's file is not one already there.
             "CREATE INDEX splitfetch_job_destination ON splitfetch_job ((record->>'destination')) WHERE state = 'complete'"]),
    ]

    /// Runs the migrations not yet applied, each in a transaction, under the migration lock.
    static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await client.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(\(migrationLock))", logger: logger)
            do {
                try await connection.query("CREATE TABLE IF NOT EXISTS splitfetch_schema (version INTEGER PRIMARY KEY)", logger: logger)
                var applied: Int32 = 0
                for try await version in try await connection.query("SELECT coalesce(max(version), 0) FROM splitfetch_schema",
                                                                     logger: logger).decode(Int32.self) {
                    applied = version
                }
                for migration in migrations where migration.version > applied {
                    try await connection.withTransaction(logger: logger) { transaction in
                        for statement in migration.sql {
                            try await transaction.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                        }
                        try await transaction.query("INSERT INTO splitfetch_schema (version) VALUES (\(migration.version))", logger: logger)
                    }
                }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
        }
    }

    /// Holds the worker name's lock on a connection of its own for as long as the store lives.
    /// The lock is its session's: when that connection closes (the database restarted, or the
    /// network dropped it) the name is taken again on a new connection, asked once a second
    /// until it is (with a warning if another daemon holds it meanwhile).
    private func takeOwnership() async throws {
        let (client, logger, address, worker, watch) = (client, logger, address, worker, watch)
        let taken = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Bool, any Error>) in
            // Answered once: by the first lock's answer, or by the error that came before it.
            let answer = NIOLockedValueBox<CheckedContinuation<Bool, any Error>?>(continuation)
            let holder = Task {
                var lost = false
                var warned = false
                while !Task.isCancelled {
                    let first = answer.withLockedValue { $0 != nil }
                    do {
                        let held = try await client.withConnection { connection -> Bool in
                            // A daemon restarted at once after a kill: the server may not have
                            // seen its old session go yet. Asked again for up to 10 s at first.
                            let got = try await Self.tryLock(worker, on: connection, attempts: first ? 40 : 1, logger: logger)
                            answer.withLockedValue { $0.take() }?.resume(returning: got)
                            guard got else { return false }
                            if lost {
                                logger.notice("worker name taken again after its connection closed", metadata: ["worker": "\(worker)"])
                                lost = false
                                warned = false
                            }
                            // Held until the store goes (its task cancelled) or the connection closes.
                            _ = try? await watch.until(connection) { _ in
                                while true { try await Task.sleep(for: .seconds(3600)) }
                            }
                            if Task.isCancelled {
                                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.workerLockClass), hashtext(\(worker)))",
                                                                logger: logger)
                            }
                            return true
                        }
                        if first && !held { return }  // refused at the start: the store is not opened
                        if !held && !warned {
                            logger.warning("another daemon holds this daemon's worker name; taking it again once it is free",
                                           metadata: ["worker": "\(worker)"])
                            warned = true
                        }
                    } catch {
                        if first {
                            answer.withLockedValue { $0.take() }?.resume(throwing: error)
                            return
                        }
                    }
                    lost = true
                    try? await Task.sleep(for: .seconds(1))
                }
            }
            owner.withLockedValue { $0 = holder }
        }
        guard taken else {
            throw StoreError.cannotOpen(path: address.description,
                                        detail: "another daemon runs as worker '\(worker)' on this queue (give each daemon its own --worker-name)")
        }
    }

    /// `pg_try_advisory_lock` on the worker name, asked up to `attempts` times 250 ms apart.
    private static func tryLock(_ worker: String, on connection: PostgresConnection, attempts: Int, logger: Logger) async throws -> Bool {
        for attempt in 0..<attempts {
            var got = false
            for try await value in try await connection.query(
                "SELECT pg_try_advisory_lock(\(workerLockClass), hashtext(\(worker)))", logger: logger
            ).decode(Bool.self) {
                got = value
            }
            if got || attempt == attempts - 1 { return got }
            try await Task.sleep(for: .milliseconds(250))
        }
        return false
    }

    public func loadAll() async throws -> [Job] {
        let logger = logger
        return try await onConnection { connection in
            var jobs: [Job] = []
            let decoder = JSONDecoder()
            let rows = try await connection.query("SELECT record::text FROM splitfetch_job", logger: logger)
            for try await text in rows.decode(String.self) {
                jobs.append(try decoder.decode(Job.self, from: Data(text.utf8)))
            }
            return jobs
        }
    }

    public func save(upserting: [Job], deleting: [String]) async throws {
        try await save(upserting: upserting, deleting: deleting, held: [])
    }

    /// Writes the jobs of `held` only while this worker's lease on them stands: a lease that a
    /// command cleared (a pause, a removal) or another worker took is not undone by a write of
    /// this worker's older record (the download's start, say, read just before the pause).
    public func save(upserting all: [Job], deleting: [String], held: Set<String>) async throws {
        guard !all.isEmpty || !deleting.isEmpty else { return }
        let heldJobs = all.filter { held.contains($0.gid) }
        let upserting = all.filter { !held.contains($0.gid) }
        let encoder = JSONEncoder()
        let gids = upserting.map(\.gid)
        let orders = upserting.map(\.order)
        let states = upserting.map(\.state.rawValue)
        let priorities = upserting.map { Int64($0.priority) }
        let records = try upserting.map { String(decoding: try encoder.encode($0), as: UTF8.self) }
        // Jobs that are to fetch their file (not refresh it): none may write a file another job of
        // the queue completed (a daemon's copy may not know that job yet; the file may not be in
        // place yet either).
        let fetching = upserting.filter { ($0.state == .waiting || $0.state == .paused) && $0.optionList["conditional-get"] != "true" }
        do {
            try await saveRows(gids: gids, orders: orders, states: states, records: records, priorities: priorities, deleting: deleting,
                               fetching: fetching.map(\.destination), held: heldJobs)
        } catch let error as PostgresTransactionError {
            if let refused = error.closureError as? StoreError { throw refused }
            if let cause = error.closureError as? PSQLError, cause.serverInfo?[.sqlState] == "23505" {
                throw StoreError.sameFile(Self.describe(cause))
            }
            // The connection was lost with the commit sent: the server may have made it.
            if error.commitError != nil { throw StoreError.unconfirmed(Self.describe(error)) }
            throw StoreError.unavailable(Self.describe(error))
        } catch let error as ConnectionLost {
            throw StoreError.unconfirmed(error.description)
        } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" {
            throw StoreError.sameFile(Self.describe(error))
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError.unavailable(Self.describe(error))
        }
    }

    private func saveRows(gids: [String], orders: [Double], states: [String], records: [String], priorities: [Int64],
                          deleting: [String], fetching: [String], held: [Job]) async throws {
        let (worker, logger) = (worker, logger)
        try await onConnection { connection in
            try await connection.withTransaction(logger: logger) { connection in
                if !held.isEmpty { _ = try await Self.writeHeld(held, owner: worker, on: connection, logger: logger) }
                if !gids.isEmpty {
                    // One statement for the batch: arrays unnested into rows.
                    try await connection.query("""
                        INSERT INTO splitfetch_job (gid, sort_order, state, record, priority)
                        SELECT gid, sort_order, state, record::jsonb, priority
                        FROM unnest(\(gids)::text[], \(orders)::float8[], \(states)::text[], \(records)::text[], \(priorities)::int8[])
                            AS batch(gid, sort_order, state, record, priority)
                        ON CONFLICT (gid) DO UPDATE SET sort_order = excluded.sort_order, state = excluded.state,
                            record = excluded.record, priority = excluded.priority, updated_at = now(),
                            lease_owner = CASE WHEN excluded.state IN ('waiting', 'active') THEN splitfetch_job.lease_owner END,
                            lease_until = CASE WHEN excluded.state IN ('waiting', 'active') THEN splitfetch_job.lease_until END
                        -- A job another worker holds is that worker's to write.
                        WHERE splitfetch_job.lease_owner IS NULL OR splitfetch_job.lease_owner = \(worker)
                        """, logger: logger)
                }
                // After the insert, not before: a job of the same file whose change to complete was
                // under way made the insert wait (the unique index of unfinished jobs' files), and
                // this statement, which sees what was committed before it began, sees it complete.
                // Looked for first, the job completing in between went unseen.
                if !fetching.isEmpty {
                    let rows = try await connection.query("""
                        SELECT record->>'destination' FROM splitfetch_job
                        WHERE state = 'complete' AND record->>'destination' = ANY(\(fetching)::text[]) AND NOT gid = ANY(\(gids)::text[])
                        LIMIT 1
                        """, logger: logger)
                    for try await path in rows.decode(String.self) { throw StoreError.fileExists(path) }
                }
                if !deleting.isEmpty {
                    try await connection.query("DELETE FROM splitfetch_job WHERE gid = ANY(\(deleting)::text[])", logger: logger)
                }
            }
        }
    }

    /// An error as people read it: PostgreSQL's own message where there is one.
    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            if let underlying = error.underlying { return describe(underlying) }
            return "\(error.code)"
        }
        if let error = error as? PostgresTransactionError,
           let cause = error.beginError ?? error.closureError ?? error.commitError ?? error.rollbackError {
            return describe(cause)
        }
        return "\(error)"
    }
}
