public import DownloadCore
public import Splitfetch

/// One download the daemon owns, as its store keeps it: what was asked for, where it is in the
/// queue, and how it ended.
public struct Job: Sendable, Equatable, Codable {
    /// aria2's GID: 16 hexadecimal digits, also the download's identifier in the library queue.
    public var gid: String
    /// Its place among the jobs: the queue's order is ascending `order` (a real number, so that a
    /// job moved between two others takes the midpoint and no other row is rewritten).
    public var order: Double
    /// The URIs given: the first is the URL, the others its mirrors.
    public var uris: [String]
    /// The file's absolute path, inside the download root.
    public var destination: String
    /// The aria2 options it was added with (validated), as aria2 reports them back.
    public var options: [String: String]
    public var state: DownloadState
    /// Higher starts first.
    public var priority: Int
    /// Its own rate limit, bytes per second (`max-download-limit`); `nil` for none.
    public var bytesPerSecond: Int64?
    /// The file's size once known.
    public var totalLength: Int64?
    /// Bytes done: the size, once complete.
    public var completedLength: Int64?
    /// The finished file's SHA-256 (hex), once complete.
    public var sha256: String?
    /// Why it failed: the library's error code and message.
    public var errorCode: String?
    public var errorMessage: String?
    /// Seconds since 1970.
    public var addedAt: Double
    public var finishedAt: Double?
    /// Finished, with its hook (`--on-complete`, `--on-error`) not yet started: set with the final
    /// state in one write, cleared (and committed) just before the hook runs, so a hook runs at
    /// most once, and one pending at a restart runs then.
    public var hookPending = false
    /// Finished, with its webhook (`--webhook`) not yet delivered; cleared once the receiver
    /// answered 2xx (or gave up on), so a restart sends what was not delivered.
    public var webhookPending = false
    /// The server's validators recorded with the complete file (``DownloadStatistics/validators``):
    /// a later job for the same file with `conditional-get` asks with them.
    public var validators: ConditionalRefresh.Recorded?

    public init(gid: String, order: Double, uris: [String], destination: String, options: [String: String],
                state: DownloadState, priority: Int = 0, bytesPerSecond: Int64? = nil, addedAt: Double) {
        self.gid = gid
        self.order = order
        self.uris = uris
        self.destination = destination
        self.options = options
        self.state = state
        self.priority = priority
        self.bytesPerSecond = bytesPerSecond
        self.addedAt = addedAt
    }
}

/// Where the daemon's jobs are kept. Every call is one transaction, committed (and, for the
/// SQLite store, synced) before it returns: a job the API accepted survives a power cut.
///
/// The daemon reads the store once, at start, and writes every change through it; the store
/// never decides anything. A second store (PostgreSQL, for many daemons) implements the same
/// calls.
public protocol JobStore: Sendable {
    /// Every job, in no particular order.
    func loadAll() async throws -> [Job]
    /// Writes `upserting` (whole rows, inserted or replaced) and deletes `deleting`, in one
    /// transaction.
    func save(upserting: [Job], deleting: [String]) async throws
    /// As ``save(upserting:deleting:)``; `held` names the jobs of `upserting` that this daemon
    /// runs under a lease (a store shared by many daemons writes those only while the lease is
    /// still this daemon's). A store of one daemon has no leases.
    func save(upserting: [Job], deleting: [String], held: Set<String>) async throws
    /// Lets go of what the store holds (connections, locks) before the process ends.
    func close() async
}

extension JobStore {
    public func save(upserting: [Job], deleting: [String], held: Set<String>) async throws {
        try await save(upserting: upserting, deleting: deleting)
    }

    public func close() async {}
}
