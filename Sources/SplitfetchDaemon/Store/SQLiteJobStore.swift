import DownloadCore
import FoundationEssentials
import GRDB
import Splitfetch

/// The daemon's jobs in an SQLite file, through GRDB: WAL mode with `synchronous = FULL`, so
/// a committed transaction is on disk when the call returns, and readers never wait for the
/// writer. GRDB runs every statement on its own dispatch queue, not on Swift's cooperative pool.
public final class SQLiteJobStore: JobStore {
    public let path: String
    private let pool: DatabasePool

    /// Opens (or creates) the database at `path` and migrates its schema.
    ///
    /// - Throws: ``StoreError`` when the file is not a database, is damaged, or cannot be opened.
    public init(path: String) throws(StoreError) {
        self.path = path
        var configuration = Configuration()
        configuration.label = "splitfetch-jobs"
        // A page cache of 512 KiB per connection instead of SQLite's 2 MiB: the daemon reads the
        // table once, at start, and then writes a few rows at a time, whose pages the kernel
        // keeps cached anyway. With 20,000 jobs, the writer's cache was 1.9 MiB of the daemon's
        // resident memory (Benchmarks/JOURNAL.md, "The daemon").
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA cache_size = -512") }
        do {
            pool = try DatabasePool(path: path, configuration: configuration)
            // FULL: each commit syncs the WAL, so an acknowledged job survives a power cut
            // (NORMAL, which GRDB sets when it opens a pool in WAL mode, keeps the last commits
            // only until the next checkpoint). Set on the one connection that writes, after
            // GRDB's own set-up.
            try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            let check = try pool.read { db in try String.fetchOne(db, sql: "PRAGMA quick_check") }
            guard check == "ok" else { throw StoreError.damaged(path: path, detail: check ?? "no answer") }
            try Self.migrator.migrate(pool)
        } catch let error as StoreError {
            throw error
        } catch let error as DatabaseError {
            switch error.resultCode {
            case .SQLITE_NOTADB, .SQLITE_CORRUPT:
                throw .damaged(path: path, detail: error.message ?? "\(error.resultCode)")
            default:
                throw .cannotOpen(path: path, detail: "\(error)")
            }
        } catch {
            throw .cannotOpen(path: path, detail: "\(error)")
        }
    }

