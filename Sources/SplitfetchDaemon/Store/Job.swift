public import DownloadCore
public import Splitfetch

/// One download the daemon owns, as its store keeps it: what was asked for, where it is in the
/// queue, and how it ended.
///
/// A daemon holds one for every job in its queue and history (tens of thousands), so it is kept
/// small (Benchmarks/JOURNAL.md, "The daemon"): what only a job that ran or ended has (its size,
/// digest, error, validators) is in one shared value made when the first of them is set; the
/// URL and the mirrors are apart, so that a job of one URI holds no array; the options are one
/// string. A waiting job's record is 128 bytes inline (264 with every field stored).
public struct Job: Sendable, Equatable, Codable {
    /// aria2's GID: 16 hexadecimal digits, also the download's identifier in the library queue.
    public var gid: String
    /// The first URI: the URL.
    private(set) var url: String
    /// The other URIs: its mirrors.
    private(set) var mirrors: [String]
    /// The file's absolute path, inside the download root.
    public var destination: String
    /// ``options`` as kept.
    private(set) var optionList: OptionList
    public var state: DownloadState
    /// Its place among the jobs: the queue's order is ascending `order` (a real number, so that a
    /// job moved between two others takes the midpoint and no other row is rewritten).
    public var order: Double
    /// Seconds since 1970.
    public var addedAt: Double
    /// What a run found or left; `nil` while none of it is known.
    private var outcome: Shared?
    /// Its own rate limit, bytes per second (`max-download-limit`); `nil` for none.
    public var bytesPerSecond: Int64?
    /// Finished, with its hook (`--on-complete`, `--on-error`) not yet started: set with the final
    /// state in one write, cleared (and committed) just before the hook runs, so a hook runs at
    /// most once, and one pending at a restart runs then.
    public var hookPending = false
    /// Finished, with its webhook (`--webhook`) not yet delivered; cleared once the receiver
    /// answered 2xx (or gave up on), so a restart sends what was not delivered.
    public var webhookPending = false
    /// ``priority`` as kept (aria2's range is -1000 to 1000), last: with the flags, it fits in
    /// the rate limit's padding.
    private var storedPriority: Int32

    /// The URIs given: the first is the URL, the others its mirrors.
    public var uris: [String] {
        get { url.isEmpty && mirrors.isEmpty ? [] : [url] + mirrors }
        set {
            url = newValue.first ?? ""
            mirrors = Array(newValue.dropFirst())
        }
    }
    /// The aria2 options it was added with (validated), as aria2 reports them back.
    public var options: [String: String] {
        get { optionList.dictionary }
        set { optionList = OptionList(newValue) }
    }
    /// Higher starts first.
    public var priority: Int {
        get { Int(storedPriority) }
        set { storedPriority = Int32(clamping: newValue) }
    }

    /// The file's size once known.
    public var totalLength: Int64? {
        get { outcome?.value.totalLength }
        set { changeOutcome { $0.totalLength = newValue } }
    }
    /// Bytes done: the size, once complete.
    public var completedLength: Int64? {
        get { outcome?.value.completedLength }
        set { changeOutcome { $0.completedLength = newValue } }
    }
    /// The finished file's SHA-256 (hex), once complete.
    public var sha256: String? {
        get { outcome?.value.sha256 }
        set { changeOutcome { $0.sha256 = newValue } }
    }
    /// Why it failed: the library's error code and message.
    public var errorCode: String? {
        get { outcome?.value.errorCode }
        set { changeOutcome { $0.errorCode = newValue } }
    }
    public var errorMessage: String? {
        get { outcome?.value.errorMessage }
        set { changeOutcome { $0.errorMessage = newValue } }
    }
    /// Seconds since 1970.
    public var finishedAt: Double? {
        get { outcome?.value.finishedAt }
        set { changeOutcome { $0.finishedAt = newValue } }
    }
    /// The server's validators recorded with the complete file (``DownloadStatistics/validators``):
    /// a later job for the same file with `conditional-get` asks with them.
    public var validators: ConditionalRefresh.Recorded? {
        get { outcome?.value.validators }
        set { changeOutcome { $0.validators = newValue } }
    }

    public init(gid: String, order: Double, uris: [String], destination: String, options: [String: String],
                state: DownloadState, priority: Int = 0, bytesPerSecond: Int64? = nil, addedAt: Double) {
        self.gid = gid
        self.order = order
        url = uris.first ?? ""
        mirrors = Array(uris.dropFirst())
        self.destination = destination
        self.optionList = OptionList(options)
        self.state = state
        storedPriority = Int32(clamping: priority)
        self.bytesPerSecond = bytesPerSecond
        self.addedAt = addedAt
    }

    /// The fields of ``outcome``.
    private struct Outcome: Sendable, Equatable {
        var totalLength: Int64?
        var completedLength: Int64?
        var sha256: String?
        var errorCode: String?
        var errorMessage: String?
        var finishedAt: Double?
        var validators: ConditionalRefresh.Recorded?

