/// How a download's requests reach the network: the transport thread it runs on and, when its
/// ``Session`` caps connections per host, a slot of the request's host held from before the
/// request is sent until its transfer ends.
struct Connector: Sendable {
    let transport: CurlTransport
    let limiter: HostLimiter?
    /// A cap shared with other processes: a slot of it too, after the limiter's.
    let shared: (any SharedHostCap)?
    /// This download's number in the limiter: its slots are counted together.
    let download: Int
    /// Its claim on its batch's ``NetworkGate``: its first transfer waits there for a permit.
    let ticket: NetworkTicket?

    init(transport: CurlTransport, limiter: HostLimiter? = nil, shared: (any SharedHostCap)? = nil, ticket: NetworkTicket? = nil) {
        self.transport = transport
        self.limiter = limiter
        self.shared = shared
        self.ticket = ticket
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
        let host = Self.host(of: request.url)
        var hold = HostLimiter.Hold.slot
        if let limiter {
            var waited = false
            // With a shared cap no connection outlives its transfer: no stream shares one.
            guard let held = await limiter.acquire(host: host, download: download, http2: request.mayMultiplex && shared == nil, waiting: {
                waited = true
                waiting(true)
            }) else { return nil }
            if waited { waiting(false) }
            hold = held
        }
        if let shared, !(await shared.acquire(host: host)) {
            limiter?.release(hold, host: host, download: download)
            return nil
        }
        return hold
    }

    /// Gives back what ``hold(for:waiting:)`` returned, and learns from the response whether the
    /// host speaks HTTP/2.
    func release(_ hold: HostLimiter.Hold, for request: TransferRequest, result: TransferResult?) {
        let host = Self.host(of: request.url)
        releaseShared(host: host, result: result)
        guard let limiter else { return }
        if request.mayMultiplex, result?.head?.version == "2" { limiter.learnedHTTP2(host: host) }
        limiter.release(hold, host: host, download: download)
    }

    /// Takes a slot of `url`'s host now, if one is free: for a few short requests that would
    /// otherwise wait behind this download's own long ones, which take every slot as they
    /// start (``performOnTakenSlot(_:sink:)``). `nil` without a cap or with no slot free; give
    /// it back with ``giveBack(_:)``.
    func takeFreeSlot(for url: String) -> TakenSlot? {
        let host = Self.host(of: url)
        guard let limiter, limiter.takeFreeSlot(host: host, download: download) else { return nil }
        return TakenSlot(host: host)
    }

    /// A slot of a capped host, taken by ``takeFreeSlot(for:)``.
    struct TakenSlot: Sendable {
        let host: String
    }

    func giveBack(_ slot: TakenSlot) {
        limiter?.release(host: slot.host, download: download)
    }

    /// Performs `request`, to the host of `slot`, on that slot, which it keeps (a cap shared with
    /// other processes is waited for as in ``perform(_:sink:waiting:)``).
    func performOnTakenSlot(_ request: TransferRequest, sink: (any TransferSink)?, slot: TakenSlot) async -> TransferResult {
        precondition(Self.host(of: request.url) == slot.host)
        if let shared, !(await shared.acquire(host: slot.host)) { return TransferResult(cancelled: true) }
        let result = await transport.perform(request, sink: sink, ticket: ticket)
        releaseShared(host: slot.host, result: result)
        return result
    }

    /// Gives back the shared cap's slot of `host`: early (its connection perhaps still open)
    /// unless the transfer ended cleanly.
    private func releaseShared(host: String, result: TransferResult?) {
        let ended = result.map { $0.curlCode == 0 && !$0.cancelled && !$0.stoppedBySink } ?? false
        shared?.release(host: host, early: !ended)
    }

    /// Performs `request` on what its host's cap allows: the transport's result, or a cancelled
    /// one when the task was cancelled while waiting.
    func perform(_ request: TransferRequest, sink: (any TransferSink)?, waiting: (Bool) -> Void = { _ in }) async -> TransferResult {
        guard let hold = await hold(for: request, waiting: waiting) else { return TransferResult(cancelled: true) }
        let result = await transport.perform(request, sink: sink, ticket: ticket)
        release(hold, for: request, result: result)
        return result
    }
}