    /// Versioned migrations: a schema is only ever added to.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: jobs") { db in
            try db.execute(sql: """
                CREATE TABLE job (
                    gid TEXT PRIMARY KEY NOT NULL,
                    sortOrder REAL NOT NULL,
                    uris TEXT NOT NULL,
                    destination TEXT NOT NULL,
                    options TEXT NOT NULL,
                    state TEXT NOT NULL,
                    priority INTEGER NOT NULL,
                    bytesPerSecond INTEGER,
                    totalLength INTEGER,
                    completedLength INTEGER,
                    sha256 TEXT,
                    errorCode TEXT,
                    errorMessage TEXT,
                    addedAt REAL NOT NULL,
                    finishedAt REAL
                );
                CREATE INDEX job_order ON job(sortOrder);
                """)
        }
        migrator.registerMigration("v2: hooks") { db in
            try db.execute(sql: "ALTER TABLE job ADD COLUMN hookPending INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v3: webhooks") { db in
            try db.execute(sql: "ALTER TABLE job ADD COLUMN webhookPending INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v4: validators") { db in
            try db.execute(sql: "ALTER TABLE job ADD COLUMN validators TEXT")
        }
        return migrator
    }

    /// The writer's `PRAGMA synchronous` (2 is FULL).
    func synchronousLevel() throws -> Int {
        try pool.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    public func loadAll() async throws -> [Job] {
        try await pool.read { db in
            // Columns by position: by name, GRDB compares names case-insensitively for every value.
            // One row at a time (a cursor's row is reused): all the rows at once were as many
            // short-lived copies of every value, interleaved in the heap with the jobs made from
            // them, whose holes stayed resident.
            try Array(Row.fetchCursor(db, sql: "SELECT \(Self.columns) FROM job").map(Self.job(from:)))
        }
    }

    public func save(upserting: [Job], deleting: [String]) async throws {
        guard !upserting.isEmpty || !deleting.isEmpty else { return }
        let rows = upserting.map(Self.arguments(of:))
        try await pool.write { db in
            // Prepared once per connection (each job is written about three times).
            let upsert = try db.cachedStatement(sql: Self.upsertSQL)
            for arguments in rows { try upsert.execute(arguments: arguments) }
            if !deleting.isEmpty {
                let delete = try db.cachedStatement(sql: "DELETE FROM job WHERE gid = ?")
                for gid in deleting { try delete.execute(arguments: [gid]) }
            }
        }
    }

    /// A JSON array of strings (``FlatJSON``, or the decoder for what it leaves).
    static func strings(_ text: String) throws -> [String] {
        if let strings = FlatJSON.strings(text) { return strings }
        return try JSONDecoder().decode([String].self, from: Data(text.utf8))
    }

    /// A JSON object of strings (``FlatJSON``, or the decoder for what it leaves).
    static func dictionary(_ text: String) throws -> [String: String] {
        if let object = FlatJSON.object(text) { return object }
        return try JSONDecoder().decode([String: String].self, from: Data(text.utf8))
    }

    private static let upsertSQL = """
        INSERT OR REPLACE INTO job (\(columns))
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    private static func arguments(of job: Job) -> StatementArguments {
        // Written three times per job (added, started, ended): without the encoder.
        let uris = FlatJSON.encode(job.uris)
        let options = job.optionList.json
        let validators = job.validators.map(FlatJSON.encode)
        return [job.gid, job.order, uris, job.destination, options, job.state.rawValue, job.priority, job.bytesPerSecond,
                job.totalLength, job.completedLength, job.sha256, job.errorCode, job.errorMessage, job.addedAt, job.finishedAt,
                job.hookPending, job.webhookPending, validators]
    }

    /// The columns of a job, in the order ``arguments(of:)`` gives and ``job(from:)`` reads them.
    private static let columns = """
        gid, sortOrder, uris, destination, options, state, priority, bytesPerSecond, totalLength, completedLength, sha256, \
        errorCode, errorMessage, addedAt, finishedAt, hookPending, webhookPending, validators
        """

    private static func job(from row: Row) throws -> Job {
        let uris = try strings(row[2])
        let options = try dictionary(row[4])
        var job = Job(gid: row[0], order: row[1], uris: uris, destination: row[3], options: options,
                      state: DownloadState(rawValue: row[5]), priority: row[6], bytesPerSecond: row[7], addedAt: row[13])
        job.totalLength = row[8]
        job.completedLength = row[9]
        job.sha256 = row[10]
        job.errorCode = row[11]
        job.errorMessage = row[12]
        job.finishedAt = row[14]
        job.hookPending = row[15]
        job.webhookPending = row[16]
        if let text: String = row[17] {
            job.validators = try JSONDecoder().decode(ConditionalRefresh.Recorded.self, from: Data(text.utf8))
        }
        return job
    }
}

/// Why the store could not be opened.
public enum StoreError: Error, CustomStringConvertible, Sendable, Equatable {
    /// The file is not a database or fails its integrity check.
    case damaged(path: String, detail: String)
    case cannotOpen(path: String, detail: String)
    /// Another unfinished job of the queue writes the same file (one added through another daemon
    /// of a fleet a moment before).
    case sameFile(String)
    /// The queue's database did not take the write (it is away, or restarting).
    case unavailable(String)
    /// The commit was sent and no answer came (the connection was lost): the write may or may
    /// not have been made.
    case unconfirmed(String)
    /// A job of the queue completed this file already (a fleet's daemon may not know it yet).
    case fileExists(String)

    /// A write refused for what it writes (a file another job of the queue completed or
    /// writes): writing it again changes nothing.
    public var isRefusal: Bool {
        switch self {
        case .sameFile, .fileExists: true
        case .damaged, .cannotOpen, .unavailable, .unconfirmed: false
        }
    }

    public var description: String {
        switch self {
        case .damaged(let path, let detail):
            "the job database \(path) is damaged (\(detail)). Nothing was changed. To recover: stop the daemon, "
                + "move the file (and its -wal and -shm files) aside, and start again: the queue starts empty, and "
                + "`splitfetch --list-partials DIR` still finds the partial downloads to add again"
        case .cannotOpen(let path, let detail):
            "cannot open the job database \(path): \(detail)"
        case .sameFile(let detail):
            "another download in the queue writes that file (\(detail))"
        case .unavailable(let detail):
            "the queue's database did not take the change: \(detail)"
        case .unconfirmed(let detail):
            "the queue's database did not confirm the change, which may or may not be saved (list the queue): \(detail)"
        case .fileExists(let path):
            "\(path) exists: another job of the queue completed it (nothing is overwritten; refresh it with conditional-get)"
        }
    }
}
