import DownloadCore

/// One request for the transport to perform: over HTTP(S), or over FTP, FTPS or SFTP
/// (``fileTransfer``), whose answers the transfer describes as HTTP ones.
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
    /// rather than opening one (``HTTP2Policy``); otherwise HTTP/1.1. Only an `https` URL can
    /// (see ``mayMultiplex``).
    var http2 = false

    /// Whether the request may go over HTTP/2: asked for, over TLS (HTTP/2 is negotiated by
    /// TLS's ALPN; an `http` URL is HTTP/1.1 whatever is asked). Over `http`, waiting for a
    /// connection to multiplex on held every request to a host until the first response had
    /// come back (8 files at once to a new host at a 50 ms round trip: 7 of them 0.1 s late).
    var mayMultiplex: Bool {
        http2 && url.utf8.count > 8 && url.prefix(8).lowercased() == "https://"
    }
    /// Sent with a conditional refresh's conditions: a `304` ends its download's network part.
    var conditional = false
    /// A GET-first probe: an answer that brings the whole file (a `200`, or a `206` from byte 0
    /// to the end) ends its download's network part.
    var wholeBodyEndsDownload = false
    /// Close the connection when the transfer ends rather than keep it for reuse (a session
    /// with a ``SharedHostCap``).
    var closesConnection = false
    /// For an `ftp`, `ftps` or `sftp` URL: its scheme and settings; `nil` over HTTP.
    var fileTransfer: FileTransferSettings?
    /// The file's size as probed: the total a ranged SFTP answer is a range of (SFTP names none).
    var knownTotal: Int64?
    /// How long to wait for a file-transfer server's reply to a command (the `ABOR` after a
    /// range, say), in seconds.
    var responseTimeout: Double

    /// How an `ftp`, `ftps` or `sftp` request connects.
    struct FileTransferSettings: Sendable {
        /// `ftp`, `ftps` or `sftp`.
        var scheme: String
        var options: DownloadOptions.FileTransfer
        var isSFTP: Bool { scheme == "sftp" }
    }

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
        self.responseTimeout = options.timeouts.stall.seconds
        if let scheme = CurlURL.scheme(of: url), RemoteScheme.fileTransfer.contains(scheme) {
            fileTransfer = FileTransferSettings(scheme: scheme, options: options.fileTransfer)
        }
    }
}
