/// How a download's requests reach the network: the transport thread it runs on and, when its
/// ``Session`` caps connections per host, a slot of the request's host held from before the
/// request is sent until its transfer ends.
struct Connector: Sendable {
    let transport: CurlTransport
    let limiter: HostLimiter?
    /// This download's number in the limiter: its slots are counted together.
    let download: Int

    init(transport: CurlTransport, limiter: HostLimiter? = nil) {
        self.transport = transport
        self.limiter = limiter
        download = limiter?.newDownload() ?? 0
    }

    /// The limiter's key for a URL's host: `host:port`, as libcurl keys its connections.
    static func host(of url: String) -> String {
        CurlURL(url).map { "\($0.host):\($0.port)" } ?? url
    }

    /// The slots of `url`'s host a new request would get at once (``HostLimiter/room(host:)``);
    /// `nil` without a cap.
    func room(for url: String) -> Int? {
        limiter?.room(host: Self.host(of: url))
    }

    /// Waits for what `request` needs of its host's cap (at once without one): a slot, or, for a
    /// request that may go over HTTP/2 to a host that speaks it, a stream of the host's one
    /// connection (``HostLimiter/acquire(host:download:http2:waiting:)``). `nil` when cancelled
    /// while waiting.
    func hold(for request: TransferRequest, waiting: (Bool) -> Void = { _ in }) async -> HostLimiter.Hold? {
        guard let limiter else { return .slot }
        var waited = false
        let hold = await limiter.acquire(host: Self.host(of: request.url), download: download, http2: request.http2) {
            waited = true
            waiting(true)
        }
        if waited { waiting(false) }
        return hold
    }

    /// Gives back what ``hold(for:waiting:)`` returned, and learns from the response whether the
    /// host speaks HTTP/2.
    func release(_ hold: HostLimiter.Hold, for request: TransferRequest, result: TransferResult?) {
        guard let limiter else { return }
        let host = Self.host(of: request.url)
        if request.http2, result?.head?.version == "2" { limiter.learnedHTTP2(host: host) }
        limiter.release(hold, host: host, download: download)
    }

    /// Performs `request` on what its host's cap allows: the transport's result, or a cancelled
    /// one when the task was cancelled while waiting.
    func perform(_ request: TransferRequest, sink: (any TransferSink)?, waiting: (Bool) -> Void = { _ in }) async -> TransferResult {
        guard let hold = await hold(for: request, waiting: waiting) else { return TransferResult(cancelled: true) }
        let result = await transport.perform(request, sink: sink)
        release(hold, for: request, result: result)
        return result
    }
}
