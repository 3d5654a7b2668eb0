import ArgumentParser
import TestHTTPServer

#if canImport(Glibc)
import Glibc
#endif

/// Runs the project's test server from the command line (for `scripts/demo` and `scripts/bench`).
@main
struct TestServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sf-testserver",
        abstract: "Serve deterministic content on loopback, optionally capped per connection.",
        discussion: "Paths are /size/N/NAME. Prints the port on standard output, then serves until killed.",
        subcommands: [Serve.self, Relay.self, Hash.self],
        defaultSubcommand: Serve.self)
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Serve until killed.")
    @Option(help: "Listen address (loopback only).") var host = "127.0.0.1"
    @Option(help: "Port; 0 picks a free one.") var port = 0
    @Option(help: "Per-connection rate cap in bytes per second; 0 is unlimited.") var rate: Int64 = 0
    @Option(help: "Every K-th connection is slowed by --slow-factor; 0 disables.") var slowEvery = 0
    @Option(help: "How much slower the slowed connections are.") var slowFactor: Int64 = 16
    @Option(help: "Write the port to this file once listening.") var portFile: String?
    @Option(help: "Append a timestamped line per request and per finished response body to this file.")
    var timingLog: String?
    @Option(help: "Emulated round trip in milliseconds: delays each new connection and each response's first byte.")
    var latency: Int64 = 0
    @Flag(help: "Act as a proxy that answers 407 to every proxied request or CONNECT without credentials.")
    var proxyAuth = false
    @Flag(help: "Count connections as a threaded server with paced writes does: a close during a response is noticed at the next paced write.")
    var closeNoticedAtWrite = false

    func validate() throws {
        guard host.hasPrefix("127.") || host == "::1" || host == "localhost" else {
            throw ValidationError("the test server listens on loopback only")
        }
        guard latency >= 0 else { throw ValidationError("--latency must be 0 or more milliseconds") }
    }

    func run() async throws {
        var configuration = TestServer.Configuration(
            rateLimit: rate, slowEvery: slowEvery, slowFactor: slowFactor, host: host, port: port,
            timingLogPath: timingLog, latencyMilliseconds: latency)
        configuration.proxyAuthentication = proxyAuth
        configuration.closeNoticedAtWrite = closeNoticedAtWrite
        let server = try await TestServer(configuration: configuration)
        announce(port: server.port, in: portFile)
        try await server.waitUntilClosed()
    }
}

struct Relay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forward TCP to another server on loopback, adding a round trip.",
        discussion: "Each direction's bytes are held half the round trip; a connection's first bytes wait one round trip more (the handshake). Prints the port, then relays until killed.")
    @Option(help: "Listen address (loopback only).") var host = "127.0.0.1"
    @Option(help: "Port; 0 picks a free one.") var port = 0
    @Option(help: "The server to forward to, HOST:PORT (loopback only).") var to: String
    @Option(help: "The round trip to add, in milliseconds.") var roundTrip: Int64 = 50
    @Option(help: "Write the port to this file once listening.") var portFile: String?

    func validate() throws {
        guard host.hasPrefix("127.") else { throw ValidationError("the relay listens on loopback only") }
        guard let colon = to.lastIndex(of: ":"), to.hasPrefix("127."), Int(to[to.index(after: colon)...]) != nil else {
            throw ValidationError("--to must be 127.x.x.x:PORT")
        }
        guard roundTrip >= 0 else { throw ValidationError("--round-trip must be 0 or more milliseconds") }
    }

    func run() async throws {
        let colon = to.lastIndex(of: ":")!
        let relay = try await DelayRelay(host: host, port: port, targetHost: String(to[..<colon]),
                                         targetPort: Int(to[to.index(after: colon)...])!, roundTrip: .milliseconds(roundTrip))
        announce(port: relay.port, in: portFile)
        try await relay.waitUntilClosed()
    }
}

/// Prints the port listened on, and writes it to `portFile` (whole, by a rename) for the scripts
/// that wait for it.
func announce(port: Int, in portFile: String?) {
    print(port)
    fflush(nil)
    guard let portFile else { return }
    let tmp = portFile + ".tmp"
    if let f = fopen(tmp, "w") {
        fputs("\(port)\n", f)
        fclose(f)
        rename(tmp, portFile)
    }
}

struct Hash: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the SHA-256 of /size/N content.")
    @Argument(help: "Size in bytes.") var size: Int64?
    @Option(help: "Content seed.") var seed: UInt64 = 0
    @Option(help: "A file of 'SIZE SEED' lines: print one SHA-256 per line, in order.") var list: String?

    func validate() throws {
        guard (size == nil) != (list == nil) else { throw ValidationError("give a size or --list, not both") }
    }

    func run() throws {
        if let size { return print(SyntheticContent(size: size, seed: seed).sha256Hex()) }
        guard let list, let file = fopen(list, "r") else { throw ValidationError("cannot read \(list ?? "")") }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, file) > 0, let line {
            let fields = String(cString: line).split(separator: " ").compactMap { UInt64($0.filter(\.isNumber)) }
            guard fields.count == 2 else { throw ValidationError("bad line in \(list): \(String(cString: line))") }
            print(SyntheticContent(size: Int64(fields[0]), seed: fields[1]).sha256Hex())
        }
    }
}
