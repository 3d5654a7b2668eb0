import CommandLineParsing
import Dispatch
import FoundationEssentials
import Splitfetch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

@main
struct SplitfetchCommand {
    static let overview = "Download one file over several HTTP(S) connections at once."
    static let discussion = """
        Probes the file, splits it into byte ranges, fetches them in parallel into NAME.part, \
        and renames it to NAME when every byte is on disk. Idle connections take over half of \
        the slowest remaining range, so the end of a download is not left to one connection.
        """

    /// The defaults, shown in the help from the properties themselves so the two cannot drift.
    private static let defaults = SplitfetchCommand()

    static let syntax = CommandLineSyntax([
        OptionSpec("input-file", short: "i", value: "file", help: "Read URLs from FILE, one per line ('-' for standard input)."),
        OptionSpec("jobs", short: "j", value: "n", help: "Files downloaded at the same time when there are several URLs.", default: "\(defaults.jobs)"),
        OptionSpec("connections", short: "n", value: "n", help: "Parallel connections (1-\(DownloadOptions.maximumConnections)).", default: "\(defaults.connections)"),
        OptionSpec("output", short: "o", value: "name", help: "Output file name (default: the last path component of the URL)."),
        OptionSpec("directory", short: "d", value: "dir", help: "Directory for the output; a relative --output is taken inside it."),
        OptionSpec("min-segment-size", value: "size", help: "Smallest initial range per connection, e.g. 1M, 512K.",
                   default: defaults.minSegmentSize % (1 << 20) == 0 ? "\(defaults.minSegmentSize >> 20)M" : "\(defaults.minSegmentSize)"),
        OptionSpec("header", short: "H", value: "header", help: "Extra request header 'Name: value' (repeatable).", repeatable: true),
        OptionSpec("user-agent", value: "text", help: "User-Agent header.", default: defaults.userAgent),
        OptionSpec("retries", value: "n", help: "Retries per failed request.", default: "\(defaults.retries)"),
        OptionSpec("connect-timeout", value: "seconds", help: "Seconds to wait for a connection.", default: shown(defaults.connectTimeout)),
        OptionSpec("stall-timeout", value: "seconds", help: "Seconds without data before a connection is replaced.", default: shown(defaults.stallTimeout)),
        OptionSpec("probe-timeout", value: "seconds", help: "Seconds to wait for the HEAD probe before probing with a ranged GET.", default: shown(defaults.probeTimeout)),
        OptionSpec("quiet", short: "q", help: "Print nothing but errors."),
        OptionSpec("stats-json", value: "file", help: "Write final statistics as JSON to this file."),
        OptionSpec("force", short: "f", help: "Replace an existing output file."),
        OptionSpec("no-sync", help: "Skip the fdatasync before the final rename (faster, not power-cut safe)."),
        OptionSpec("restart", help: "Discard a partial file and manifest from an earlier run and start over."),
        OptionSpec("checkpoint-interval", value: "seconds",
                   help: "Seconds between durable checkpoints of the resume manifest; 0 saves only on stop.",
                   default: shown(defaults.checkpointInterval)),
        OptionSpec("user", short: "u", value: "user:password", help: "USER:PASSWORD for HTTP authentication; sent only to the URL's own origin."),
        OptionSpec("insecure", short: "k", help: "Do not verify TLS certificates or host names (unsafe)."),
        OptionSpec("cacert", value: "file", help: "PEM file of CA certificates to verify the server with."),
        OptionSpec("allow-https-downgrade", help: "Follow redirects from https to http."),
        OptionSpec("content-disposition", help: "Name the file from the server's Content-Disposition (reduced to a safe base name)."),
        OptionSpec("max-size", value: "size", help: "Refuse files larger than this, e.g. 4G."),
        OptionSpec("version", help: "Show the version."),
        OptionSpec("help", short: "h", help: "Show this help."),
    ])

    /// `15` for 15.0, `0.5` for 0.5.
    private static func shown(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }

    static var help: String {
        """
        OVERVIEW: \(overview)

        \(wrap(discussion, width: 80).joined(separator: "\n"))

        USAGE: splitfetch [<options>] <url>...
               splitfetch [<options>] --input-file <file> [<url>...]

        OPTIONS:
        \(syntax.optionsHelp())

        EXIT STATUS:
        \(ExitStatus.table)
        """
    }

    /// The http or https URL(s) to download.
    var urls: [String] = []
    var inputFile: String?
    var jobs = 1
    var connections = 8
    var output: String?
    var directory: String?
    var minSegmentSize: Int64 = 1 << 20
    var header: [String] = []
    var userAgent = "splitfetch/\(splitfetchVersion)"
    var retries = 5
    var connectTimeout: Double = 15
    var stallTimeout: Double = 20
    var probeTimeout: Double = 15
    var quiet = false
    var statsJson: String?
    var force = false
    var noSync = false
    var restart = false
    var checkpointInterval: Double = 5
    var user: String?
    var insecure = false
    var cacert: String?
    var allowHttpsDowngrade = false
    var contentDisposition = false
    var maxSize: Int64?