        static let empty = Outcome()
    }

    /// An ``Outcome`` shared by copies of a job until one of them changes it.
    private final class Shared: Sendable {
        let value: Outcome
        init(_ value: Outcome) { self.value = value }
    }

    /// Changes the outcome, copied first (its values are immutable, so copies of the job never see
    /// each other's changes); an outcome with nothing in it is dropped.
    private mutating func changeOutcome(_ body: (inout Outcome) -> Void) {
        var value = outcome?.value ?? .empty
        body(&value)
        outcome = value == .empty ? nil : Shared(value)
    }

    public static func == (a: Job, b: Job) -> Bool {
        a.gid == b.gid && a.order == b.order && a.url == b.url && a.mirrors == b.mirrors && a.destination == b.destination && a.optionList == b.optionList
            && a.state == b.state && a.priority == b.priority && a.bytesPerSecond == b.bytesPerSecond && a.addedAt == b.addedAt
            && a.hookPending == b.hookPending && a.webhookPending == b.webhookPending
            && (a.outcome?.value ?? .empty) == (b.outcome?.value ?? .empty)
    }

    // The JSON form (a fleet's rows) is the one of a struct with every field stored: absent
    // optionals are left out.
    enum CodingKeys: String, CodingKey {
        case gid, order, uris, destination, options, state, priority, bytesPerSecond, totalLength, completedLength, sha256
        case errorCode, errorMessage, addedAt, finishedAt, hookPending, webhookPending, validators
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(gid: try c.decode(String.self, forKey: .gid), order: try c.decode(Double.self, forKey: .order),
                  uris: try c.decode([String].self, forKey: .uris), destination: try c.decode(String.self, forKey: .destination),
                  options: try c.decode([String: String].self, forKey: .options), state: try c.decode(DownloadState.self, forKey: .state),
                  priority: try c.decode(Int.self, forKey: .priority),
                  bytesPerSecond: try c.decodeIfPresent(Int64.self, forKey: .bytesPerSecond),
                  addedAt: try c.decode(Double.self, forKey: .addedAt))
        hookPending = try c.decodeIfPresent(Bool.self, forKey: .hookPending) ?? false
        webhookPending = try c.decodeIfPresent(Bool.self, forKey: .webhookPending) ?? false
        let outcome = Outcome(totalLength: try c.decodeIfPresent(Int64.self, forKey: .totalLength),
                              completedLength: try c.decodeIfPresent(Int64.self, forKey: .completedLength),
                              sha256: try c.decodeIfPresent(String.self, forKey: .sha256),
                              errorCode: try c.decodeIfPresent(String.self, forKey: .errorCode),
                              errorMessage: try c.decodeIfPresent(String.self, forKey: .errorMessage),
                              finishedAt: try c.decodeIfPresent(Double.self, forKey: .finishedAt),
                              validators: try c.decodeIfPresent(ConditionalRefresh.Recorded.self, forKey: .validators))
        self.outcome = outcome == .empty ? nil : Shared(outcome)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(gid, forKey: .gid)
        try c.encode(order, forKey: .order)
        try c.encode(uris, forKey: .uris)
        try c.encode(destination, forKey: .destination)
        try c.encode(options, forKey: .options)
        try c.encode(state, forKey: .state)
        try c.encode(priority, forKey: .priority)
        try c.encodeIfPresent(bytesPerSecond, forKey: .bytesPerSecond)
        try c.encodeIfPresent(totalLength, forKey: .totalLength)
        try c.encodeIfPresent(completedLength, forKey: .completedLength)
        try c.encodeIfPresent(sha256, forKey: .sha256)
        try c.encodeIfPresent(errorCode, forKey: .errorCode)
        try c.encodeIfPresent(errorMessage, forKey: .errorMessage)
        try c.encode(addedAt, forKey: .addedAt)
        try c.encodeIfPresent(finishedAt, forKey: .finishedAt)
        try c.encode(hookPending, forKey: .hookPending)
        try c.encode(webhookPending, forKey: .webhookPending)
        try c.encodeIfPresent(validators, forKey: .validators)
    }
}

/// A job's options, kept as the JSON object the store writes (``FlatJSON``, keys sorted): one
/// string (none at all for `{"out":"a.iso"}`, 15 bytes or fewer) where a dictionary of two options
/// took 190 bytes; read when the job starts or is shown.
struct OptionList: Sendable, Equatable {
    let json: String

    init(_ options: [String: String]) { json = FlatJSON.encode(options) }

    /// The store's reading of the same text (``FlatJSON``, or the decoder for a control character,
    /// written as \u00XX); the text is always one `FlatJSON.encode` wrote.
    var dictionary: [String: String] { (try? SQLiteJobStore.dictionary(json)) ?? [:] }

    subscript(name: String) -> String? { dictionary[name] }
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
