public import DownloadCore
public import Logging
public import SystemPackage

/// Settings for one download. Every field has a default that suits a large file over HTTP(S).
///
/// The settings of one concern are grouped, as async-http-client's `HTTPClient.Configuration`
/// groups its own: ``timeouts``, ``retry``, ``proxy``, ``integrity``, ``mirrors``,
/// ``durability`` and ``fileTransfer``.
///
/// ```swift
/// var options = DownloadOptions()
/// options.connections = 16
/// options.timeouts.stall = .seconds(30)
/// options.retry.maximumRetries = 10
/// options.headers.append(HTTPHeader("Authorization", "Bearer \(token)"))
/// ```
///
/// Thread safety: a `Sendable` value.
public struct DownloadOptions: Sendable {
    /// The most connections one download may use.
    public static let maximumConnections = 64

    /// Parallel connections (1 ... ``maximumConnections``). Default 8.
    public var connections: Int = 8
    /// The smallest range the initial plan gives one connection, in bytes. Default 1 MiB.
    public var minimumSegmentSize: Int64 = 1 << 20
    /// The smallest piece an idle connection takes over from a busy one, in bytes. Default 64 KiB.
    public var minimumSplitSize: Int64 = 64 << 10
    /// Extra request headers. `Authorization`, `Cookie` and `Proxy-Authorization` go only to the
    /// origin of the URL given.
    public var headers: [HTTPHeader] = []
    /// The `User-Agent` header.
    public var userAgent: String = "splitfetch/\(splitfetchVersion)"
    /// How long to wait.
    public var timeouts = Timeouts()
    /// When a failed request is tried again.
    public var retry = Retry()
    /// For a download read in order (``Download/init(_:writingTo:options:session:)``,
    /// ``Download/bytes(of:options:session:)``): the most bytes fetched ahead of the reader, held
    /// in a temporary file in ``temporaryDirectory`` (not in memory) until the reader takes them.
    /// Ranges are handed out only inside it. Default 64 MiB: a second of 16 connections at
    /// 4 MiB/s, so a connection's piece (at most a window's share, halved) takes half a second
    /// and the pieces' requests cost little. At least 1 MiB.
    public var window: Int64 = 64 << 20
    /// Where a download read in order keeps its window: an anonymous file, gone when the
    /// download ends. Default: `$TMPDIR`, or `/tmp`.
    public var temporaryDirectory: FilePath?
    /// How a new download learns the file's size. Default ``ProbeMethod/get``.
    public var probe: ProbeMethod = .get
    /// When HTTP/2 is used (over TLS, where the server offers it). Default
    /// ``HTTP2Policy/auto``: the requests that may be a whole file (the first one, and a
    /// download in one stream) go over HTTP/2, many files multiplexed on one connection per
    /// host; the ranges of a segmented download keep a TCP connection each, over HTTP/1.1.
    public var http2: HTTP2Policy = .auto
    /// FTP, FTPS and SFTP: TLS, active mode, SSH keys and host keys.
    public var fileTransfer = FileTransfer()
    /// Most redirects followed. Default 10.
    public var maximumRedirects: Int = 10
    /// Replace an existing file at the destination. Default `false`.
    public var allowOverwrite: Bool = false
    /// How often progress events are emitted, in seconds. Default 0.25.
    public var progressInterval: Duration = .milliseconds(250)
    /// What reaches the disk, and when.
    public var durability = Durability()
    /// Discard a partial file and manifest left by an earlier run and start over. Default `false`.
    public var restart: Bool = false
    /// Conditional refresh (wget's `-N`, aria2's `--conditional-get`): when the destination
    /// exists with the validators recorded when it was downloaded, the first request asks for the
    /// file only if it changed (`If-None-Match` with the `ETag`, `If-Modified-Since` with the
    /// server's `Last-Modified`). A `304`, or a full answer for the same file, leaves the file
    /// untouched and the download ends at once with ``DownloadStatistics/unchanged``; a new
    /// version downloads to the partial file and replaces the old one only when complete. A file
    /// without a record, or changed here since (its size or time differs), is downloaded again.
    /// Implies replacing the destination (a regular file only). Default `false`.
    public var refresh: Bool = false
    /// With ``refresh``: the record of the file there, kept by the caller (a database) from an
    /// earlier download's ``DownloadStatistics/validators``, used instead of the one kept with
    /// the file. Default `nil`: the one kept with the file.
    public var refreshRecord: ConditionalRefresh.Recorded?
    /// Set the finished file's modification time from the server's `Last-Modified` (curl's
    /// `--remote-time`). Default `false`: the time of the download.
    public var remoteTime: Bool = false

