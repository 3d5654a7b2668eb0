import ArgumentParser
import CShims
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Glibc
import Logging
import Splitfetch
import SplitfetchDaemon
import SystemPackage

/// `splitfetch serve` (the one-shot tool runs this binary for it): the download daemon.
@main
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "splitfetch-daemon",
        abstract: "The Splitfetch download daemon: a durable queue behind aria2's JSON-RPC.",
        subcommands: [Serve.self, Add.self, List.self, Pause.self, Resume.self, Remove.self, Watch.self],
        defaultSubcommand: Serve.self
    )

    /// The allocator is set first, before any thread but this one exists: a thread that had
    /// allocated before would keep an arena of its own (``Serve/tuneAllocator()``).
    static func main() async {
        Serve.tuneAllocator()
        // One event loop for the HTTP server (and a fleet's database client): an RPC call is
        // light, and a second loop only added a hand-over between threads per call. Set before
        // anything makes NIO's singleton group.
        NIOSingletons.groupLoopCountSuggestion = 1
        await main(nil)
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the daemon until SIGTERM, SIGINT or aria2.shutdown.",
        discussion: """
            The RPC secret comes from --secret-file, else from the environment variable \
            \(Secret.environmentVariable), else from STATE-DIR/secret, created (mode 0600) at first start. \
            It is never taken from the command line.
            """
    )

    @Option(help: "Address and port to listen on (loopback unless told otherwise).")
    var listen = "127.0.0.1:6800"
    @Option(help: "Where the job database, the secret and the lock live (default: $XDG_STATE_HOME/splitfetch or ~/.local/state/splitfetch).")
    var stateDir: String?
    @Option(help: "The download root: every download goes under it (default: the current directory).")
    var dir: String?
    @Option(help: "A file holding the RPC secret (mode 0600).")
    var secretFile: String?
    @Option(help: ArgumentHelp("Keep the queue in PostgreSQL instead of STATE-DIR/jobs.sqlite: postgres://USER@HOST:PORT/DATABASE (what it leaves out from PGHOST, PGPORT, PGUSER, PGDATABASE; no password in it).",
                               valueName: "URL"))
    var queue: String?
    @Option(help: ArgumentHelp("A file whose first line is the queue database's password (else PGPASSWORD).", valueName: "FILE"))
    var queuePasswordFile: String?
    @Option(help: ArgumentHelp("With --queue: this daemon's name among the daemons sharing the queue (default: HOSTNAME:STATE-DIR). A daemon restarted under the same name takes its jobs back at once.",
                               valueName: "NAME"))
    var workerName: String?
    @Option(help: ArgumentHelp("With --queue: seconds a claimed job stays with a daemon that stopped renewing it.", valueName: "SECONDS"))
    var leaseSeconds: Double = 30
    @Option(help: ArgumentHelp("With --queue: seconds between looks for jobs when no notification came (the fallback).",
                               valueName: "SECONDS", visibility: .hidden))
    var pollSeconds: Double = 5
    @Option(name: [.customShort("j"), .customLong("max-concurrent-downloads")], help: "Downloads at once.")
    var maxConcurrentDownloads = 5
    @Option(help: "Downloads from one server (host and port) at once, at most.")
    var maxDownloadsPerHost: Int?
    @Option(help: "Connections to one server (host and port) at once, at most, over every download; with --queue, over every daemon sharing the queue (each connection then closes after its request).")
    var maxConnectionsPerHost: Int?
    @Option(name: [.customShort("n"), .customLong("split")], help: "Connections per download, unless a download says otherwise.")
    var split = 8
    @Option(help: "Rate limit for the whole queue in bytes per second (K and M suffixes); 0 for none.")
    var maxOverallDownloadLimit = "0"
    @Option(help: ArgumentHelp("The speed limit by day and time, e.g. 'Mon-Fri 08:00-18:00=1M, 18:00-08:00=0' (0: no limit; pause: hold every download).",
                               valueName: "RULES"))
    var schedule: String?
    @Option(help: ArgumentHelp("Run this command when a download completes (its words split at spaces, no shell; details in SPLITFETCH_* environment variables).", valueName: "COMMAND"))
    var onComplete: String?
    @Option(help: ArgumentHelp("Run this command when a download fails (as --on-complete).", valueName: "COMMAND"))
    var onError: String?
    @Option(help: "Seconds a hook may run before it is terminated.")
    var hookTimeout: Int = 60
    @Option(help: "POST a JSON document here per download that completes or fails (retried until it is taken).")
    var webhook: String?
    @Option(help: "A file holding the key that signs webhooks (HMAC-SHA256, X-Splitfetch-Signature).")
    var webhookKeyFile: String?
    @Option(help: "An Origin allowed to call the API besides the daemon's own (repeatable), e.g. chrome-extension://ID.")
    var allowOrigin: [String] = []
    @Option(help: "A Host name the daemon may be reached by besides its address and localhost (repeatable).")
    var allowHost: [String] = []
    @Option(help: "Write every queue event as a JSON line to this file.")
    var events: String?
    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel = "info"

    func run() async throws {
        // libcurl loads on a thread of its own while the options are checked, not on the first
        // download's thread.
        Libcurl.preload()
        LoggingSystem.bootstrap { StreamLogHandler.standardError(label: $0) }
        var logger = Logger(label: "splitfetch.daemon")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("--listen must be HOST:PORT")
        }
        var host = String(listen[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let state = FilePath(stateDir ?? Self.defaultStateDirectory())
        try Self.makeDirectories(state)
        let lock = try Self.lock(state.appending("lock"))
        defer { close(lock) }
        let secret = try Secret.load(file: secretFile.map { FilePath($0) }, stateDirectory: state)
        let root = try DownloadRoot(FilePath(dir ?? FileSystemCWD.current))
        let limit = try Aria2Options.size("--max-overall-download-limit", maxOverallDownloadLimit, atLeast: 0)
        if leaseSeconds < 1 { throw ValidationError("--lease-seconds must be at least 1") }
        if pollSeconds < 0.1 { throw ValidationError("--poll-seconds must be at least 0.1") }
        if let failure = await Libcurl.ready() { throw ClientFailure(failure) }
        let store = try await openStore(state: state, logger: logger)
        var defaults = DownloadOptions()
        defaults.connections = split
        if let maxDownloadsPerHost, maxDownloadsPerHost < 1 { throw ValidationError("--max-downloads-per-host must be at least 1") }
        if let maxConnectionsPerHost, maxConnectionsPerHost < 1 { throw ValidationError("--max-connections-per-host must be at least 1") }
        let daemon = try await Daemon(store: store, root: root, maximumActive: maxConcurrentDownloads, maximumPerHost: maxDownloadsPerHost,
                                      maximumConnectionsPerHost: maxConnectionsPerHost,
                                      bytesPerSecond: limit == 0 ? nil : limit, schedule: schedule,
                                      hooks: Hooks(onComplete: onComplete, onError: onError, timeout: .seconds(max(1, hookTimeout))),
                                      webhook: try webhookConfiguration(),
                                      defaults: defaults, leaseSeconds: leaseSeconds, pollSeconds: pollSeconds,
                                      logger: logger)
        let eventWriter = try events.map { try EventFile(path: $0, daemon: daemon) }
        let rpc = Aria2RPC(daemon: daemon, secret: secret)
        var configuration = DaemonServer.Configuration(host: host, port: port)
        configuration.allowedOrigins = allowOrigin
        configuration.allowedHosts = allowHost
        let (log, address) = (logger, host)
        let addressFile = state.appending("address")
        let written = NIOLockedValueBox("")
        defer {
            // Only our own: a daemon that took over the directory after ours wrote its address.
            if (try? String(contentsOfFile: addressFile.string, encoding: .utf8)) == written.withLockedValue({ $0 }) {
                unlink(addressFile.string)
            }
        }
        try await DaemonServer.run(daemon: daemon, rpc: rpc, configuration: configuration, logger: logger) { bound in
            // Where the client commands find the daemon (the secret is beside it).
            let text = (address.contains(":") ? "[\(address)]" : address) + ":\(bound)\n"
            let fd = open(addressFile.string, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            if fd >= 0 {
                _ = text.utf8CString.withUnsafeBufferPointer { write(fd, $0.baseAddress, text.utf8.count) }
                close(fd)
                written.withLockedValue { $0 = text }
            }
            log.notice("listening", metadata: ["address": "\(address):\(bound)", "root": "\(root.path)", "state": "\(state)"])
        }
        await eventWriter?.finish()
        await store.close()
    }

    /// The queue's store: PostgreSQL with --queue, else the SQLite file in the state directory.
    func openStore(state: FilePath, logger: Logger) async throws -> any JobStore {
        guard let queue else {
            if queuePasswordFile != nil || workerName != nil {
                throw ValidationError("--queue-password-file and --worker-name are for a --queue postgres:// URL")
            }
            return try SQLiteJobStore(path: state.appending("jobs.sqlite").string)
        }
        var password: String?
        if let queuePasswordFile {
            do { password = try await DownloadOptions.FileTransfer.readSecret(from: FilePath(queuePasswordFile)) } catch {
                throw ValidationError("--queue-password-file: \(error.message)")
            }
        }
        let address: PostgresAddress
        do { address = try PostgresAddress.parse(queue, password: password) } catch { throw ValidationError(error.description) }
        let worker = workerName ?? "\(Self.hostName()):\(state)"
        logger.notice("queue in PostgreSQL", metadata: ["queue": "\(address)", "worker": "\(worker)"])
        return try await PostgresJobStore(address, worker: worker, logger: logger)
    }

    func webhookConfiguration() throws -> Webhook? {
        guard let webhook else { return nil }
        guard let url = URL(string: webhook), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw ValidationError("--webhook must be an http or https URL")
        }
        let key = try webhookKeyFile.map { path -> [UInt8] in
            guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else {
                throw ValidationError("cannot read the webhook key file \(path)")
            }
            return Array(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        }
        return Webhook(url: url, key: key)
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// glibc's allocator, set for a process that keeps many small records for a long time
    /// (measured with 20,000 paused jobs in `Benchmarks/JOURNAL.md`, "The daemon"):
    /// - one arena, not up to eight per core: a thread that once met another in the allocator
    ///   got an arena of its own, and the jobs' records, spread over two or more heaps with the
    ///   requests' short-lived values between them, held 7 MiB more after the adds (one run in two
    ///   4.5 MiB more again with two arenas). Each thread's cache of small blocks still spares
    ///   it the arena's lock most of the time;
    /// - a fixed threshold of 1 MiB for the large blocks given to `mmap`: glibc raises it each
    ///   time such a block is freed, so that a restart's buffers and the jobs' tables were then
    ///   carved out of the heap and left it fragmented (7 MiB more resident after a restart).
    ///   Not lower: at 128 KiB, glibc's starting value, a block of about 256 KiB was mapped and
    ///   unmapped again for every download (300 downloads of 1 MiB: 310 `munmap`s, 22,437 page
    ///   faults and 0.79 CPU s, against none, 3,445 and 0.57), and 1,000 downloads through the
    ///   daemon took 1.14 × the command line's time.
    /// `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` in the environment win.
    static func tuneAllocator() {
        sf_tune_allocator(1, 1 << 20)
    }

    static func defaultStateDirectory() -> String {
        if let xdg = getenv("XDG_STATE_HOME"), xdg.pointee != 0 { return String(cString: xdg) + "/splitfetch" }
        let home = getenv("HOME").map { String(cString: $0) } ?? "."
        return home + "/.local/state/splitfetch"
    }

    static func makeDirectories(_ path: FilePath) throws {
        var current = FilePath(path.isAbsolute ? "/" : ".")
        for component in path.components {
            current.append(component)
            if mkdir(current.string, 0o700) != 0 && errno != EEXIST {
                throw ValidationError("cannot create \(current): \(Errno(rawValue: errno))")
            }
        }
    }

    /// Holds the state directory's lock for the daemon's life: a second daemon refuses to start.
    static func lock(_ path: FilePath) throws -> Int32 {
        let fd = open(path.string, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ValidationError("cannot open \(path): \(Errno(rawValue: errno))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw ValidationError("another daemon uses the state directory \(path.removingLastComponent()) (its lock is held)")
        }
        return fd
    }
}

enum FileSystemCWD {
    static var current: String {
        guard let path = getcwd(nil, 0) else { return "." }
        defer { free(path) }
        return String(cString: path)
    }
}

/// `--events FILE`: the queue's events as JSON lines, the library's encoding. The writes run on
/// a serial Dispatch queue of their own, never on Swift's cooperative pool.
final class EventFile: Sendable {
    let task: Task<Void, Never>

    init(path: String, daemon: Daemon) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ValidationError("cannot open \(path): \(Errno(rawValue: errno))") }
        let events = daemon.queue.subscribe(keepingProgress: 16)
        let writer = DispatchQueue(label: "splitfetch.events")
        task = Task {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            for await event in events {
                guard var line = try? encoder.encode(event) else { continue }
                line.append(0x0A)
                let bytes = line
                writer.async { _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } }
            }
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                writer.async {
                    close(fd)
                    done.resume()
                }
            }
        }
    }

    func finish() async { await task.value }
}
