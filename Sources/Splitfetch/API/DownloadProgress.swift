/// A snapshot of a running download.
public struct DownloadProgress: Sendable, Equatable, Codable {
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
    /// The segment map of a segmented download: its ranges in file order, what of each is
    /// written, and which connection fetches it. Empty for a whole-file stream.
    public var segments: [SegmentProgress]

    public init(bytesWritten: Int64, totalBytes: Int64?, bytesPerSecond: Double, elapsed: Duration,
                connections: [ConnectionProgress], segments: [SegmentProgress] = []) {
        self.bytesWritten = bytesWritten
        self.totalBytes = totalBytes
        self.bytesPerSecond = bytesPerSecond
        self.elapsed = elapsed
        self.connections = connections
        self.segments = segments
    }

    private enum CodingKeys: String, CodingKey {
        case bytesWritten, totalBytes, bytesPerSecond, elapsed, connections, segments
    }

    /// Reads the synthesized encoding; a form without `segments` (older) reads as none.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(bytesWritten: try c.decode(Int64.self, forKey: .bytesWritten),
                  totalBytes: try c.decodeIfPresent(Int64.self, forKey: .totalBytes),
                  bytesPerSecond: try c.decode(Double.self, forKey: .bytesPerSecond),
                  elapsed: try c.decode(Duration.self, forKey: .elapsed),
                  connections: try c.decode([ConnectionProgress].self, forKey: .connections),
                  segments: try c.decodeIfPresent([SegmentProgress].self, forKey: .segments) ?? [])
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
public struct ConnectionProgress: Sendable, Equatable, Codable {
    public enum State: Int, Sendable, Equatable, Codable {
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
    /// `true` when its last response came over HTTP/2: a stream of a connection that other
    /// transfers may share (``HTTP2Policy``); `nil` over HTTP/1.1.
    public var http2: Bool?

    public init(id: Int, state: State, bytes: Int64, range: Range<Int64>? = nil, bytesPerSecond: Double = 0, source: Int? = nil,
                http2: Bool? = nil) {
        self.source = source
        self.http2 = http2
        self.id = id
        self.state = state
        self.bytes = bytes
        self.range = range
        self.bytesPerSecond = bytesPerSecond
    }
}

/// One range of a ``DownloadProgress``'s segment map.
public struct SegmentProgress: Sendable, Equatable, Codable {
    /// Its bytes in the file.
    public var range: Range<Int64>
    /// Bytes `range.lowerBound ..< written` are on disk.
    public var written: Int64
    /// The connection fetching it (a ``ConnectionProgress/id``), or `nil` when none is.
    public var connection: Int?
    /// It was split off another connection's range in this run.
    public var isSplit: Bool

    public init(range: Range<Int64>, written: Int64, connection: Int? = nil, isSplit: Bool = false) {
        self.range = range
        self.written = written
        self.connection = connection
        self.isSplit = isSplit
    }
}
