import ArgumentParser
import Dispatch
import FoundationEssentials
import Splitfetch
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

@main
struct SplitfetchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "splitfetch",
        abstract: "Download one file over several HTTP(S) connections at once.",
        discussion: """
            Probes the file, splits it into byte ranges, fetches them in parallel into NAME.part, \
            and renames it to NAME when every byte is on disk. Idle connections take over half of \
            the slowest remaining range, so the end of a download is not left to one connection.

            EXIT STATUS
            \(ExitStatus.table)
            """,
        version: splitfetchVersion)

    @Argument(help: "The http or https URL(s) to download.")
    var urls: [String] = []

    @Option(name: [.short, .customLong("input-file")], help: "Read URLs from FILE, one per line ('-' for standard input).")
    var inputFile: String?

    @Option(name: [.short, .long], help: "Files downloaded at the same time when there are several URLs.")
    var jobs: Int = 1

    @Option(name: [.customShort("n"), .long], help: "Parallel connections (1-\(DownloadOptions.maximumConnections)).")
    var connections: Int = 8

    @Option(name: [.short, .long], help: "Output file name (default: the last path component of the URL).")
    var output: String?

    @Option(name: [.short, .long], help: "Directory for the output; a relative --output is taken inside it.")
    var directory: String?

    @Option(help: "Smallest initial range per connection, e.g. 1M, 512K.", transform: { text in
        guard let n = ByteCount.parse(text), n > 0 else { throw ValidationError("invalid size '\(text)'") }
        return n
    })
    var minSegmentSize: Int64 = 1 << 20

    @Option(name: [.customShort("H"), .long], help: "Extra request header 'Name: value' (repeatable).")
    var header: [String] = []

    @Option(help: "User-Agent header.")
    var userAgent: String = "splitfetch/\(splitfetchVersion)"

    @Option(help: "Retries per failed request.")
    var retries: Int = 5

    @Option(help: "Seconds to wait for a connection.")
    var connectTimeout: Double = 15

    @Option(help: "Seconds without data before a connection is replaced.")
    var stallTimeout: Double = 20

    @Option(help: "Seconds to wait for the HEAD probe before probing with a ranged GET.")
    var probeTimeout: Double = 15

    @Flag(name: [.short, .long], help: "Print nothing but errors.")
    var quiet = false

    @Option(help: "Write final statistics as JSON to this file.")
    var statsJson: String?

    @Flag(name: [.short, .long], help: "Replace an existing output file.")
    var force = false

    @Flag(help: "Skip the fdatasync before the final rename (faster, not power-cut safe).")
    var noSync = false

    @Flag(help: "Discard a partial file and manifest from an earlier run and start over.")
    var restart = false

    @Option(help: "Seconds between durable checkpoints of the resume manifest; 0 saves only on stop.")
    var checkpointInterval: Double = 5

    @Option(name: [.short, .long], help: "USER:PASSWORD for HTTP authentication; sent only to the URL's own origin.")
    var user: String?

    @Flag(name: [.customShort("k"), .long], help: "Do not verify TLS certificates or host names (unsafe).")
    var insecure = false

    @Option(help: "PEM file of CA certificates to verify the server with.")
    var cacert: String?

    @Flag(help: "Follow redirects from https to http.")
    var allowHttpsDowngrade = false

    @Flag(help: "Name the file from the server's Content-Disposition (reduced to a safe base name).")
    var contentDisposition = false

    @Option(help: "Refuse files larger than this, e.g. 4G.", transform: { text in
        guard let n = ByteCount.parse(text) else { throw ValidationError("invalid size '\(text)'") }
        return n
    })
    var maxSize: Int64?

    /// The single URL of a one-file run.
    var url: String { urls.first ?? "" }

    func validate() throws {
        guard !urls.isEmpty || inputFile != nil else { throw ValidationError("missing URL (give one or more, or --input-file)") }
        guard (1...64).contains(jobs) else { throw ValidationError("--jobs must be between 1 and 64") }
        if output != nil && (urls.count > 1 || inputFile != nil) {
            throw ValidationError("--output names one file; with several URLs use --directory")
        }
        guard (1...DownloadOptions.maximumConnections).contains(connections) else {
            throw ValidationError("--connections must be between 1 and \(DownloadOptions.maximumConnections)")
        }
        guard retries >= 0 else { throw ValidationError("--retries must not be negative") }
        guard connectTimeout > 0, stallTimeout > 0, probeTimeout > 0 else { throw ValidationError("timeouts must be positive") }
        guard checkpointInterval >= 0 else { throw ValidationError("--checkpoint-interval must not be negative") }
        if let output, output.isEmpty { throw ValidationError("--output must not be empty") }
        if let user, !user.contains(":") { throw ValidationError("--user must be USER:PASSWORD") }
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
            var parsed = try parseAsRoot()
            guard let ours = parsed as? SplitfetchCommand else {
                // --help and -h parse as ArgumentParser's own help command; running it
                // throws the clean exit that prints the help below.
                try parsed.run()
                exitNow(0)
            }
            command = ours
        } catch {
            let status = exitCode(for: error)
            if status == .success {
                print(fullMessage(for: error))
                exitNow(0)
            }
            writeRaw("splitfetch: \(fullMessage(for: error))\n")
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
        let renderer = Task {
            var renderer = ProgressRenderer(quiet: quiet)
            for await event in download.events { renderer.handle(event) }
        }
        let result = await work.result
        await renderer.value

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
