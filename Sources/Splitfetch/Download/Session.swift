/// Shares one transport — one libcurl thread and its connection cache — between downloads, so a
/// mirror tool fetching many files from one host reuses its TCP (and TLS) connections.
///
/// ```swift
/// let session = Session()
/// for url in urls { try await Download(url, to: path(for: url), session: session).run() }
/// await session.shutdown()
/// ```
///
/// Thread safety: `Sendable`; downloads on one session may run concurrently.
public final class Session: Sendable {
    let transport: CurlTransport

    /// - Parameter maximumConnections: connections kept open for reuse across downloads.
    public init(maximumConnections: Int = 64) {
        transport = CurlTransport(maximumConnections: maximumConnections)
    }

    /// Ends the transport thread and waits for it; downloads still running end as interrupted.
    /// When this returns, no thread of the session is inside libcurl, so the process may exit.
    public func shutdown() async {
        await transport.shutdown()
    }

    deinit {
        // Cannot wait here; a session dropped without `shutdown()` ends its thread soon after.
        transport.requestShutdown()
    }
}
