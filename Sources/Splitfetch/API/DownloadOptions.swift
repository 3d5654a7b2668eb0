public import Logging
public import SystemPackage

/// Settings for one download. Every field has a default that suits a large file over HTTP(S).
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
    /// Extra request headers, as `Name: value` lines.
    public var headers: [String] = []
    /// The `User-Agent` header.
    public var userAgent: String = "splitfetch/\(splitfetchVersion)"
    /// Retries per failed request before the download fails. Default 5.
    public var retries: Int = 5
    /// Longest wait for a TCP/TLS connection. Default 15 s.
    public var connectTimeout: Duration = .seconds(15)
    /// A connection that receives nothing for this long is dropped and its range re-queued. Default 20 s.
    public var stallTimeout: Duration = .seconds(20)
    /// Longest wait for the probe's answer (a `HEAD` falls back to a ranged `GET`; the GET-first
    /// probe is retried). Default 15 s.
    public var probeTimeout: Duration = .seconds(15)
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
    /// Base delay of the exponential retry backoff, in seconds. Default 0.25.
    public var retryBaseDelay: Duration = .milliseconds(250)
    /// Upper bound of the retry backoff (and of an honoured `Retry-After`), in seconds. Default 30.
    public var retryMaximumDelay: Duration = .seconds(30)
    /// Most redirects followed. Default 10.
    public var maximumRedirects: Int = 10
    /// Replace an existing file at the destination. Default `false`.
    public var allowOverwrite: Bool = false
    /// How often progress events are emitted, in seconds. Default 0.25.
    public var progressInterval: Duration = .milliseconds(250)
    /// Flush the data to disk (`fdatasync`) before renaming it to its final name, so a power cut
    /// never leaves a final-named file with missing data; the directory is then synced so the
    /// name lasts too. `false` makes neither sync. Default `true`.
    public var syncBeforeRename: Bool = true
    /// Seconds between durable checkpoints (`fdatasync` of the data, then the manifest saved with
    /// `fsync`). `0` disables periodic checkpoints; one is still saved whenever the download stops.
    /// Default 5.
    public var checkpointInterval: Duration = .seconds(5)
    /// Seconds between quick checkpoints (the manifest saved without syncing, trusted only within
    /// the same boot). `0` disables them. Default 0.1.
    public var quickCheckpointInterval: Duration = .milliseconds(100)
    /// Discard a partial file and manifest left by an earlier run and start over. Default `false`.
    public var restart: Bool = false

    // MARK: Mirrors

    /// Other URLs serving the same file (`--mirror`). Each proves it serves the same bytes
    /// before it gets a range, and gets ``connections`` connections of its own. Default none.
    public var mirrors: [String] = []
    /// Use the mirrors a server announces with RFC 6249 `Link: <URL>; rel=duplicate` (a mirror
    /// director such as MirrorBrain). Default `true`.
    public var useMirrorLinks: Bool = true
    /// Mirrors used at most, given and announced together. Default 16.
    public var maximumMirrors: Int = 16

    // MARK: Integrity

    /// Digests the finished file must have (`--checksum`, a checksum list). They are checked as
    /// the file downloads; a mismatch fails the download with ``DownloadError/Code/integrity``
    /// and nothing goes under the final name. They win over the server's digests. Default none.
    public var expectedDigests: [ExpectedDigest] = []
    /// Check the file against a digest the server states (`Repr-Digest`, `Content-Digest`,
    /// `Digest`, `x-amz-checksum-*`, `x-goog-hash`) when the caller gave none; the probe asks for
    /// one with `Want-Repr-Digest`. Default `true`.
    public var useServerDigests: Bool = true
    /// Digests to compute and report in ``DownloadStatistics/digests`` whether or not anything is
    /// checked (`--hash`). Default none.
    public var reportedDigests: [DigestAlgorithm] = []

    // MARK: Safety

    /// User name and password for HTTP authentication, sent only to the origin (scheme, host,
    /// port) of the URL given. Credentials in the URL itself (`user:pass@host`) are used the same way.
    public var credentials: Credentials?
    /// Skip TLS certificate and host name verification. Never the default.
    public var insecure: Bool = false
    /// The proxy for every request, `scheme://[user:password@]host:port` with a scheme of
    /// ``proxySchemes`` (`http` when none is given); `nil` leaves it to libcurl, which reads
    /// `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy` (lowercase `http_proxy` only, as
    /// curl). Its credentials are never shown: messages name the proxy without them.
    public var proxy: String?
    /// Hosts reached directly, never through a proxy: a comma-separated list of host names,
    /// domains (matching their subdomains too) and IP addresses, or `*` for all, as curl's
    /// `--noproxy` and the `no_proxy` variable take. `nil` leaves it to libcurl (`no_proxy`).
    public var noProxy: String?
    /// The proxy schemes libcurl connects through: an HTTP proxy over plain TCP or TLS, or SOCKS
    /// (`socks5h` resolves host names at the proxy).
    public static let proxySchemes: Set<String> = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]
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
        headers.contains { $0.lowercased().hasPrefix("x-amz-checksum-mode:") }
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
        guard retries >= 0 else { throw bad("retries must not be negative") }
        guard connectTimeout > .zero, stallTimeout > .zero, probeTimeout > .zero else { throw bad("timeouts must be positive") }
        guard retryBaseDelay >= .zero, retryMaximumDelay >= retryBaseDelay else { throw bad("retry delays are inconsistent") }
        guard (0...50).contains(maximumRedirects) else { throw bad("maximum redirects must be between 0 and 50") }
        guard progressInterval > .zero else { throw bad("progress interval must be positive") }
        guard checkpointInterval >= .zero, quickCheckpointInterval >= .zero else { throw bad("checkpoint intervals must not be negative") }
        for header in headers {
            guard let colon = header.firstIndex(of: ":"), colon != header.startIndex else {
                throw bad("header \"\(header)\" is not of the form 'Name: value'")
            }
            if header.contains("\r") || header.contains("\n") { throw bad("header contains a line break") }
        }
        if userAgent.contains("\r") || userAgent.contains("\n") { throw bad("user agent contains a line break") }
        if let maximumSize, maximumSize < 0 { throw bad("maximum size must not be negative") }
        if let proxy {
            // libcurl takes a proxy without a scheme as http://.
            let scheme = proxy.contains("://") ? CurlURL.scheme(of: proxy) : "http"
            guard let scheme, Self.proxySchemes.contains(scheme) else {
                throw bad("proxy \(redactedURL(proxy)): the scheme must be one of \(Self.proxySchemes.sorted().joined(separator: ", "))")
            }
        }
        if noProxy?.contains(where: { $0 == "\r" || $0 == "\n" }) == true { throw bad("the list of hosts reached without the proxy contains a line break") }
        if case .file(let path)? = netrc, !FileSystem.exists(path.string) { throw bad("netrc file \(path) does not exist") }
        if let maximumTime, maximumTime <= .zero { throw bad("the time limit must be positive") }
        for mirror in mirrors {
            guard let scheme = CurlURL(mirror)?.scheme, scheme == "http" || scheme == "https" else {
                throw bad("mirror \(redactedURL(mirror)): not an http or https URL")
            }
        }
        guard maximumMirrors >= 0 else { throw bad("the mirror limit must not be negative") }
        guard window >= 1 << 20 else { throw bad("the window must be at least 1 MiB, got \(window) bytes") }
        _ = try DigestPlan(given: expectedDigests, server: [], reported: reportedDigests)  // digests given that disagree
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
