import ArgumentParser
import Splitfetch
import SystemPackage

/// The library's defaults, the one place the command's defaults come from.
let defaults = DownloadOptions()

/// Which files, and how many at once.
struct InputOptions: ParsableArguments {
    @Argument(help: "The http or https URL(s) to download.")
    var urls: [String] = []

    @Option(name: [.customShort("i"), .long], parsing: .unconditional, help: ArgumentHelp("Read URLs from FILE, one per line ('-' for standard input).",
                                                                  valueName: "file"))
    var inputFile: String?

    @Option(name: [.customShort("j", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Files downloaded at the same time when there are several URLs.", valueName: "n"))
    var jobs = 1
}

/// Where the file goes and what is kept.
struct OutputOptions: ParsableArguments {
    @Flag(name: [.customShort("v"), .long], help: "Log each request, retry and decision to standard error (swift-log, debug level).")
    var verbose = false

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "Progress display: bar (live, with a line per connection on a wide terminal), lines (a plain line every 5 s) or none (default: bar on a terminal, else lines).",
        valueName: "style"))
    var progress: ProgressStyle?

    @Option(name: [.customShort("o", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Output file name (default: the last path component of the URL); '-' writes the file to standard output, in order.", valueName: "name"))
    var output: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("With -o -: the most bytes fetched ahead of what standard output has taken, held in a temporary file in $TMPDIR (default 64M).",
                                                        valueName: "size"))
    var window = ByteSize(defaults.window)

    /// `-o -`: the file goes to standard output.
    var toStandardOutput: Bool { output == "-" }

    @Option(name: [.customShort("d", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Directory for the output, created when missing; a relative --output is taken inside it.", valueName: "dir"))
    var directory: String?

    @Flag(name: [.customShort("f"), .long], help: "Replace an existing output file.")
    var force = false

    @Flag(name: .customLong("no-sync"), help: "No syncs: no fdatasync before the final rename, no directory fsync after it (faster, not power-cut safe).")
    var noSync = false

    @Flag(help: "Discard a partial file and manifest from an earlier run and start over.")
    var restart = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds between durable checkpoints of the resume manifest; 0 saves only on stop.",
                               valueName: "seconds"))
    var checkpointInterval = Seconds(defaults.checkpointInterval)

    @Flag(help: "Name the file from the server's Content-Disposition (reduced to a safe base name).")
    var contentDisposition = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Refuse files larger than this, e.g. 4G.", valueName: "size"))
    var maxSize: ByteSize?

    @Option(parsing: .unconditional, help: ArgumentHelp("Write final statistics as JSON to this file.", valueName: "file"))
    var statsJson: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Write every download's events as JSON lines to FILE ('-' for standard output), progress every 0.5 s; see the README for the schema.",
                                                        valueName: "file"))
    var events: String?

    @Flag(name: [.customShort("q"), .long], help: "Print nothing but errors.")
    var quiet = false
}

/// How the file is fetched.
struct TransferOptions: ParsableArguments {
    @Option(name: [.customShort("n", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Parallel connections (1-\(DownloadOptions.maximumConnections)).", valueName: "n"))
    var connections = defaults.connections

    @Option(name: .customLong("mirror"), parsing: .unconditionalSingleValue, help: ArgumentHelp(
        "Another URL serving the same file (repeatable). It proves it serves the same bytes before it gets a range, and gets -n connections of its own.",
        valueName: "url"))
    var mirrors: [String] = []

    @Flag(name: .customLong("no-mirror-links"), help: "Ignore the mirrors a server announces in Link: rel=duplicate headers (RFC 6249).")
    var noMirrorLinks = false

    @Option(name: .customLong("max-connections-per-host"), parsing: .unconditional, help: ArgumentHelp(
        "At most N connections to one host at once, over every download of the run (-j included).", valueName: "n"))
    var maxConnectionsPerHost: Int?

    @Option(parsing: .unconditional, help: ArgumentHelp("Smallest initial range per connection, e.g. 1M, 512K.", valueName: "size"))
    var minSegmentSize = ByteSize(defaults.minimumSegmentSize)

    @Option(name: [.customShort("H", allowingJoined: true), .customLong("header")],
            parsing: .unconditionalSingleValue, help: ArgumentHelp("Extra request header 'Name: value' (repeatable).", valueName: "header"))
    var headers: [String] = []

    @Option(parsing: .unconditional, help: ArgumentHelp("User-Agent header.", valueName: "text"))
    var userAgent = defaults.userAgent

    @Option(parsing: .unconditional, help: ArgumentHelp("Retries per failed request.", valueName: "n"))
    var retries = defaults.retries

    @Option(parsing: .unconditional, help: ArgumentHelp("Receive at most RATE bytes per second, e.g. 500K, 8M, over every connection (and every -j job) together.",
                                                        valueName: "rate"))
    var limitRate: ByteSize?

    @Option(parsing: .unconditional, help: ArgumentHelp("Stop the whole download after this many seconds, keeping its data for a rerun (exit 15).",
                                                        valueName: "seconds"))
    var maxTime: Seconds?

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to wait for a connection.", valueName: "seconds"))
    var connectTimeout = Seconds(defaults.connectTimeout)

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds without data before a connection is replaced.", valueName: "seconds"))
    var stallTimeout = Seconds(defaults.stallTimeout)

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to wait for the probe's answer.", valueName: "seconds"))
    var probeTimeout = Seconds(defaults.probeTimeout)

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "How a new download learns the size: 'get' (the first segment's GET asks; one round trip less per file) or 'head' (HEAD first, for servers where a GET is costly or metered).",
        valueName: "get|head"))
    var probe = ProbeChoice(rawValue: defaults.probe.rawValue)!
}

/// `--probe`: the library's ``ProbeMethod`` as a command-line value.
enum ProbeChoice: String, ExpressibleByArgument, CaseIterable {
    case get, head
    var method: ProbeMethod { ProbeMethod(rawValue: rawValue)! }
}

/// Credentials and TLS.
struct SecurityOptions: ParsableArguments {
    @Option(name: [.customShort("u", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("USER:PASSWORD for HTTP authentication; sent only to the URL's own origin.",
                               valueName: "user:password"))
    var user: String?

    @Flag(name: [.customShort("k"), .long], help: "Do not verify TLS certificates or host names (unsafe).")
    var insecure = false

    @Option(parsing: .unconditional, help: ArgumentHelp("PEM file of CA certificates to verify the server with.", valueName: "file"))
    var cacert: String?

    @Flag(name: .customLong("allow-https-downgrade"), help: "Follow redirects from https to http.")
    var allowHTTPSDowngrade = false

    @Option(name: [.customShort("x"), .long], parsing: .unconditional, help: ArgumentHelp(
        "Proxy for every request, [http|https|socks5h|socks5|socks4a|socks4]://[user:password@]host:port (default: the environment's http_proxy, https_proxy, all_proxy, no_proxy).",
        valueName: "url"))
    var proxy: String?

    @Option(name: .customLong("noproxy"), parsing: .unconditional, help: ArgumentHelp(
        "Hosts reached without the proxy: comma-separated names, domains or addresses, or * for all (overrides no_proxy).",
        valueName: "list"))
    var noProxy: String?

    @Flag(help: "Take the user name and password for the URL's host from ~/.netrc (sent only to that origin).")
    var netrc = false

    @Option(name: .customLong("netrc-file"), parsing: .unconditional,
            help: ArgumentHelp("Like --netrc, from this file.", valueName: "file"))
    var netrcFile: String?

    @Option(name: .customLong("load-cookies"), parsing: .unconditional, help: ArgumentHelp(
        "Send cookies from this Netscape cookie file (as curl, wget and browsers export), to the URL's own origin only.",
        valueName: "file"))
    var loadCookies: String?

    /// The netrc file to read, if any.
    var netrcSource: NetrcSource? {
        if let netrcFile { return .file(FilePath(netrcFile)) }
        return netrc ? .home : nil
    }

    /// The cookie file's cookies, read on the I/O threads.
    func cookies() async throws(DownloadError) -> CookieJar? {
        guard let loadCookies else { return nil }
        return try await CookieJar.load(FilePath(loadCookies))
    }
}

/// A time on the command line, in seconds: `15`, `0.5`.
struct Seconds: ExpressibleByArgument, Sendable {
    var duration: Duration

    init(_ duration: Duration) { self.duration = duration }

    init?(argument: String) {
        guard let value = Double(argument), value.isFinite, value >= 0, value < 1e9 else { return nil }
        duration = .seconds(value)
    }

    var defaultValueDescription: String {
        let seconds = duration.seconds
        return seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}

/// A byte count on the command line: `1048576`, `512K`, `1M`, `4G`.
struct ByteSize: ExpressibleByArgument, Sendable {
    var bytes: Int64

    init(_ bytes: Int64) { self.bytes = bytes }

    init?(argument: String) {
        guard let bytes = ByteCount.parse(argument) else { return nil }
        self.bytes = bytes
    }

    var defaultValueDescription: String {
        bytes > 0 && bytes % (1 << 20) == 0 ? "\(bytes >> 20)M" : bytes > 0 && bytes % (1 << 10) == 0 ? "\(bytes >> 10)K" : "\(bytes)"
    }
}

/// What the finished file is checked against, and which digests are reported.
struct IntegrityOptions: ParsableArguments {
    @Option(name: .customLong("checksum"), parsing: .unconditionalSingleValue, help: ArgumentHelp(
        "ALG=VALUE the file must match: sha-256, sha-512, sha-1 or md5, in hex or base64 (repeatable). Checked as the file downloads.",
        valueName: "alg=value"))
    var checksums: [String] = []

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "A checksum list (sha256sum or BSD format, or a NAME.sha256 sidecar), as a file or an http(s) URL; the entry named like the output, or else like the URL's file, is checked.",
        valueName: "file|url"))
    var checksumFile: String?

    @Option(name: .customLong("hash"), parsing: .unconditionalSingleValue, help: ArgumentHelp(
        "Compute this digest (sha-256, sha-512, sha-1, md5) and report it, in the summary and --stats-json (repeatable).",
        valueName: "alg"))
    var hashes: [String] = []

    @Flag(name: .customLong("no-server-digest"),
          help: "Ignore the digests the server states (Repr-Digest, Content-Digest, Digest, x-amz-checksum-*, x-goog-hash).")
    var noServerDigest = false

    /// The algorithms of `--hash`.
    func reportedAlgorithms() throws -> [DigestAlgorithm] {
        try hashes.map { name in
            guard let algorithm = DigestAlgorithm(name: name) else {
                throw ValidationError("--hash: unknown algorithm \"\(name)\" (use sha-256, sha-512, sha-1 or md5)")
            }
            return algorithm
        }
    }

    /// The digests of `--checksum`.
    func givenDigests() throws -> [ExpectedDigest] {
        try checksums.map { text in
            do throws(DownloadError) { return try ExpectedDigest(parsing: text) } catch { throw ValidationError("--checksum: \(error.message)") }
        }
    }
}
