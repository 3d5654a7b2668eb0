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
        subcommands: [Serve.self, Hash.self],
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

    func validate() throws {
        guard host.hasPrefix("127.") || host == "::1" || host == "localhost" else {
            throw ValidationError("the test server listens on loopback only")
        }
    }

    func run() async throws {
        let server = try await TestServer(configuration: .init(
            rateLimit: rate, slowEvery: slowEvery, slowFactor: slowFactor, host: host, port: port,
            timingLogPath: timingLog))
        print(server.port)
        fflush(nil)
        if let portFile {
            let tmp = portFile + ".tmp"
            if let f = fopen(tmp, "w") {
                fputs("\(server.port)\n", f)
                fclose(f)
                rename(tmp, portFile)
            }
        }
        try await server.waitUntilClosed()
    }
}

struct Hash: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the SHA-256 of /size/N content.")
    @Argument(help: "Size in bytes.") var size: Int64
    @Option(help: "Content seed.") var seed: UInt64 = 0
    func run() throws {
        print(SyntheticContent(size: size, seed: seed).sha256Hex())
    }
}


