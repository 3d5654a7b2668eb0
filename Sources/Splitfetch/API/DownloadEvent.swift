/// Something a running download reports; read them from ``Download/events`` or
/// ``Download/subscribe(keepingProgress:)``.
///
/// An event is a ``kind`` and the fields of that kind. It is a struct, not an enum, so that new
/// kinds and fields can be added without breaking a caller's `switch`: switch over ``kind`` with
/// a `default`, and read the fields the kind carries.
///
/// ```swift
/// for await event in download.subscribe() {
///     switch event.kind {
///     case .progress: show(event.progress!)
///     case .failed: report(event.error!)
///     default: break
///     }
/// }
/// ```
///
/// The last event is ``Kind/finished`` or ``Kind/failed``, and it is never dropped.
///
/// **JSON.** An event's `Codable` form is the documented event schema (`--events`, the daemon's
/// notifications): `{"event": kind, ...fields}`, with absent fields left out. Readers ignore
/// fields they do not know.
///
/// Thread safety: a `Sendable` value.
public struct DownloadEvent: Sendable, Equatable {
    /// What happened. New kinds may be added; a reader skips kinds it does not know.
    public struct Kind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The probe finished: ``resource``.
        public static let probed = Kind(rawValue: "probed")
        /// Transfers are starting: ``mode``, ``connectionCount``, ``size``.
        public static let started = Kind(rawValue: "started")
        /// Periodic progress, every ``DownloadOptions/progressInterval``: ``progress``.
        public static let progress = Kind(rawValue: "progress")
        /// A request failed and will be retried after ``delay``: ``connection``, ``error``.
        public static let retry = Kind(rawValue: "retry")
        /// An idle connection took over ``range``, split off a busy connection's range (or taken
        /// from a stalled one): ``connection``.
        public static let split = Kind(rawValue: "split")
        /// The server refused more connections (503 or 429); the download goes on with
        /// ``reducedTo`` connections: ``reason``.
        public static let connectionsReduced = Kind(rawValue: "connectionsReduced")
        /// A source (``url``) is used no more, because of ``error``: a mirror that serves other
        /// bytes, answers 404 or keeps failing, or the URL probed while mirrors go on. None of a
        /// source's bytes reach the file unless it passed its identity check.
        public static let sourceDropped = Kind(rawValue: "sourceDropped")
        /// Something the caller should know that does not stop the download: ``warning``.
        public static let warning = Kind(rawValue: "warning")
        /// The download completed; the file is under its final name: ``statistics``.
        public static let finished = Kind(rawValue: "finished")
        /// The download failed (or was cancelled) with ``error``, the one ``Download/run()`` throws.
        public static let failed = Kind(rawValue: "failed")
    }

    public var kind: Kind
    /// ``Kind/probed``: what the probe learned.
    public var resource: RemoteResource?
    /// ``Kind/started``: segmented or single.
    public var mode: DownloadStatistics.Mode?
    /// ``Kind/started``: the connections used.
    public var connectionCount: Int?
    /// ``Kind/started``: the file's size, when known.
    public var size: Int64?
    /// ``Kind/progress``.
    public var progress: DownloadProgress?
    /// ``Kind/retry``, ``Kind/split``: the connection.
    public var connection: Int?
    /// ``Kind/retry``: the wait before the next attempt.
    public var delay: Duration?
    /// ``Kind/split``: the range taken over (bytes `lowerBound ..< upperBound`).
    public var range: Range<Int64>?
    /// ``Kind/connectionsReduced``: the connections left.
    public var reducedTo: Int?
    /// ``Kind/connectionsReduced``: why.
    public var reason: String?
    /// ``Kind/sourceDropped``: the source (credentials removed).
    public var url: String?
    /// ``Kind/retry``, ``Kind/sourceDropped``, ``Kind/failed``: the error.
    public var error: DownloadError?
    /// ``Kind/warning``.
    public var warning: DownloadWarning?
    /// ``Kind/finished``.
    public var statistics: DownloadStatistics?

    /// An event of `kind` with no fields; set those of its kind.
    public init(_ kind: Kind) { self.kind = kind }

    public static func probed(_ resource: RemoteResource) -> DownloadEvent {
        var event = DownloadEvent(.probed)
        event.resource = resource
        return event
    }

    public static func started(mode: DownloadStatistics.Mode, connections: Int, size: Int64?) -> DownloadEvent {
        var event = DownloadEvent(.started)
        (event.mode, event.connectionCount, event.size) = (mode, connections, size)
        return event
    }

    public static func progress(_ progress: DownloadProgress) -> DownloadEvent {
        var event = DownloadEvent(.progress)
        event.progress = progress
        return event
    }

    public static func retrying(connection: Int, error: DownloadError, delay: Duration) -> DownloadEvent {
        var event = DownloadEvent(.retry)
        (event.connection, event.error, event.delay) = (connection, error, delay)
        return event
    }

    public static func split(connection: Int, range: Range<Int64>) -> DownloadEvent {
        var event = DownloadEvent(.split)
        (event.connection, event.range) = (connection, range)
        return event
    }

    public static func connectionsReduced(to count: Int, reason: String) -> DownloadEvent {
        var event = DownloadEvent(.connectionsReduced)
        (event.reducedTo, event.reason) = (count, reason)
        return event
    }

    public static func sourceDropped(url: String, error: DownloadError) -> DownloadEvent {
        var event = DownloadEvent(.sourceDropped)
        (event.url, event.error) = (url, error)
        return event
    }

    public static func warning(_ warning: DownloadWarning) -> DownloadEvent {
        var event = DownloadEvent(.warning)
        event.warning = warning
        return event
    }

    public static func finished(_ statistics: DownloadStatistics) -> DownloadEvent {
        var event = DownloadEvent(.finished)
        event.statistics = statistics
        return event
    }

    public static func failed(_ error: DownloadError) -> DownloadEvent {
        var event = DownloadEvent(.failed)
        event.error = error
        return event
    }

    /// Whether this is the download's last event (finished or failed).
    public var isLast: Bool { kind == .finished || kind == .failed }
}

/// Something a caller should know that does not stop a download: a kind to act on, a message to
/// show, and the fields behind it.
public struct DownloadWarning: Sendable, Equatable, Codable {
    public struct Kind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// Two digests of the file disagree (a server's against the one given, or two a
        /// server states); fields `source`, `digest`, `checkedSource`, `checkedDigest`: the
        /// download checks `checkedSource`'s.
        public static let digestsDisagree = Kind(rawValue: "digestsDisagree")
    }

    public var kind: Kind
    /// A sentence for people.
    public var message: String
    /// The facts, by name.
    public var fields: [String: String]

    public init(_ kind: Kind, _ message: String, fields: [String: String] = [:]) {
        self.kind = kind
        self.message = message
        self.fields = fields
    }
}
