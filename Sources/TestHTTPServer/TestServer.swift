import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP/1.1 server for tests and demos, on loopback, serving deterministic content.
///
/// Every path of the form `/size/N/NAME` serves ``SyntheticContent`` of `N` bytes (seed from the
/// `seed` query item, default 0). Query items switch behaviours per request, so one server serves
/// every case a test needs:
///
/// | query item | effect |
/// |---|---|
/// | `rate=B` | caps this connection at `B` bytes/s (token bucket per TCP connection, no burst) |
/// | `norange=1` | ignores `Range`: always `200` with the whole body |
/// | `nohead=1` | answers `HEAD` with `405` |
/// | `nolength=chunked` / `nolength=close` | no `Content-Length`: chunked, or delimited by closing |
/// | `noacceptranges=1` | leaves out `Accept-Ranges` |
/// | `etag=X` | sends `ETag: "X"` instead of the default |
/// | `weaketag=1` | makes the ETag weak (`W/"…"`) |
/// | `lm=DATE` | sends `Last-Modified: DATE` (percent-decoded) instead of the default |
/// | `noetag=1`, `nolm=1` | sends no `ETag`, no `Last-Modified` |
/// | `ignoreconditions=1` | ignores `If-None-Match` and `If-Modified-Since` (otherwise a match gets `304`) |
/// | `redirect=URL` | answers `302` with `Location: URL` (percent-decoded) |
/// | `cd=VALUE` | sends `Content-Disposition: VALUE` (percent-decoded) |
///
/// | `fault=F` | a fault on range requests (never on a `bytes=0-0` probe): `shift` or `total` (wrong `Content-Range`), `long` (1000 bytes past the range, chunked), `multipart`, `gzip`, `reset` or `stall` (after `faultbytes`, default 64 KiB), `full200`, `html200`, `503`, `429`, `416` |
/// | `fault=F1,F2,…` | faulted requests take the listed faults in turn |
/// | `faultevery=K`, `faultskip=J` | the fault hits every K-th range request after the first J (default: all); requests are counted per URI |
/// | `maxconn=K` | `503` with `Retry-After` while K responses are already being sent |
/// | `retryafter=S` | the `Retry-After` value (default 1) |
/// | `rangeafter=K` | ranges are honoured for the first K range requests only, then `200` with the whole body |
/// | `headhang=1` | `HEAD` is never answered |
/// | `headlength=N` | `HEAD` says `Content-Length: N` |
/// | `cl=V`, `cl2=V` | `Content-Length: V` verbatim (a second one with `cl2`), connection closed after |
/// | `shortrange416=1` | a range reaching past the end gets `416` with `Content-Range: bytes */N` (httpbin) |
/// | `emptyrange416=1` | a range of an empty file gets `416` without `Content-Range` (S3, moto) |
/// | `redirectbody=1` | redirects (`redirect=`, `signredirect=`) carry a small HTML body |
///
/// A path prefix `/hops/N/` redirects N times (to `/hops/N-1/…`) before serving the rest of the
/// path; `/loop/X` redirects to itself forever.
///
/// `GET /__stats` answers `{"connections":…,"peakConnections":…,"requests":…,"bodyBytes":…}`
/// (`peakConnections`: the most open at once; with ``Configuration/closeNoticedAtWrite``, a
/// connection closed mid-response stays open until the next paced write finds it closed).
///
/// Thread safety: all methods may be called from any thread; counters are atomic.
public final class TestServer: Sendable {
    /// Server-wide behaviour.
    public struct Configuration: Sendable {
        /// Per-connection rate cap in bytes per second; `0` is unlimited.
        public var rateLimit: Int64 = 0
        /// Every `slowEvery`-th connection (1-based, counted by the server) runs `slowFactor` times
        /// slower than `rateLimit`; `0` disables.
        public var slowEvery: Int = 0
        /// The slow-down of slow connections.
        public var slowFactor: Int64 = 16
        public var host: String = "127.0.0.1"
        /// `0` picks a free port.
        public var port: Int = 0
        /// A file to append a line to when a request arrives and when a response body ends, with
        /// wall-clock times: how long each response really took, and when each tool's requests
        /// arrived (`Benchmarks/peers/timeline.py`).
        public var timingLogPath: String?
        /// An emulated round trip: each new connection is served this much later than it was
        /// accepted, and each response's head leaves this much after its request arrived.
        public var latencyMilliseconds: Int64 = 0
        /// Act as a proxy that wants credentials: a request in absolute form (`GET http://…`) or a
        /// `CONNECT` without `Proxy-Authorization` gets 407.
        public var proxyAuthentication = false
        /// Count a connection as a threaded server with paced writes does: a client's close
        /// during a response is noticed only at the response's next paced write (a close of an
        /// idle connection at once). Per-IP limits count so (vsftpd's `max_per_ip`), and
        /// ``Statistics/peakConnections`` then shows what they would see.
        public var closeNoticedAtWrite = false