    /// Other sources of the same file.
    public var mirrors = Mirrors()
    /// What the file must hash to, and what is hashed.
    public var integrity = Integrity()

    // MARK: Safety

    /// User name and password for HTTP authentication, sent only to the origin (scheme, host,
    /// port) of the URL given. Credentials in the URL itself (`user:pass@host`) are used the same way.
    public var credentials: Credentials?
    /// Skip TLS certificate and host name verification. Never the default.
    public var insecure: Bool = false
    /// Which proxy, and which hosts are reached without one.
    public var proxy = Proxy()
    /// Where to look up a user name and password for the URL's host when none are given
    /// (`--netrc`, `--netrc-file`). They are sent only to the origin of the URL given, as
    /// ``credentials`` are. Default: no netrc.
    public var netrc: NetrcSource?
    /// Cookies to send (`--load-cookies`): each request to the origin of the URL given gets those
    /// its domain, path and scheme match; a redirect target elsewhere gets none. Default: none.
    public var cookies: CookieJar?
    /// A PEM file of CA certificates to verify servers with, instead of the system's.
    public var caCertificatePath: FilePath?
    /// Follow a redirect from `https` to `http`. Default `false`: such a redirect is an error.
    public var allowHTTPSDowngrade: Bool = false
    /// Name the file from the server's `Content-Disposition` (reduced to a safe base name in the
    /// destination's directory) instead of the destination's own name. Default `false`.
    public var useContentDisposition: Bool = false
    /// Refuse files larger than this many bytes, before allocating anything. `nil`: no limit.
    public var maximumSize: Int64?
    /// The longest the whole download may take, the probe included, as a URL session's resource
    /// timeout. When it passes, the download stops as a cancellation stops it (a segmented
    /// download keeps its data and manifest, so a rerun resumes) and throws
    /// ``DownloadError/Code/timedOut``. Default: no limit.
    public var maximumTime: Duration?
    /// Caps the bytes received per second, over every connection of this download and of every
    /// other download given the same ``RateLimit`` instance. Default: none.
    public var rateLimit: RateLimit?
    /// Whether a header asks Amazon S3 for the object's checksum (`x-amz-checksum-mode: ENABLED`).
    /// It is the caller's to send: S3 refuses a presigned request with an `x-amz-` header it
    /// did not sign.
    var asksForObjectChecksum: Bool {
        headers.contains { $0.name.lowercased() == "x-amz-checksum-mode" }
    }

    // MARK: Diagnostics

    /// Where the download's decisions go, at `debug` level: each request (method, URL without
    /// secrets, range, connection), each retry and its delay, splits, fewer connections, waits
    /// for a host's slot, and how the download ended. The library never prints; by default this
    /// logger discards everything. Give one of your logging backend's to see them.
    public var logger = Logger(label: "splitfetch", factory: { _ in SwiftLogNoOpLogHandler() })

    /// For tests (`@testable`): writes past this offset fail as if the disk were full.
    var injectedFullDiskOffset: Int64?

    public init() {}

