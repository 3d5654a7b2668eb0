import DownloadCore

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
    /// Over HTTP/2 where TLS negotiates it, waiting for a connection that can take another stream
    /// rather than opening one (``HTTP2Policy``); otherwise HTTP/1.1.
    var http2 = false

    init(url: String, method: Method = .get, range: ByteRange? = nil, options: DownloadOptions) {
        self.url = url
        self.method = method
        self.range = range
        self.headers = options.headers.map(\.description)
        self.userAgent = options.userAgent
        self.connectTimeout = options.timeouts.connect.seconds
        self.insecure = options.insecure
        self.caCertificatePath = options.caCertificatePath?.string
        self.proxy = options.proxy.url
        self.noProxy = options.proxy.noProxy
    }
}