    /// What a command line asks for besides a download.
    enum Request {
        case download(SplitfetchCommand)
        case help
        case version
    }

    /// Reads a command line (without the program name); option values are checked, and the
    /// combination by ``validate()``.
    static func parse(_ arguments: [String]) throws(CommandLineError) -> Request {
        let given = try syntax.parse(arguments)
        if given.has("help") { return .help }
        if given.has("version") { return .version }
        var command = SplitfetchCommand()
        command.urls = given.operands
        command.inputFile = given.value("input-file")
        command.jobs = try given.number("jobs") ?? command.jobs
        command.connections = try given.number("connections") ?? command.connections
        command.output = given.value("output")
        command.directory = given.value("directory")
        command.minSegmentSize = try given.size("min-segment-size") ?? command.minSegmentSize
        command.header = given.values("header")
        command.userAgent = given.value("user-agent") ?? command.userAgent
        command.retries = try given.number("retries") ?? command.retries
        command.connectTimeout = try given.seconds("connect-timeout") ?? command.connectTimeout
        command.stallTimeout = try given.seconds("stall-timeout") ?? command.stallTimeout
        command.probeTimeout = try given.seconds("probe-timeout") ?? command.probeTimeout
        command.quiet = given.has("quiet")
        command.statsJson = given.value("stats-json")
        command.force = given.has("force")
        command.noSync = given.has("no-sync")
        command.restart = given.has("restart")
        command.checkpointInterval = try given.seconds("checkpoint-interval") ?? command.checkpointInterval
        command.user = given.value("user")
        command.insecure = given.has("insecure")
        command.cacert = given.value("cacert")
        command.allowHttpsDowngrade = given.has("allow-https-downgrade")
        command.contentDisposition = given.has("content-disposition")
        command.maxSize = try given.size("max-size")
        try command.validate()
        return .download(command)
    }

    /// The single URL of a one-file run.
    var url: String { urls.first ?? "" }

    func validate() throws(CommandLineError) {
        guard !urls.isEmpty || inputFile != nil else { throw CommandLineError("missing URL (give one or more, or --input-file)") }
        guard (1...64).contains(jobs) else { throw CommandLineError("--jobs must be between 1 and 64") }
        if output != nil && (urls.count > 1 || inputFile != nil) {
            throw CommandLineError("--output names one file; with several URLs use --directory")
        }
        guard (1...DownloadOptions.maximumConnections).contains(connections) else {
            throw CommandLineError("--connections must be between 1 and \(DownloadOptions.maximumConnections)")
        }
        guard minSegmentSize > 0 else { throw CommandLineError("--min-segment-size must be positive") }
        guard retries >= 0 else { throw CommandLineError("--retries must not be negative") }
        guard connectTimeout > 0, stallTimeout > 0, probeTimeout > 0 else { throw CommandLineError("timeouts must be positive") }
        guard checkpointInterval >= 0 else { throw CommandLineError("--checkpoint-interval must not be negative") }
        if let output, output.isEmpty { throw CommandLineError("--output must not be empty") }
        if let user, !user.contains(":") { throw CommandLineError("--user must be USER:PASSWORD") }
    }

