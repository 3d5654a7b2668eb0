#if canImport(Glibc)
import Glibc
#endif

/// Shares transports — libcurl threads with their connection caches — between downloads, so a
/// mirror tool fetching many files from one host reuses its TCP (and TLS) connections.
///
/// ```swift
/// let session = Session()
/// for url in urls { try await Download(url, to: path(for: url), session: session).run() }
/// await session.shutdown()
/// ```
///
/// A session has one transport thread per core (at most four). Each download runs on the one
/// with the fewest transfers under way when it starts, the first on a tie: downloads one after
/// another all use the first, and its kept-alive connections; downloads side by side spread over
/// the cores, so receiving and writing many small files is not bound to one thread.
///
/// Thread safety: `Sendable`; downloads on one session may run concurrently.
public final class Session: Sendable {
    let transports: [CurlTransport]

    /// - Parameters:
    ///   - maximumConnections: connections kept open for reuse across downloads, in all.
    ///   - threads: transport threads; by default one per core, at most four.
    public init(maximumConnections: Int = 64, threads: Int? = nil) {
        let count = max(1, threads ?? min(4, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        let share = (max(1, maximumConnections) + count - 1) / count
        transports = (0..<count).map { _ in CurlTransport(maximumConnections: share) }
    }

    /// The transport for a download starting now: the least busy, the first on a tie.
    var transport: CurlTransport {
        transports.min { $0.transfersUnderWay < $1.transfersUnderWay }!
    }

    /// Ends the transport threads and waits for them; downloads still running end as interrupted.
    /// When this returns, no thread of the session is inside libcurl, so the process may exit.
    public func shutdown() async {
        for transport in transports { await transport.shutdown() }
    }

    deinit {
        // Cannot wait here; a session dropped without `shutdown()` ends its threads soon after.
        for transport in transports { transport.requestShutdown() }
    }
}