    /// Checks the values, naming the first bad one.
    ///
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/usage``.
    public func validate() throws(DownloadError) {
        func bad(_ message: String) -> DownloadError { DownloadError(.usage, message) }
        guard (1...Self.maximumConnections).contains(connections) else {
            throw bad("connections must be between 1 and \(Self.maximumConnections), got \(connections)")
        }
        guard minimumSegmentSize >= 1 else { throw bad("minimum segment size must be at least 1 byte") }
        guard minimumSplitSize >= 1 else { throw bad("minimum split size must be at least 1 byte") }
        guard retry.maximumRetries >= 0 else { throw bad("retries must not be negative") }
        guard timeouts.connect > .zero, timeouts.stall > .zero, timeouts.probe > .zero else { throw bad("timeouts must be positive") }
        guard retry.baseDelay >= .zero, retry.maximumDelay >= retry.baseDelay else { throw bad("retry delays are inconsistent") }
        guard (0...50).contains(maximumRedirects) else { throw bad("maximum redirects must be between 0 and 50") }
        guard progressInterval > .zero else { throw bad("progress interval must be positive") }
        guard durability.checkpointInterval >= .zero, durability.quickCheckpointInterval >= .zero else {
            throw bad("checkpoint intervals must not be negative")
        }
        for header in headers { try header.validate() }
        if userAgent.contains("\r") || userAgent.contains("\n") { throw bad("user agent contains a line break") }
        if let maximumSize, maximumSize < 0 { throw bad("maximum size must not be negative") }
        if let url = proxy.url {
            // libcurl takes a proxy without a scheme as http://.
            let scheme = url.contains("://") ? CurlURL.scheme(of: url) : "http"
            guard let scheme, Proxy.schemes.contains(scheme) else {
                throw bad("proxy \(redactedURL(url)): the scheme must be one of \(Proxy.schemes.sorted().joined(separator: ", "))")
            }
        }
        if proxy.noProxy?.contains(where: { $0 == "\r" || $0 == "\n" }) == true {
            throw bad("the list of hosts reached without the proxy contains a line break")
        }
        if case .file(let path)? = netrc, !FileSystem.exists(path.string) { throw bad("netrc file \(path) does not exist") }
        if let maximumTime, maximumTime <= .zero { throw bad("the time limit must be positive") }
        for mirror in mirrors.urls where !RemoteScheme.isSupported(mirror) {
            throw bad("mirror \(redactedURL(mirror)): not \(RemoteScheme.names) URL")
        }
        if let key = fileTransfer.privateKey, !FileSystem.exists(key.string) { throw bad("SSH key file \(key) does not exist") }
        if let pinned = fileTransfer.pinnedHostKey, Digest.base64Bytes(pinned)?.count != 32 {
            throw bad("the pinned host key is not a SHA-256 fingerprint (SHA256: and 43 base64 characters, as ssh-keygen -l prints it)")
        }
        guard mirrors.maximum >= 0 else { throw bad("the mirror limit must not be negative") }
        guard window >= 1 << 20 else { throw bad("the window must be at least 1 MiB, got \(window) bytes") }
        _ = try DigestPlan(given: integrity.expectedDigests, server: [], reported: integrity.reportedDigests)  // digests given that disagree
    }
}

/// The version of this library and tool.
public let splitfetchVersion = "0.1.0"

/// A user name and password for HTTP authentication.
public struct Credentials: Sendable, Equatable {
    public var user: String
    public var password: String
    public init(user: String, password: String) {
        self.user = user
        self.password = password
    }
}

/// Which netrc file ``DownloadOptions/netrc`` reads.
public enum NetrcSource: Sendable, Equatable {
    /// `~/.netrc` (libcurl's default; a missing file means no credentials).
    case home
    /// This file; it must exist.
    case file(FilePath)
}

/// When requests go over HTTP/2 (negotiated with ALPN over TLS; plain `http` is HTTP/1.1).
///
/// HTTP/2 helps many small files: they share one connection, with no new handshake each. It
/// hurts the ranges of a large file: on one TCP connection they share its window and its losses,
/// so each range keeps a connection of its own.
public enum HTTP2Policy: String, Sendable, CaseIterable {
    /// HTTP/2 for the requests that may be a whole file (the first request of each download, and
    /// a download in one stream), multiplexed per host; HTTP/1.1 for the other ranges, except on
    /// the connection whose last answer came over HTTP/2 (the probe's): it goes on with one range
    /// at a time, instead of a new connection and handshake taking its place.
    case auto
    /// HTTP/2 for every request, the ranges of one file multiplexed on one connection too.
    case always
    /// HTTP/1.1 for every request.
    case never

    /// Whether a download's request may go over HTTP/2.
    /// - Parameters:
    ///   - ranged: the request asks for a range of a segmented download (not the whole file in
    ///     one stream).
    ///   - lastAnswerOverHTTP2: the download's connection that sends it had its last answer over
    ///     HTTP/2. Under ``auto`` only the probe's connection can have one, so the download's
    ///     ranges still never share a TCP connection.
    public func allows(ranged: Bool, lastAnswerOverHTTP2: Bool) -> Bool {
        switch self {
        case .always: true
        case .never: false
        case .auto: !ranged || lastAnswerOverHTTP2
        }
    }
}

/// How a new download learns the file's size, validators and range support.
public enum ProbeMethod: String, Sendable, CaseIterable {
    /// The first segment's `GET` asks: its `206` or `200` tells everything, and its body is the
    /// file's first bytes. One round trip saved per file; a file smaller than the minimum segment
    /// size takes exactly one request.
    case get
    /// A `HEAD` first, then the ranged `GET`s: for servers where a `GET` is costly or metered.
    /// A resumed download, and one named by `Content-Disposition`, always probe this way.
    case head
}
