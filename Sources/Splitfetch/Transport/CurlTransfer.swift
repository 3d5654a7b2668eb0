import CCurl
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One request in flight on the transport thread.
///
/// `@unchecked Sendable`: the creating task sets `continuation` before posting the transfer;
/// from then on every mutable field is read and written only on the transport thread. The one
/// field other threads touch, `cancelRequested`, is atomic. A transfer waiting at a
/// ``NetworkGate`` is on no transport thread yet: it goes to one, or is withdrawn and ended by
/// the cancelling task, never both (the gate decides under its lock). A handle it made itself
/// (``prepare()``) is configured by the creating task before the transfer is posted, and freed
/// with the transfer once no transport uses it.
final class CurlTransfer: @unchecked Sendable {
    /// Longest header block accepted, in bytes; a larger one aborts the transfer.
    static let maximumHeaderBytes = 64 * 1024
    /// libcurl's receive buffer per transfer.
    static let receiveBufferSize = 256 * 1024

    let id: UInt64
    let request: TransferRequest
    let sink: (any TransferSink)?
    let cancelRequested = Atomic<Bool>(false)

    var continuation: CheckedContinuation<TransferResult, Never>?
    /// Its download's claim on a batch's ``NetworkGate``; set before the transfer is posted.
    var ticket: NetworkTicket?
    /// The download that got the permit this transfer's end gave back, on the transport thread:
    /// told by this transfer's task once it resumes (set before that).
    var permitHandedTo: NetworkTicket?
    /// The transport a ``NetworkGate`` handed it to, when not the one asked (set under the
    /// gate's lock, before the hand-off); `nil`: the one asked.
    var owner: CurlTransport?
    /// How long it may wait for its body's first byte (or its end), and what to do then; set
    /// before it is posted, run by the transport thread (``CurlTransport/perform(_:sink:ticket:headTimeout:)``).
    var headTimeout: (limit: Duration, action: @Sendable () -> Void)?
    /// When ``headTimeout`` runs out, from when libcurl had the transfer; `nil` before that, once
    /// a body byte came, and once it ran. Only the transport thread reads and writes it.
    var headDeadline: ContinuousClock.Instant?
    /// Asks the transport thread to go on with a paused transfer; set by the transport thread
    /// that starts the transfer, before libcurl has it.
    var resume: (@Sendable () -> Void)?
    /// When the transport thread resumes this paused transfer itself (a rate limit's wait);
    /// `nil` when it is not paused so. Only the transport thread reads and writes it.
    var resumeAt: ContinuousClock.Instant?
    var result = TransferResult()
    var head = ResponseHead()
    var headerBytes = 0
    /// Over FTP: what the server's replies told (``ServerReplies``).
    var replies = ServerReplies()
    private(set) var easy: UnsafeMutableRawPointer?
    /// Whether ``easy`` is this transfer's own (``prepare()``), not one of a transport's: the
    /// transport adds it as it is, and leaves it to be freed with the transfer.
    private(set) var ownsHandle = false
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer: UnsafeMutablePointer<CChar>

