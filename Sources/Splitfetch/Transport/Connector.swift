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

    /// Waits for a slot of `url`'s host (at once without a cap). `waiting(true)` is called
    /// before a wait and `waiting(false)` after it, only when there is one. Returns `false`,
    /// without a slot, when the task is cancelled while waiting.
    func acquire(for url: String, waiting: (Bool) -> Void = { _ in }) async -> Bool {
        guard let limiter else { return true }
        var waited = false
        let granted = await limiter.acquire(host: Self.host(of: url), download: download) {
            waited = true
            waiting(true)
        }
        if waited { waiting(false) }
        return granted
    }

    /// The slots of `url`'s host a new request would get at once (``HostLimiter/room(host:)``);
    /// `nil` without a cap.
    func room(for url: String) -> Int? {
        limiter?.room(host: Self.host(of: url))
    }

    /// Gives back the slot ``acquire(for:waiting:)`` took for `url`.
    func release(for url: String) {
        limiter?.release(host: Self.host(of: url), download: download)
    }

    /// Performs `request` on a slot of its host: the transport's result, or a cancelled one when
    /// the task was cancelled while waiting for the slot.
    func perform(_ request: TransferRequest, sink: (any TransferSink)?, waiting: (Bool) -> Void = { _ in }) async -> TransferResult {
        guard await acquire(for: request.url, waiting: waiting) else { return TransferResult(cancelled: true) }
        defer { release(for: request.url) }
        return await transport.perform(request, sink: sink)
    }
}
