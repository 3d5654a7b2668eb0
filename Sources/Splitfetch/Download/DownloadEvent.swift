/// Something a running download reports; read them from ``Download/events``.
///
/// The last event is ``finished(_:)`` or ``failed(_:)``, and it is never dropped (a slow
/// consumer loses the oldest events, never the newest).
///
/// Thread safety: every event and the types it carries are `Sendable` values.
public enum DownloadEvent: Sendable {
    /// The probe finished.
    case probed(RemoteResource)
    /// Transfers are starting: the mode (`segmented` or `single`) and the connection count.
    case started(mode: DownloadStatistics.Mode, connections: Int, size: Int64?)
    /// Periodic progress, every ``DownloadOptions/progressInterval``.
    case progress(DownloadProgress)
    /// A request failed and will be retried after `delay`.
    case retrying(connection: Int, error: DownloadError, delay: Duration)
    /// An idle connection took over `range`, split off a busy connection's range (or taken from
    /// a stalled one), so that the end is not left to one connection.
    case split(connection: Int, range: Range<Int64>)
    /// The server refused more connections (503 or 429); the download goes on with fewer.
    case connectionsReduced(to: Int, reason: String)
    /// A source is used no more (a mirror that serves other bytes, answers 404, or keeps
    /// failing; or the URL probed, while mirrors go on): the rest of the file comes from the
    /// others. None of a source's bytes reach the file unless it passed its identity check.
    case sourceDropped(url: String, error: DownloadError)
    /// Something the caller should know that does not stop the download: a server digest that
    /// disagrees with the one given, say.
    case warning(String)
    /// The download completed; the file is under its final name.
    case finished(DownloadStatistics)
    /// The download failed (or was cancelled) with this error, the one ``Download/run()`` throws.
    case failed(DownloadError)
}

/// A snapshot of a running download.
public struct DownloadProgress: Sendable, Equatable {
    /// Bytes on disk.
    public var bytesWritten: Int64
    /// The file size, when known.
    public var totalBytes: Int64?
    /// Smoothed speed, bytes per second.
    public var bytesPerSecond: Double
    /// Time since transfers started.
    public var elapsed: Duration
    /// Each connection's state.
    public var connections: [ConnectionProgress]

    public init(bytesWritten: Int64, totalBytes: Int64?, bytesPerSecond: Double, elapsed: Duration,
                connections: [ConnectionProgress]) {
        self.bytesWritten = bytesWritten
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.elapsed = elapsed
        self.connections = connections
    }

    /// Connections receiving data right now.
    public var activeConnections: Int { connections.filter { $0.state == .receiving }.count }

    /// Expected time left, when size and speed are known.
    public var estimatedTimeLeft: Duration? {
        guard let total = totalBytes, bytesPerSecond > 0 else { return nil }
        return .seconds(Double(max(0, total - bytesWritten)) / bytesPerSecond)
    }
}

/// One connection's part of a ``DownloadProgress``.
public struct ConnectionProgress: Sendable, Equatable {
    public enum State: Int, Sendable, Equatable {
        case idle = 0, receiving = 1, waitingToRetry = 2, done = 3
    }
    public var id: Int
    public var state: State
    /// Bytes this connection has written.
    public var bytes: Int64
    /// The range it is fetching now (bytes `lowerBound ..< upperBound` of the file); `nil` when
    /// idle, or for a whole-file stream.
    public var range: Range<Int64>?
    /// Smoothed speed of this connection, bytes per second.
    public var bytesPerSecond: Double
    /// The source it fetches from (an index: 0 is the URL probed, then the mirrors), when the
    /// download has mirrors; `nil` without.
    public var source: Int?

    public init(id: Int, state: State, bytes: Int64, range: Range<Int64>? = nil, bytesPerSecond: Double = 0, source: Int? = nil) {
        self.source = source
        self.id = id
        self.state = state
        self.bytes = bytes
        self.range = range
        self.bytesPerSecond = bytesPerSecond
    }
}

/// Final, machine-readable figures of a completed download (`--stats-json`).
public struct DownloadStatistics: Sendable, Equatable, Codable {
    public enum Mode: String, Sendable, Codable {
        /// Several ranges over several connections.
        case segmented
        /// One stream, because the server does not support ranges or did not give a length.
        case single
    }

    /// Per-connection figures.
    public struct Connection: Sendable, Equatable, Codable {
        public var id: Int
        public var bytes: Int64
        public var requests: Int
        public var retries: Int
        /// The source it fetched from (an index into ``DownloadStatistics/sources``; 0 without mirrors).
        public var source: Int = 0

        public init(id: Int, bytes: Int64, requests: Int, retries: Int, source: Int = 0) {
            self.id = id
            self.bytes = bytes
            self.requests = requests
            self.retries = retries
            self.source = source
        }
    }

    /// Per-source figures of a download with mirrors: the URL probed first, then each mirror.
    public struct Source: Sendable, Equatable, Codable {
        /// The source's URL (credentials removed).
        public var url: String
        /// Bytes of the file it delivered.
        public var bytes: Int64
        public var requests: Int
        /// Failed requests (each retried, or the one that dropped it).
        public var errors: Int
        /// Why it was dropped, if it was: its identity check, or the failures it kept having.
        public var dropped: String?

        public init(url: String, bytes: Int64, requests: Int, errors: Int, dropped: String? = nil) {
            self.url = url
            self.bytes = bytes
            self.requests = requests
            self.errors = errors
            self.dropped = dropped
        }
    }

    /// The URL asked for (credentials removed).
    public var url: String
    /// The URL after redirects (credentials removed).
    public var finalURL: String
    /// The final path of the file.
    public var path: String
    public var mode: Mode
    /// File size in bytes.
    public var size: Int64
    /// Wall time from start (before the probe) to the file under its final name, in seconds (a
    /// number, for the JSON form); ``duration`` is the same as a `Duration`.
    public var seconds: Double
    /// Bytes fetched by this run (`size - resumedBytes`) divided by `seconds`.
    public var averageBytesPerSecond: Double
    /// Connections used.
    public var connectionCount: Int
    public var connections: [Connection]
    /// HTTP requests for data (not counting the probe).
    public var requests: Int
    /// Failed requests that were retried.
    public var retries: Int
    /// In-flight ranges split to idle connections.
    public var splits: Int
    /// Bytes received from the network, including any rejected or re-fetched ones.
    public var bytesReceived: Int64
    /// Bytes already on disk from an earlier run when this one started.
    public var resumedBytes: Int64
    /// The finished file's digests: those checked and those asked for
    /// (``DownloadOptions/reportedDigests``). Empty when nothing was hashed.
    public var digests: [Digest] = []
    /// The expected digests the file matched, with where each came from.
    public var verified: [ExpectedDigest] = []
    /// Each source's figures when the download had mirrors (empty otherwise).
    public var sources: [Source] = []

    /// Wall time from start to the file under its final name.
    public var duration: Duration { .seconds(seconds) }

    public init(url: String, finalURL: String, path: String, mode: Mode, size: Int64, seconds: Double,
                averageBytesPerSecond: Double, connectionCount: Int, connections: [Connection], requests: Int,
                retries: Int, splits: Int, bytesReceived: Int64, resumedBytes: Int64) {
        self.url = url
        self.finalURL = finalURL
        self.path = path
        self.mode = mode
        self.size = size
        self.seconds = seconds
        self.averageBytesPerSecond = averageBytesPerSecond
        self.connectionCount = connectionCount
        self.connections = connections
        self.requests = requests
        self.retries = retries
        self.splits = splits
        self.bytesReceived = bytesReceived
        self.resumedBytes = resumedBytes
    }
}