    init(id: UInt64, request: TransferRequest, sink: (any TransferSink)?) {
        self.id = id
        self.request = request
        self.sink = sink
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    deinit {
        // Detached from any multi handle by now: its connection, if kept, is in the cache.
        if ownsHandle, let easy { curl_easy_cleanup(easy) }
        errorBuffer.deallocate()
        if let headerList { curl_slist_free_all(headerList) }
    }

    /// Makes and configures a handle of its own before the transfer is posted, so that the
    /// transport thread that starts it only adds it: for a request that may wait at a batch's
    /// ``NetworkGate`` and then be started by the thread whose answer freed a connection, where
    /// every microsecond before the send is one the round trip waits for (setting ~30 options
    /// took about 12 µs of it). Nothing is done when libcurl is not ready yet (the transport
    /// configures the request then, as for any other) or refuses an option (the transport's
    /// configuring reports it). Making, configuring and freeing a handle that is in no multi
    /// handle is memory work alone, with no I/O, so it may run on Swift's pool.
    func prepare() {
        guard easy == nil, Libcurl.isReady, let handle = curl_easy_init() else { return }
        if configure(handle) != nil {
            release(handle)
            curl_easy_cleanup(handle)
            return
        }
        ownsHandle = true
    }

    /// Sets every option this request needs on a fresh (or reset) easy handle.
    ///
    /// - Returns: `nil`, or what libcurl refused (the first option whose `curl_easy_setopt` failed).
    func configure(_ easy: UnsafeMutableRawPointer) -> String? {
        self.easy = easy
        let r = request
        var refused: String?
        func set(_ code: CURLcode, _ option: String) {
            if code != CURLE_OK && refused == nil {
                refused = "curl_easy_setopt(\(option)) failed: \(String(cString: curl_easy_strerror(code)))"
            }
        }
        set(sf_easy_setopt_string(easy, CURLOPT_URL, r.url), "CURLOPT_URL")
        set(sf_easy_setopt_pointer(easy, CURLOPT_PRIVATE, Unmanaged.passUnretained(self).toOpaque()), "CURLOPT_PRIVATE")
        set(sf_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer), "CURLOPT_ERRORBUFFER")
        set(sf_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "CURLOPT_NOSIGNAL")
        // Only the request's own protocol: a URL of another scheme cannot slip through.
        set(sf_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, r.fileTransfer?.scheme ?? "http,https"), "CURLOPT_PROTOCOLS_STR")
        set(sf_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"), "CURLOPT_REDIR_PROTOCOLS_STR")
        // Redirects are followed by the caller, one hop at a time, so that every hop is checked
        // (protocol, downgrade, loops) and credentials go only to their own origin.
        set(sf_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, 0), "CURLOPT_FOLLOWLOCATION")
        if r.insecure {
            set(sf_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 0), "CURLOPT_SSL_VERIFYPEER")
            set(sf_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 0), "CURLOPT_SSL_VERIFYHOST")
        } else {
            set(sf_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "CURLOPT_SSL_VERIFYPEER")
            set(sf_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "CURLOPT_SSL_VERIFYHOST")
        }
        if let ca = r.caCertificatePath { set(sf_easy_setopt_string(easy, CURLOPT_CAINFO, ca), "CURLOPT_CAINFO") }
        if let proxy = r.proxy { set(sf_easy_setopt_string(easy, CURLOPT_PROXY, proxy), "CURLOPT_PROXY") }
        if let noProxy = r.noProxy { set(sf_easy_setopt_string(easy, CURLOPT_NOPROXY, noProxy), "CURLOPT_NOPROXY") }
        if r.useNetrc {
            set(sf_easy_setopt_long(easy, CURLOPT_NETRC, Int(CURL_NETRC_OPTIONAL.rawValue)), "CURLOPT_NETRC")
            if let file = r.netrcFile { set(sf_easy_setopt_string(easy, CURLOPT_NETRC_FILE, file), "CURLOPT_NETRC_FILE") }
        }
        if let c = r.credentials {
            set(sf_easy_setopt_string(easy, CURLOPT_USERNAME, c.user), "CURLOPT_USERNAME")
            set(sf_easy_setopt_string(easy, CURLOPT_PASSWORD, c.password), "CURLOPT_PASSWORD")
        }
        // A connection closed after its request carries no other stream: no HTTP/2, and no wait
        // for a connection to multiplex on (PIPEWAIT would hold each request until the one before
        // it on the host had ended).
        if r.mayMultiplex && !r.closesConnection {
            set(sf_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)), "CURLOPT_HTTP_VERSION")
            set(sf_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1), "CURLOPT_PIPEWAIT")
        } else {
            set(sf_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1)), "CURLOPT_HTTP_VERSION")
        }
        // libcurl 7.88 refuses a new size once the handle has a buffer (a reset handle that served
        // an HTTP/2 stream keeps it): that buffer is this size already, so the refusal is ignored.
        _ = sf_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, Self.receiveBufferSize)
        set(sf_easy_setopt_long(easy, CURLOPT_TCP_NODELAY, 1), "CURLOPT_TCP_NODELAY")
        set(sf_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1), "CURLOPT_TCP_KEEPALIVE")
        if r.closesConnection {
            set(sf_easy_setopt_long(easy, CURLOPT_FORBID_REUSE, 1), "CURLOPT_FORBID_REUSE")
            // A transfer stopped mid-response closes a connection the server is still writing to:
            // reset, it is gone for the server at once (a FIN is noticed only at a failed write).
            if r.fileTransfer == nil { set(sf_easy_reset_on_close(easy), "CURLOPT_SOCKOPTFUNCTION") }
        }
        set(sf_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(r.connectTimeout * 1000)), "CURLOPT_CONNECTTIMEOUT_MS")
        // No low-speed limit here: when a transfer has stalled is the download core's decision
        // (it aborts it by id); probes end at their total timeout.
        if let total = r.totalTimeout {
            set(sf_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, max(1, Int(total * 1000))), "CURLOPT_TIMEOUT_MS")
        }
        set(sf_easy_setopt_string(easy, CURLOPT_USERAGENT, r.userAgent), "CURLOPT_USERAGENT")
        if let settings = r.fileTransfer { configureFileTransfer(easy, settings, set: set) }
        switch r.method {
        case .head: set(sf_easy_setopt_long(easy, CURLOPT_NOBODY, 1), "CURLOPT_NOBODY")
        case .get: set(sf_easy_setopt_long(easy, CURLOPT_HTTPGET, 1), "CURLOPT_HTTPGET")
        }
        if let range = r.range {
            // An upper bound of Int64.max asks for everything from the lower one.
            let last = range.upperBound == Int64.max ? "" : String(range.upperBound - 1)
            set(sf_easy_setopt_string(easy, CURLOPT_RANGE, "\(range.lowerBound)-\(last)"), "CURLOPT_RANGE")
        }
        var list: UnsafeMutablePointer<curl_slist>?
        // The bytes as stored: a compressed body would not be the file, nor fit its ranges.
        if !r.headers.contains(where: { $0.lowercased().hasPrefix("accept-encoding:") }) {
            list = curl_slist_append(list, "Accept-Encoding: identity")
        }
        for line in r.headers { list = curl_slist_append(list, line) }
        // Said to the server too, so that it closes (and counts the connection gone) as soon as
        // the response is written, not when it notices the client's close.
        if r.closesConnection && r.fileTransfer == nil { list = curl_slist_append(list, "Connection: close") }
        headerList = list
        if let list { set(sf_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list), "CURLOPT_HTTPHEADER") }

        let me = Unmanaged.passUnretained(self).toOpaque()
        set(sf_easy_setopt_data_callback(easy, CURLOPT_HEADERFUNCTION, { buffer, size, count, user in
            guard let buffer, let user else { return 0 }
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(user).takeUnretainedValue()
            return transfer.onHeader(UnsafeRawBufferPointer(start: buffer, count: size * count))
        }), "CURLOPT_HEADERFUNCTION")
        set(sf_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, me), "CURLOPT_HEADERDATA")
        set(sf_easy_setopt_data_callback(easy, CURLOPT_WRITEFUNCTION, { buffer, size, count, user in
            guard let user else { return 0 }
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(user).takeUnretainedValue()
            return transfer.onBody(UnsafeRawBufferPointer(start: buffer, count: size * count))
        }), "CURLOPT_WRITEFUNCTION")
        set(sf_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, me), "CURLOPT_WRITEDATA")
        return refused
    }

    private func onHeader(_ line: UnsafeRawBufferPointer) -> Int {
        headerBytes += line.count
        if headerBytes > Self.maximumHeaderBytes {
            result.sinkError = DownloadError(.protocolViolation,
                "\(redactedURL(request.url)): response headers exceed \(Self.maximumHeaderBytes) bytes")
            return 0
        }
        if request.fileTransfer != nil {
            onFileTransferLine(line)
            return line.count
        }
        if line.starts(with: "HTTP/".utf8) { headerBytes = line.count }
        head.feed(line: line)
        return line.count
    }

    private func onBody(_ body: UnsafeRawBufferPointer) -> Int {
        if headDeadline != nil {
            headDeadline = nil
            headTimeout = nil
        }
        // Over FTP, libcurl writes the fields it makes up for a request without a body to the
        // body too: they are not the file.
        if request.method == .head && request.fileTransfer != nil { return body.count }
        if head.status == 0, let settings = request.fileTransfer, let easy {
            head = describeFileTransferAnswer(easy, settings: settings)
        }
        guard let sink else {
            result.bodyBytes += Int64(body.count)
            return body.count
        }
        switch sink.receive(body, head: head) {
        case .proceed:
            result.bodyBytes += Int64(body.count)
            return body.count
        case .stop:
            result.stoppedBySink = true
            return 0
        case .fail(let error):
            result.sinkError = error
            return 0
        case .pause:
            // libcurl keeps this piece and offers it again after `curl_easy_pause(CONT)`. A wait
            // for time alone is the transport thread's own: no timer thread, no wake-up call.
            if let delay = sink.resumeDelay() {
                resumeAt = .now + delay
            } else {
                sink.resumeWhenReady(resume ?? {})
            }
            return Int(CURL_WRITEFUNC_PAUSE)
        }
    }

    /// Reads what libcurl knows once the transfer is done.
    func collect(easy: UnsafeMutableRawPointer, code: CURLcode) {
        result.curlCode = Int32(code.rawValue)
        if code != CURLE_OK {
            let detail = String(cString: errorBuffer)
            result.curlMessage = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
        }
        var url: UnsafeMutablePointer<CChar>?
        if sf_easy_getinfo_string(easy, CURLINFO_EFFECTIVE_URL, &url) == CURLE_OK, let url {
            result.effectiveURL = String(cString: url)
        }
        var redirect: UnsafeMutablePointer<CChar>?
        if sf_easy_getinfo_string(easy, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK, let redirect {
            result.redirectURL = String(cString: redirect)
        }
        // libcurl names the target only once a redirect's body has been read to its end; a sink
        // that stopped at the body's first byte (a probe wants the head alone) leaves it unnamed,
        // so the `Location` field is resolved here, as libcurl would have.
        if result.redirectURL == nil, (300...399).contains(head.status), let location = head.first("location"), !location.isEmpty {
            result.redirectURL = CurlURL.resolving(location, against: request.url)
        }
        if let settings = request.fileTransfer {
            result.serverReply = replies.last
            if head.status == 0 && code == CURLE_OK { head = describeFileTransferAnswer(easy, settings: settings) }
        }
        if head.status != 0 { result.head = head }
        var connect = 0
        if sf_easy_getinfo_long(easy, CURLINFO_HTTP_CONNECTCODE, &connect) == CURLE_OK, connect != 0, connect != 200 {
            result.proxyConnectStatus = connect
        }
        var requestBytes = 0
        if sf_easy_getinfo_long(easy, CURLINFO_REQUEST_SIZE, &requestBytes) == CURLE_OK, requestBytes > 0 {
            result.requestSent = true
            // New connections made for this transfer: none means it reused one.
            var opened = 0
            if sf_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &opened) == CURLE_OK { result.reusedConnection = opened == 0 }
        }
    }

    /// Whether this ended transfer leaves its download nothing to fetch: a conditional request
    /// answered `304`, or a GET-first probe that brought the whole file. (A download that then
    /// asks again all the same, to retry, does so without a permit of its batch's gate.)
    var endsItsDownload: Bool {
        guard result.curlCode == 0, !result.stoppedBySink, !result.cancelled, let head = result.head else { return false }
        if request.conditional && head.status == 304 { return true }
        guard request.wholeBodyEndsDownload, request.method == .get else { return false }
        switch head.status {
        case 200:
            return true
        case 206:
            let values = head.all("content-range")
            guard values.count == 1, case .range(let got, let total?)? = HTTPFields.contentRange(values[0]) else { return false }
            return got.lowerBound == 0 && got.upperBound == total
        default:
            return false
        }
    }

    /// Detaches the easy handle from this transfer.
    func release(_ easy: UnsafeMutableRawPointer) {
        if let headerList {
            curl_slist_free_all(headerList)
            self.headerList = nil
        }
        self.easy = nil
    }

    /// Ends a transfer that never started because libcurl cannot be used or would not take it
    /// (`CURLE_FAILED_INIT`, which is not retried).
    func fail(setupFailure: String) {
        result.curlCode = Int32(CURLE_FAILED_INIT.rawValue)
        result.curlMessage = setupFailure
        finish(cancelled: false)
    }

    /// Resumes the waiting task, once.
    func finish(cancelled: Bool) {
        if cancelled { result.cancelled = true }
        takeCompletion()?.resume()
    }

    /// A waiting task and what to resume it with.
    struct Completion {
        let continuation: CheckedContinuation<TransferResult, Never>
        let result: TransferResult
        func resume() { continuation.resume(returning: result) }
    }

    /// Takes the waiting task (once; `nil` after) and its result, for the caller to resume once
    /// it holds no reference to this transfer.
    func takeCompletion() -> Completion? {
        if result.head == nil && head.status != 0 { result.head = head }
        guard let continuation else { return nil }
        self.continuation = nil
        return Completion(continuation: continuation, result: result)
    }
}
