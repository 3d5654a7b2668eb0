extension DownloadOptions {
    /// How long to wait.
    public struct Timeouts: Sendable, Equatable {
        /// Longest wait for a TCP/TLS connection. Default 15 s.
        public var connect: Duration = .seconds(15)
        /// A connection that receives nothing for this long is dropped and its range re-queued.
        /// Default 20 s.
        public var stall: Duration = .seconds(20)
        /// Longest wait for the probe's answer (a `HEAD` falls back to a ranged `GET`; the
        /// GET-first probe is retried). Default 15 s.
        public var probe: Duration = .seconds(15)

        public init() {}
    }

    /// When a failed request is tried again: exponential backoff with jitter, or the wait a
    /// server asks for with `Retry-After` (429, 503), whichever applies.
    public struct Retry: Sendable, Equatable {
        /// Retries per failed request before the download fails; a retry that wrote bytes starts
        /// the count again. Default 5.
        public var maximumRetries: Int = 5
        /// The first backoff delay; it doubles with every further retry. Default 0.25 s.
        public var baseDelay: Duration = .milliseconds(250)
        /// The longest delay, backoff or `Retry-After`. Default 30 s.
        public var maximumDelay: Duration = .seconds(30)

        public init() {}
    }

    /// Which proxy, and which hosts are reached without one.
    public struct Proxy: Sendable, Equatable {
        /// The proxy schemes libcurl connects through: an HTTP proxy over plain TCP or TLS, or
        /// SOCKS (`socks5h` resolves host names at the proxy).
        public static let schemes: Set<String> = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]

        /// The proxy for every request, `scheme://[user:password@]host:port` with a scheme of
        /// ``schemes`` (`http` when none is given); `nil` leaves it to libcurl, which reads
        /// `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy` (lowercase `http_proxy` only,
        /// as curl). Its credentials are never shown: messages name the proxy without them.
        public var url: String?
        /// Hosts reached directly, never through a proxy: a comma-separated list of host names,
        /// domains (matching their subdomains too) and IP addresses, or `*` for all, as curl's
        /// `--noproxy` and the `no_proxy` variable take. `nil` leaves it to libcurl (`no_proxy`).
        public var noProxy: String?

        public init(url: String? = nil, noProxy: String? = nil) {
            self.url = url
            self.noProxy = noProxy
        }
    }

    /// What the file must hash to, and what is hashed.
    public struct Integrity: Sendable, Equatable {
        /// Digests the finished file must have (`--checksum`, a checksum list). They are checked
        /// as the file downloads; a mismatch fails the download with
        /// ``DownloadError/Code/integrity`` and nothing goes under the final name. They win over
        /// the server's digests. Default none.
        public var expectedDigests: [ExpectedDigest] = []
        /// Check the file against a digest the server states (`Repr-Digest`, `Content-Digest`,
        /// `Digest`, `x-amz-checksum-*`, `x-goog-hash`) when the caller gave none; the probe asks
        /// for one with `Want-Repr-Digest`. Default `true`.
        public var useServerDigests: Bool = true
        /// Digests to compute and report in ``DownloadStatistics/digests`` whether or not
        /// anything is checked (`--hash`). Default none.
        public var reportedDigests: [DigestAlgorithm] = []

        public init() {}
    }

    /// Other sources of the same file.
    public struct Mirrors: Sendable, Equatable {
        /// Other URLs serving the same file (`--mirror`). Each proves it serves the same bytes
        /// before it gets a range, and gets ``DownloadOptions/connections`` connections of its
        /// own. Default none.
        public var urls: [String] = []
        /// Use the mirrors a server announces with RFC 6249 `Link: <URL>; rel=duplicate` (a
        /// mirror director such as MirrorBrain). Default `true`.
        public var useLinks: Bool = true
        /// Mirrors used at most, given and announced together. Default 16.
        public var maximum: Int = 16

        public init(urls: [String] = []) {
            self.urls = urls
        }
    }

    /// What reaches the disk, and when.
    public struct Durability: Sendable, Equatable {
        /// Flush the data to disk (`fdatasync`) before renaming it to its final name, so a power
        /// cut never leaves a final-named file with missing data; the directory is then synced so
        /// the name lasts too. `false` makes neither sync. Default `true`.
        public var syncBeforeRename: Bool = true
        /// Between durable checkpoints (`fdatasync` of the data, then the manifest saved with
        /// `fsync`). Zero disables periodic ones; one is still saved whenever the download
        /// stops. Default 5 s.
        public var checkpointInterval: Duration = .seconds(5)
        /// Between quick checkpoints (the manifest saved without syncing, trusted only within
        /// the same boot). Zero disables them. Default 0.1 s.
        public var quickCheckpointInterval: Duration = .milliseconds(100)

        public init() {}
    }
}

/// A request header field: a name and a value.
public struct HTTPHeader: Sendable, Hashable, CustomStringConvertible {
    /// The field name, as sent (`Authorization`).
    public var name: String
    /// The field value, without the surrounding spaces.
    public var value: String

    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// A `Name: value` line, as curl's `-H` takes it; `nil` without a colon or a name.
    public init?(line: String) {
        guard let colon = line.firstIndex(of: ":"), colon != line.startIndex else { return nil }
        name = String(line[..<colon]).trimmingSpaces()
        value = String(line[line.index(after: colon)...]).trimmingSpaces()
    }

    /// `Name: value`.
    public var description: String { "\(name): \(value)" }

    /// Checks that the field can be sent as it is: a name of token characters (RFC 9110), a
    /// value without line breaks.
    ///
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/usage``.
    public func validate() throws(DownloadError) {
        let token = Set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        guard !name.isEmpty, name.allSatisfy({ token.contains($0) }) else {
            throw DownloadError(.usage, "header name \"\(name)\" is not a valid field name")
        }
        if value.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
            throw DownloadError(.usage, "header \(name) contains a line break")
        }
    }
}
