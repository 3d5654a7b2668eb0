/// Shares one transport — one libcurl thread and its connection cache — between downloads, so a
/// mirror tool fetching many files from one host reuses its TCP (and TLS) connections.
///
/// ```swift
/// let session = Session()
/// defer { session.shutdown() }
/// for url in urls { try await Download(url, to: path(for: url), session: session).run() }
/// ```
///
/// Thread safety: `Sendable`; downloads on one session may run concurrently.
public final class Session: Sendable {
    let transport: CurlTransport

    /// - Parameter maximumConnections: connections kept open for reuse across downloads.
    public init(maximumConnections: Int = 64) {
        transport = CurlTransport(maximumConnections: maximumConnections)
    }

    /// Ends the transport thread; downloads still running end as interrupted.
    public func shutdown() {
        transport.shutdown()
    }

    deinit {
        transport.shutdown()
    }
}