    /// The destination path from `-o`, `-d` and the URL.
    func destination() throws -> String {
        let name = output ?? defaultFileName(forURL: url)
        guard let directory, !name.hasPrefix("/") else { return name }
        return directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    func makeOptions() -> DownloadOptions {
        var options = DownloadOptions()
        options.connections = connections
        options.minimumSegmentSize = minSegmentSize
        options.headers = header
        options.userAgent = userAgent
        options.retries = retries
        options.connectTimeout = connectTimeout
        options.stallTimeout = stallTimeout
        options.probeTimeout = probeTimeout
        options.allowOverwrite = force
        options.syncBeforeRename = !noSync
        options.restart = restart
        options.checkpointInterval = checkpointInterval
        if checkpointInterval == 0 { options.quickCheckpointInterval = 0 }
        if let user, let colon = user.firstIndex(of: ":") {
            options.credentials = Credentials(user: String(user[..<colon]), password: String(user[user.index(after: colon)...]))
        }
        options.insecure = insecure
        options.caCertificatePath = cacert
        options.allowHTTPSDowngrade = allowHttpsDowngrade
        options.useContentDisposition = contentDisposition && output == nil
        options.maximumSize = maxSize
        return options
    }

    static func main() async {
        // A file size limit (ulimit -f) must be an error message, not a SIGXFSZ crash.
        signal(SIGXFSZ, SIG_IGN)
        prepareTransportInBackground()
        let command: SplitfetchCommand
        do {
            switch try parse(Array(CommandLine.arguments.dropFirst())) {
            case .download(let parsed): command = parsed
            case .help:
                print(help)
                exitNow(0)
            case .version:
                print(splitfetchVersion)
                exitNow(0)
            }
        } catch {
            writeRaw("splitfetch: \(error.message)\nTry 'splitfetch --help' for more information.\n")
            exitNow(ExitStatus.usage.rawValue)
        }
        let status = await command.execute()
        exitNow(status.rawValue)
    }

    func execute() async -> ExitStatus {
        if urls.count > 1 || inputFile != nil { return await executeMany() }
        let path: String
        do { path = try destination() } catch { return fail(.usage, "\(error)") }
        let options = makeOptions()
        do { try options.validate() } catch { return fail(.usage, error.message) }

        if insecure {
            writeRaw("splitfetch: WARNING: --insecure: TLS certificates and host names are NOT verified; "
                + "anyone on the network path can read or change this download\n")
        }
        let download = Download(url, to: path, options: options)
        let work = Task { try await download.run() }
        let signals = SignalForwarder(onSignal: { work.cancel() })
        defer { signals.stop() }

        let quiet = self.quiet
        // Quiet, there is nothing to draw, so no task reads the events (the stream keeps only the
        // newest ones).
        let renderer = quiet ? nil : Task {
            var renderer = ProgressRenderer()
            for await event in download.events { renderer.handle(event) }
        }
        let result = await work.result
        await renderer?.value

        switch result {
        case .success(let statistics):
            if !quiet {
                writeRaw("\(statistics.path): \(ByteCount.format(Double(statistics.size))) in \(ByteCount.fixed(statistics.seconds, 2)) s, "
                    + "\(ByteCount.format(statistics.averageBytesPerSecond))/s, \(statistics.connectionCount) connection"
                    + "\(statistics.connectionCount == 1 ? "" : "s"), \(statistics.requests) requests, \(statistics.retries) retries\n")
            }
            if let statsJson {
                do { try writeStatistics(statistics, to: statsJson) } catch {
                    return fail(.fileIO, "cannot write statistics to \(statsJson): \(error)")
                }
            }
            return .success
        case .failure(let error as DownloadError):
            if error.code == .interrupted {
                writeRaw("\nsplitfetch: \(error.message)\n")
                return .interrupted
            }
            return fail(ExitStatus(error.code), error.message)
        case .failure(let error):
            return fail(.failure, "\(error)")
        }
    }

    /// Several URLs: up to `--jobs` at a time over one shared session, so connections are reused.
    func executeMany() async -> ExitStatus {
        var collected = urls
        if let inputFile {
            guard let text = readText(inputFile) else { return fail(.usage, "cannot read \(inputFile)") }
            collected += text.split(whereSeparator: \.isNewline).map { String($0).trimmingCharacters() }
                .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        }
        let list = collected
        guard !list.isEmpty else { return fail(.usage, "no URLs to download") }
        let options = makeOptions()
        do { try options.validate() } catch { return fail(.usage, error.message) }
        if insecure { writeRaw("splitfetch: WARNING: --insecure: TLS certificates and host names are NOT verified\n") }
        let session = Session(maximumConnections: max(8, jobs * options.connections))
        defer { session.shutdown() }
        let directory = self.directory
        let quiet = self.quiet
        let started = ContinuousClock.now
        let jobs = self.jobs
        let work = Task { () -> [(String, Result<DownloadStatistics, DownloadError>)] in
            await withTaskGroup(of: (Int, String, Result<DownloadStatistics, DownloadError>).self) { group in
                var results = [(String, Result<DownloadStatistics, DownloadError>)?](repeating: nil, count: list.count)
                var next = 0
                func add(_ group: inout TaskGroup<(Int, String, Result<DownloadStatistics, DownloadError>)>) {
                    let index = next
                    let url = list[index]
                    next += 1
                    let name = defaultFileName(forURL: url)
                    let path = directory.map { $0.hasSuffix("/") ? $0 + name : $0 + "/" + name } ?? name
                    group.addTask {
                        do throws(DownloadError) {
                            let stats = try await Download(url, to: path, options: options, session: session).run()
                            return (index, url, .success(stats))
                        } catch {
                            return (index, url, .failure(error))
                        }
                    }
                }
                while next < min(jobs, list.count) { add(&group) }
                while let (index, url, result) = await group.next() {
                    results[index] = (url, result)
                    switch result {
                    case .success(let s) where !quiet:
                        writeRaw("\(s.path): \(ByteCount.format(Double(s.size))) in \(ByteCount.fixed(s.seconds, 2)) s\n")
                    case .failure(let e):
                        writeRaw("splitfetch: \(e.message)\n")
                    default:
                        break
                    }
                    if next < list.count && !Task.isCancelled { add(&group) }
                }
                return results.compactMap { $0 }
            }
        }
        let signals = SignalForwarder(onSignal: { work.cancel() })
        defer { signals.stop() }
        let results = await work.value
        let seconds = (ContinuousClock.now - started).seconds
        let done = results.compactMap { try? $0.1.get() }
        let total = done.reduce(Int64(0)) { $0 + $1.size }
        if !quiet {
            writeRaw("\(done.count) of \(list.count) files, \(ByteCount.format(Double(total))) in \(ByteCount.fixed(seconds, 2)) s, "
                + "\(ByteCount.format(seconds > 0 ? Double(total) / seconds : 0))/s\n")
        }
        if let statsJson {
            let batch = BatchStatistics(files: done, fileCount: list.count, failed: list.count - done.count, size: total,
                                        seconds: seconds, averageBytesPerSecond: seconds > 0 ? Double(total) / seconds : 0)
            do { try writeJSON(batch, to: statsJson) } catch {
                return fail(.fileIO, "cannot write statistics to \(statsJson): \(error)")
            }
        }
        for (_, result) in results {
            if case .failure(let e) = result { return e.code == .interrupted ? .interrupted : ExitStatus(e.code) }
        }
        return results.count == list.count ? .success : .interrupted
    }

    private func fail(_ status: ExitStatus, _ message: String) -> ExitStatus {
        writeRaw("splitfetch: \(message)\n")
        return status
    }

    private func writeStatistics(_ statistics: DownloadStatistics, to path: String) throws {
        try writeJSON(statistics, to: path)
    }

    private func writeJSON(_ value: some Encodable, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(value)
        data.append(contentsOf: "\n".utf8)
        try data.write(to: URL(fileURLWithPath: path))
    }
}

/// Turns SIGINT and SIGTERM into a callback (cancelling the download) instead of an abrupt exit.
/// A second signal exits at once with the interrupted status.
final class SignalForwarder {
    private let sources: [any DispatchSourceSignal]

