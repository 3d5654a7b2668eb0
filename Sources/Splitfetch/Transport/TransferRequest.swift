import SegmentPlanning

/// One HTTP request for the transport to perform.
package struct TransferRequest: Sendable {
    package enum Method: Sendable { case get, head }

    var url: String
    var method: Method = .get
    /// The byte range to ask for; `nil` asks for the whole resource.
    var range: ByteRange?
    /// Extra header lines (`Name: value`).
    var headers: [String] = []
    var userAgent: String
    var connectTimeout: Double
    /// Whole-transfer limit, for probes.
    var totalTimeout: Double?
    /// Credentials for this request (already checked against the origin policy).
    package var credentials: Credentials?
    var insecure: Bool
    var caCertificatePath: String?
    var proxy: String?
    var noProxy: String?
    /// Look the credentials up in a netrc file (only for the origin of the URL given); `nil`
    /// path: `~/.netrc`.
    var useNetrc = false
    var netrcFile: String?

    init(url: String, method: Method = .get, range: ByteRange? = nil, options: DownloadOptions) {
        self.url = url
        self.method = method
        self.range = range
        self.headers = options.headers
        self.userAgent = options.userAgent
        self.connectTimeout = options.connectTimeout.seconds
        self.insecure = options.insecure
        self.caCertificatePath = options.caCertificatePath?.string
        self.proxy = options.proxy
        self.noProxy = options.noProxy
    }
}

/// What a sink tells the transport after a piece of body.
enum SinkVerdict: Equatable {
    /// Keep going.
    case proceed
    /// Stop now: the sink has all it wants (a split moved its end, or a probe needs no body).
    case stop
    /// Stop now: the response is unacceptable or a write failed.
    case fail(DownloadError)
    /// Nothing was taken: hold the connection (libcurl's pause) and offer this piece again once
    /// the sink calls the `resume` it was given in ``TransferSink/resumeWhenReady(_:)``. For a
    /// reader that is behind (a pipe).
    case pause
}

/// Receives a transfer's body. Called only on the transport thread, one call at a time.
protocol TransferSink: AnyObject, Sendable {
    /// Called once per piece of body, with the final response's head.
    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict
    /// After a ``SinkVerdict/pause``: calls `resume` once (from any thread, at once if it may)
    /// when the piece can be taken.
    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void)
}

extension TransferSink {
    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) { resume() }
}

/// How a transfer ended.
struct TransferResult: Sendable {
    /// The final response's head, if one arrived.
    var head: ResponseHead?
    /// The URL after redirects.
    var effectiveURL: String?
    /// Where a `3xx` response points, resolved to an absolute URL.
    var redirectURL: String?
    /// libcurl's result code (`CURLE_OK` is 0).
    var curlCode: Int32 = 0
    /// libcurl's error text, when `curlCode` is not 0.
    var curlMessage: String = ""
    /// Body bytes delivered to the sink (or discarded, without a sink).
    var bodyBytes: Int64 = 0
    /// The sink stopped the transfer deliberately.
    var stoppedBySink = false
    /// The sink rejected the response or failed to store it.
    var sinkError: DownloadError?
    /// The task was cancelled.
    var cancelled = false
    /// The proxy's answer to `CONNECT` (for an `https` URL through a proxy), when it was not 200.
    var proxyConnectStatus: Int?
    /// The request went out (libcurl counted its bytes): an error after that concerns the reply.
    var requestSent = false
    /// The request went out on a connection an earlier transfer had opened.
    var reusedConnection = false
}
