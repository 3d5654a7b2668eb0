public import DownloadCore
public import SystemPackage

/// Final, machine-readable figures of a completed download (`--stats-json`).
///
/// Its JSON form writes ``duration`` as `seconds` (a number) and ``path`` as a string.
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
        /// `true` when any of its responses came over HTTP/2 (a stream of a shared connection);
        /// `nil` when all came over HTTP/1.1.
        public var http2: Bool?

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
    public var path: FilePath
    public var mode: Mode
    /// File size in bytes.
    public var size: Int64
    /// Wall time from start (before the probe) to the file under its final name.
    public var duration: Duration
    /// Bytes fetched by this run (`size - resumedBytes`) divided by ``duration``.
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
    /// (``DownloadOptions/Integrity-swift.struct/reportedDigests``). Empty when nothing was hashed.
    public var digests: [Digest] = []
    /// The expected digests the file matched, with where each came from.
    public var verified: [ExpectedDigest] = []
    /// Each source's figures when the download had mirrors (empty otherwise).
    public var sources: [Source] = []
    /// A conditional refresh (``DownloadOptions/refresh``) found the file unchanged on the server:
    /// nothing was written, and ``size`` is the size of the file kept.
    public var unchanged: Bool = false
    /// The server's validators recorded with the file put in place (or, ``unchanged``, the file
    /// kept), with its size and time: what a caller that keeps its own records stores, to give
    /// back as ``DownloadOptions/refreshRecord``. `nil` when the server sent none.
    public var validators: ConditionalRefresh.Recorded?

    /// ``duration`` in seconds, as the JSON form writes it.
    public var seconds: Double { duration.seconds }

    public init(url: String, finalURL: String, path: FilePath, mode: Mode, size: Int64, duration: Duration,
                averageBytesPerSecond: Double, connectionCount: Int, connections: [Connection], requests: Int,
                retries: Int, splits: Int, bytesReceived: Int64, resumedBytes: Int64) {
        self.url = url
        self.finalURL = finalURL
        self.path = path
        self.mode = mode
        self.size = size
        self.duration = duration
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

extension DownloadStatistics {
    enum CodingKeys: String, CodingKey {
        case url, finalURL, path, mode, size, seconds, averageBytesPerSecond, connectionCount, connections, requests, retries,
             splits, bytesReceived, resumedBytes, digests, verified, sources, unchanged, validators
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(url, forKey: .url)
        try c.encode(finalURL, forKey: .finalURL)
        try c.encode(path.string, forKey: .path)
        try c.encode(mode, forKey: .mode)
        try c.encode(size, forKey: .size)
        try c.encode(seconds, forKey: .seconds)
        try c.encode(averageBytesPerSecond, forKey: .averageBytesPerSecond)
        try c.encode(connectionCount, forKey: .connectionCount)
        try c.encode(connections, forKey: .connections)
        try c.encode(requests, forKey: .requests)
        try c.encode(retries, forKey: .retries)
        try c.encode(splits, forKey: .splits)
        try c.encode(bytesReceived, forKey: .bytesReceived)
        try c.encode(resumedBytes, forKey: .resumedBytes)
        try c.encode(digests, forKey: .digests)
        try c.encode(verified, forKey: .verified)
        try c.encode(sources, forKey: .sources)
        try c.encode(unchanged, forKey: .unchanged)
        try c.encodeIfPresent(validators, forKey: .validators)
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(url: try c.decode(String.self, forKey: .url), finalURL: try c.decode(String.self, forKey: .finalURL),
                  path: FilePath(try c.decode(String.self, forKey: .path)), mode: try c.decode(Mode.self, forKey: .mode),
                  size: try c.decode(Int64.self, forKey: .size), duration: .seconds(try c.decode(Double.self, forKey: .seconds)),
                  averageBytesPerSecond: try c.decode(Double.self, forKey: .averageBytesPerSecond),
                  connectionCount: try c.decode(Int.self, forKey: .connectionCount),
                  connections: try c.decode([Connection].self, forKey: .connections), requests: try c.decode(Int.self, forKey: .requests),
                  retries: try c.decode(Int.self, forKey: .retries), splits: try c.decode(Int.self, forKey: .splits),
                  bytesReceived: try c.decode(Int64.self, forKey: .bytesReceived),
                  resumedBytes: try c.decode(Int64.self, forKey: .resumedBytes))
        digests = try c.decodeIfPresent([Digest].self, forKey: .digests) ?? []
        verified = try c.decodeIfPresent([ExpectedDigest].self, forKey: .verified) ?? []
        sources = try c.decodeIfPresent([Source].self, forKey: .sources) ?? []
        unchanged = try c.decodeIfPresent(Bool.self, forKey: .unchanged) ?? false
        validators = try c.decodeIfPresent(ConditionalRefresh.Recorded.self, forKey: .validators)
    }
}
