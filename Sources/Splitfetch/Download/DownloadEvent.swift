/// Something a running download reports; read them from ``Download/events``.
public enum DownloadEvent: Sendable {
    /// The probe finished.
    case probed(RemoteResource)
    /// Transfers are starting: the mode (`segmented` or `single`) and the connection count.
    case started(mode: DownloadStatistics.Mode, connections: Int, size: Int64?)
    /// Periodic progress, every ``DownloadOptions/progressInterval``.
    case progress(DownloadProgress)
    /// A request failed and will be retried after `delay` seconds.
    case retrying(connection: Int, error: DownloadError, delay: Double)
    /// The server refused more connections (503 or 429); the download goes on with fewer.
    case connectionsReduced(to: Int, reason: String)
    /// The download completed; the file is under its final name.
    case finished(DownloadStatistics)
}

/// A snapshot of a running download.
public struct DownloadProgress: Sendable, Equatable {
    /// Bytes on disk.
    public var bytesWritten: Int64
    /// The file size, when known.
    public var totalBytes: Int64?
    /// Smoothed speed, bytes per second.
    public var bytesPerSecond: Double
    /// Seconds since transfers started.
    public var elapsed: Double
    /// Each connection's state.
    public var connections: [ConnectionProgress]

    /// Connections receiving data right now.
    public var activeConnections: Int { connections.filter { $0.state == .receiving }.count }

    /// Expected seconds left, when size and speed are known.
    public var estimatedSecondsLeft: Double? {
        guard let total = totalBytes, bytesPerSecond > 0 else { return nil }
        return Double(max(0, total - bytesWritten)) / bytesPerSecond
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
    /// Wall time from start (before the probe) to the file under its final name, in seconds.
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
}
