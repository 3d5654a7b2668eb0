import ArgumentParser
import Splitfetch
import SystemPackage

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
    var retries = defaults.retry.maximumRetries

    @Option(parsing: .unconditional, help: ArgumentHelp("Receive at most RATE bytes per second, e.g. 500K, 8M, over every connection (and every -j job) together.",
                                                        valueName: "rate"))
    var limitRate: ByteSize?

    @Option(parsing: .unconditional, help: ArgumentHelp("Stop the whole download after this many seconds, keeping its data for a rerun (exit 15).",
                                                        valueName: "seconds"))
    var maxTime: Seconds?

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to wait for a connection.", valueName: "seconds"))
    var connectTimeout = Seconds(defaults.timeouts.connect)

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds without data before a connection is replaced.", valueName: "seconds"))
    var stallTimeout = Seconds(defaults.timeouts.stall)

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds to wait for the probe's answer.", valueName: "seconds"))
    var probeTimeout = Seconds(defaults.timeouts.probe)

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "How a new download learns the size: 'get' (the first segment's GET asks; one round trip less per file) or 'head' (HEAD first, for servers where a GET is costly or metered).",
        valueName: "get|head"))
    var probe = ProbeChoice(rawValue: defaults.probe.rawValue)!

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "HTTP/2 over TLS: 'auto' (the first request of each file and single streams, many files multiplexed on one connection per host; the ranges of a large file keep a connection each, over HTTP/1.1 but for the first request's), 'always' (every request, ranges multiplexed too) or 'never' (HTTP/1.1).",
        valueName: "auto|always|never"))
    var http2 = HTTP2Choice(rawValue: defaults.http2.rawValue)!
}

/// `--http2`: the library's ``HTTP2Policy`` as a command-line value.
enum HTTP2Choice: String, ExpressibleByArgument, CaseIterable {
    case auto, always, never
    var policy: HTTP2Policy { HTTP2Policy(rawValue: rawValue)! }
}

/// `--probe`: the library's ``ProbeMethod`` as a command-line value.
enum ProbeChoice: String, ExpressibleByArgument, CaseIterable {
    case get, head
    var method: ProbeMethod { ProbeMethod(rawValue: rawValue)! }
}