    init(onSignal: @escaping @Sendable () -> Void) {
        var made: [any DispatchSourceSignal] = []
        let count = Mutex(0)
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                let n = count.withLock { value -> Int in
                    value += 1
                    return value
                }
                if n > 1 {
                    writeRaw("\nsplitfetch: second signal; exiting now (the last checkpoint is kept)\n")
                    exitNow(ExitStatus.interrupted.rawValue)
                }
                onSignal()
            }
            source.resume()
            made.append(source)
        }
        sources = made
    }

    func stop() {
        for source in sources { source.cancel() }
    }
}

/// `--stats-json` of a run with several URLs.
struct BatchStatistics: Encodable {
    var files: [DownloadStatistics]
    var fileCount: Int
    var failed: Int
    var size: Int64
    var seconds: Double
    var averageBytesPerSecond: Double
}

/// The text of a file, or of standard input for `-`.
func readText(_ path: String) -> String? {
    let file = path == "-" ? fdopen(dup(STDIN_FILENO), "r") : fopen(path, "r")
    guard let file else { return nil }
    defer { fclose(file) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = fread(&buffer, 1, buffer.count, file)
        if n <= 0 { break }
        bytes += buffer[0..<n]
    }
    return String(decoding: bytes, as: UTF8.self)
}

extension Duration {
    var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}

/// Ends the process with `status` after flushing standard output and error. `atexit` handlers do
/// not run: libcurl's TLS set-up may still be running on its background thread (see
/// ``prepareTransportInBackground()``), and tearing the TLS library down under it could crash
/// a process that is only printing `--help`.
func exitNow(_ status: Int32) -> Never {
    fflush(nil)
    _exit(status)
}

extension ParsedCommandLine {
    /// The whole-number value of `long`, if given.
    func number(_ long: String) throws(CommandLineError) -> Int? {
        guard let text = value(long) else { return nil }
        guard let n = Int(text) else { throw CommandLineError("invalid value '\(text)' for --\(long): not a whole number") }
        return n
    }

    /// The number of seconds in `long`, if given.
    func seconds(_ long: String) throws(CommandLineError) -> Double? {
        guard let text = value(long) else { return nil }
        guard let n = Double(text), n.isFinite else { throw CommandLineError("invalid value '\(text)' for --\(long): not a number of seconds") }
        return n
    }

    /// The byte count in `long` (`512K`, `1M`, `4G`), if given.
    func size(_ long: String) throws(CommandLineError) -> Int64? {
        guard let text = value(long) else { return nil }
        guard let n = ByteCount.parse(text) else { throw CommandLineError("invalid size '\(text)' for --\(long) (e.g. 512K, 1M, 4G)") }
        return n
    }
}