        public init(rateLimit: Int64 = 0, slowEvery: Int = 0, slowFactor: Int64 = 16, host: String = "127.0.0.1", port: Int = 0,
                    timingLogPath: String? = nil, latencyMilliseconds: Int64 = 0) {
            self.latencyMilliseconds = latencyMilliseconds
            self.rateLimit = rateLimit
            self.slowEvery = slowEvery
            self.slowFactor = slowFactor
            self.host = host
            self.port = port
            self.timingLogPath = timingLogPath
        }
    }

    /// Counters of what the server did.
    public struct Statistics: Sendable, Equatable {
        public var connections: Int
        /// The most connections open at once.
        public var peakConnections: Int
        public var requests: Int
        /// Body bytes written to sockets, over all responses.
        public var bodyBytes: Int64
        /// With a latency: the most requests waiting at once for their delayed answer (how many a
        /// client had on the network together).
        public var peakDelayedRequests: Int
    }

    final class Counters: Sendable {
        let connections = Atomic<Int>(0)
        /// Connections open now, and the most at once.
        let open = Atomic<Int>(0)
        let peakOpen = Atomic<Int>(0)
        let requests = Atomic<Int>(0)
        let bodyBytes = Atomic<Int64>(0)
        /// Path → (seed, ETag) replacing what the URL says: a file that changes on the server.
        let variants = NIOLockedValueBox<[String: (seed: UInt64, etag: String)]>([:])
        let recorded = NIOLockedValueBox<[RecordedRequest]>([])
        /// Range requests seen per URI (not counting `bytes=0-0` probes), for scripted faults.
        let rangeRequests = NIOLockedValueBox<[String: Int]>([:])
        /// Until when the server is "down" (`outageafter`): connections close without an answer.
        let outageUntil = NIOLockedValueBox<NIODeadline?>(nil)
        /// Requests of any kind seen per URI, for `firstfail`.
        let allRequests = NIOLockedValueBox<[String: Int]>([:])
        /// Responses whose body is being sent right now.
        let inflight = Atomic<Int>(0)
        /// Requests waiting for their delayed answer now (``Configuration/latencyMilliseconds``),
        /// and the most at once. Changed on the server's one event loop only.
        let delayed = Atomic<Int>(0)
        let peakDelayed = Atomic<Int>(0)
        /// Whole-file digests for `digest=` and `addheader=`.
        let digests = DigestCache()
    }

    /// A request as the server received it.
    public struct RecordedRequest: Sendable {
        public var method: String
        public var uri: String
        /// Header fields, names lowercased.
        public var headers: [(name: String, value: String)]

        public func header(_ name: String) -> String? {
            headers.first { $0.name == name.lowercased() }?.value
        }
    }

    /// Every request received so far, in order.
    public var recordedRequests: [RecordedRequest] { counters.recorded.withLockedValue { $0 } }

    let configuration: Configuration
    let counters = Counters()
    private let group: MultiThreadedEventLoopGroup
    private let channel: any Channel

    /// The port the server listens on.
    public let port: Int

