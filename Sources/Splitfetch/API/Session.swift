import NIOConcurrencyHelpers
#if canImport(Glibc)
import Glibc
#endif

/// Shares transports — libcurl threads with their connection caches — between downloads, so a
/// mirror tool fetching many files from one host reuses its TCP (and TLS) connections, and keeps
/// to a per-host connection cap across all of them.
///
/// ```swift
/// let session = Session(maximumConnectionsPerHost: 8)
/// for await file in session.download(files, jobs: 4) { report(file) }
/// await session.shutdown()
/// ```
///
/// A session has one transport thread per core (at most four) unless told otherwise; a batch of
/// many files at once over HTTP/1.1 wants one per file
/// (``transportThreads(downloadsAtOnce:)``). Without a per-host cap, each download runs on the
/// one with the fewest transfers under way when it starts, the first on a tie: downloads one
/// after another all use the first, and its kept-alive connections; downloads side by side
/// spread over the threads. With a cap, every download of a host runs on the same thread, so the
/// host's kept-alive connections are in one cache and counted once.
///
/// **Per-host cap.** With `maximumConnectionsPerHost`, every request of every download in the
/// session holds a slot of its host (`host:port`) from before it is sent until its transfer
/// ends; a request that finds none free waits, and its download's machine counts it as paused,
/// not stalled. A freed slot goes to the waiting download that holds the fewest (the earliest on
/// a tie), so downloads that share a host get equal shares within a few transfers, and a
/// download's idle connection is another's next one. libcurl's `CURLMOPT_MAX_HOST_CONNECTIONS`
/// bounds the connections it keeps per host to the same number.
///
/// Thread safety: `Sendable`; downloads on one session may run concurrently.
public final class Session: Sendable {
    let transports: [CurlTransport]
    /// The per-host cap, when there is one.
    let limiter: HostLimiter?
    /// The per-host cap shared with other processes, when there is one.
    let sharedCap: (any SharedHostCap)?

    /// - Parameters:
    ///   - maximumConnectionsPerHost: connections to one host at once, over every download of
    ///     the session; `nil` for no cap. At least 1.
    ///   - maximumConnections: connections kept open for reuse across downloads, in all.
    ///   - threads: transport threads; by default one per core, at most four.
    ///   - sharedHostCap: a per-host cap shared with other processes (``SharedHostCap``): each
    ///     request also holds one of its slots, and every connection closes when its transfer
    ///     ends.
    public init(maximumConnectionsPerHost: Int? = nil, maximumConnections: Int = 64, threads: Int? = nil,
                sharedHostCap: (any SharedHostCap)? = nil) {
        let count = max(1, threads ?? Self.defaultThreads)
        let share = (max(1, maximumConnections) + count - 1) / count
        let perHost = maximumConnectionsPerHost.map { max(1, $0) }
        let closes = sharedHostCap != nil
        transports = (0..<count).map { _ in
            CurlTransport(maximumConnections: share, maximumPerHost: perHost ?? 0, closesConnections: closes)
        }
        limiter = perHost.map { HostLimiter(cap: $0) }
        sharedCap = sharedHostCap
    }

    /// Transport threads for `jobs` downloads at once: one per download (at most 16), and never
    /// fewer than the default, one per core (at most four).
    ///
    /// One thread reads every connection that is ready before it answers any. When a list's
    /// connections run in step (many small files over one round trip, each answer arriving with
    /// the others), each file's next request waited for the other answers on its thread to be
    /// read and handled. With a thread per download, each connection turns round on its own, as
    /// `wget2`'s threads do. An idle thread costs no CPU, and none starts before its first
    /// transfer. Not for files that may come over HTTP/2: a host's streams share a connection per
    /// thread, so more threads would open more connections to it.
    public static func transportThreads(downloadsAtOnce jobs: Int) -> Int {
        max(defaultThreads, min(max(1, jobs), 16))
    }

    /// One transport thread per core, at most four.
    static var defaultThreads: Int { max(1, min(4, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))) }

    /// The per-host cap, if any.
    public var maximumConnectionsPerHost: Int? { limiter?.cap }

    /// Changes the per-host cap of a session made with one, while downloads run: a higher cap
    /// lets waiting requests go at once; a lower one takes effect as transfers end (none is
    /// stopped). A session made without a cap keeps none (its downloads are not spread by host).
    ///
    /// - Returns: whether the session has a cap to change.
    @discardableResult
    public func setMaximumConnectionsPerHost(_ count: Int) -> Bool {
        guard let limiter else { return false }
        let cap = max(1, count)
        for transport in transports { transport.setMaximumPerHost(cap) }
        limiter.setCap(cap)
        return true
    }

    /// Makes choosing and counting one step, so downloads that start together see each other.
    private let choosing = NIOLock()

    /// The transport for a download of `url` starting now (``transport(for:)``), counted as
    /// busier until the download calls ``CurlTransport/unassign()`` (when its network part is
    /// over). Counting only transfers under way, 8 downloads starting at once all found both
    /// transports idle and took the first; later files went to the second as the first looked
    /// busier, each opening a connection there: 13 connections for 8 files at a time.
    func assignTransport(for url: String) -> CurlTransport {
        choosing.withLock {
            let transport = transport(for: url)
            transport.assign()
            return transport
        }
    }

    /// The transport for a download of `url` starting now: its host's, with a per-host cap;
    /// otherwise the least busy (downloads given it and transfers under way), the first on a tie.
    func transport(for url: String) -> CurlTransport {
        guard limiter != nil, transports.count > 1 else {
            return transports.min { $0.load < $1.load }!
        }
        // A stable choice by the host's name (Hasher is seeded per process, which is enough).
        var hasher = Hasher()
        hasher.combine(Connector.host(of: url))
        let index = Int(UInt(bitPattern: hasher.finalize()) % UInt(transports.count))
        return transports[index]
    }

    /// Ends the transport threads and waits for them; downloads still running end as interrupted.
    /// When this returns, no thread of the session is inside libcurl, so the process may exit.
    public func shutdown() async {
        // Every thread told first, so they end side by side rather than one after another.
        for transport in transports { transport.requestShutdown() }
        for transport in transports { await transport.shutdown() }
    }

    deinit {
        // Cannot wait here; a session dropped without `shutdown()` ends its threads soon after.
        for transport in transports { transport.requestShutdown() }
    }
}