    /// Starts a server.
    public init(configuration: Configuration = Configuration()) async throws {
        self.configuration = configuration
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.group = group
        let counters = self.counters
        let config = configuration
        let timing = try configuration.timingLogPath.map { try TimingLog(path: $0) }
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                // Counted from the accept to the close, as the peer's connection exists.
                let now = counters.open.wrappingAdd(1, ordering: .relaxed).newValue
                var peak = counters.peakOpen.load(ordering: .relaxed)
                while now > peak {
                    let (exchanged, original) = counters.peakOpen.compareExchange(expected: peak, desired: now, ordering: .relaxed)
                    if exchanged { break }
                    peak = original
                }
                // Noticed late, the request handler counts the close (a close before it is added
                // is never counted: more connections, never fewer).
                let peer = channel.remoteAddress?.port ?? 0
                timing?.record("connection-open \(peer) open=\(now)")
                if !config.closeNoticedAtWrite {
                    channel.closeFuture.whenComplete { _ in
                        let left = counters.open.wrappingSubtract(1, ordering: .relaxed).newValue
                        timing?.record("connection-closed \(peer) open=\(left)")
                    }
                }
                // With a latency, the connection is not read until a round trip has passed.
                let accepted = config.latencyMilliseconds > 0
                    ? channel.eventLoop.scheduleTask(in: .milliseconds(config.latencyMilliseconds)) {}.futureResult
                    : channel.eventLoop.makeSucceededVoidFuture()
                return accepted.flatMapThrowing {
                    let index = counters.connections.wrappingAdd(1, ordering: .relaxed).newValue
                    var rate = config.rateLimit
                    if config.slowEvery > 0 && index % config.slowEvery == 0 && rate > 0 {
                        rate = max(1, rate / config.slowFactor)
                    }
                    // No outbound validation: the server must be able to send the malformed headers tests need.
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withErrorHandling: true, withOutboundHeaderValidation: false)
                    try channel.pipeline.syncOperations.addHandler(
                        RequestHandler(counters: counters, defaultRate: rate, slowed: rate != config.rateLimit, timing: timing,
                                       latency: .milliseconds(config.latencyMilliseconds),
                                       proxyAuthentication: config.proxyAuthentication,
                                       closeNoticedAtWrite: config.closeNoticedAtWrite))
                }
            }
        do {
            channel = try await bootstrap.bind(host: configuration.host, port: configuration.port).get()
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        port = channel.localAddress?.port ?? 0
    }

    /// The base URL, e.g. `http://127.0.0.1:12345`.
    public var baseURL: String { "http://\(configuration.host):\(port)" }

    /// The URL of synthetic content of `size` bytes, with optional query items.
    public func url(size: Int64, name: String = "file.bin", seed: UInt64 = 0, query: [String: String] = [:]) -> String {
        var items = query
        if seed != 0 { items["seed"] = String(seed) }
        let q = items.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: "&")
        return "\(baseURL)/size/\(size)/\(name)" + (q.isEmpty ? "" : "?" + q)
    }

    /// Makes `path` (e.g. `/size/100/file.bin`) serve the content of `seed` with `etag` from now
    /// on, whatever its query says: the file "changes on the server" (and its `Last-Modified` is
    /// a day later).
    public func changeContent(path: String, seed: UInt64, etag: String) {
        counters.variants.withLockedValue { $0[path] = (seed, etag) }
    }

    /// What the server has done so far.
    public var statistics: Statistics {
        Statistics(connections: counters.connections.load(ordering: .relaxed),
                   peakConnections: counters.peakOpen.load(ordering: .relaxed),
                   requests: counters.requests.load(ordering: .relaxed),
                   bodyBytes: counters.bodyBytes.load(ordering: .relaxed),
                   peakDelayedRequests: counters.peakDelayed.load(ordering: .relaxed))
    }

    /// Stops listening, closes connections and ends the event loop.
    public func shutdown() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }

    /// Waits until the listening channel closes (for the command-line server).
    public func waitUntilClosed() async throws {
        try await channel.closeFuture.get()
    }
}
