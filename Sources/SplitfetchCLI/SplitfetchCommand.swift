public import ArgumentParser
import Dispatch
import FoundationEssentials
import Logging
import Splitfetch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The `splitfetch` command: the options, their checks, and one download or a batch.
public struct SplitfetchCommand: AsyncParsableCommand, Sendable {
    public static let configuration = CommandConfiguration(
        commandName: "splitfetch",
        abstract: "Download one file over several connections at once: HTTP(S), FTP(S) or SFTP.",
        usage: """
            splitfetch [<options>] <url>...
            splitfetch [<options>] --input-file <file> [<url>...]
            """,
        discussion: """
            Probes the file, splits it into byte ranges, fetches them in parallel into NAME.part, \
            and renames it to NAME when every byte is on disk. Idle connections take over half of \
            the slowest remaining range, so the end of a download is not left to one connection.

            EXIT STATUS:
            \(ExitStatus.table)
            """,
        version: splitfetchVersion)

    @OptionGroup(title: "Input") var input: InputOptions
    @OptionGroup(title: "Output") var output: OutputOptions
    @OptionGroup(title: "Transfer") var transfer: TransferOptions
    @OptionGroup(title: "Security") var security: SecurityOptions
    @OptionGroup(title: "FTP and SFTP") var fileTransfer: FileTransferOptions
    @OptionGroup(title: "Integrity") var integrity: IntegrityOptions

    public init() {}

    var urls: [String] { input.urls }
    /// The single URL of a one-file run.
    var url: String { urls.first ?? "" }

    /// Set while the arguments are parsed a second time, without these checks, to find an error
    /// swift-argument-parser would report after them (see ``runCommandLine()``).
    @TaskLocal static var skipsValidation = false

    public mutating func validate() throws {
        if Self.skipsValidation { return }
        guard !urls.isEmpty || input.inputFile != nil || input.resumePartials != nil || input.listPartials != nil else {
            throw ValidationError("missing URL (give one or more, --input-file, or --resume-partials)")
        }
        guard (1...64).contains(input.jobs) else { throw ValidationError("--jobs must be between 1 and 64") }
        if output.output != nil && (urls.count > 1 || input.inputFile != nil || input.resumePartials != nil) {
            throw ValidationError("--output names one file; with several URLs use --directory")
        }
        guard (1...DownloadOptions.maximumConnections).contains(transfer.connections) else {
            throw ValidationError("--connections must be between 1 and \(DownloadOptions.maximumConnections)")
        }
        if !transfer.mirrors.isEmpty && (urls.count > 1 || input.inputFile != nil) {
            throw ValidationError("--mirror is for one file; with several, put each file's mirrors on its --input-file line, separated by tabs")
        }
        for line in transfer.headers where HTTPHeader(line: line) == nil {
            throw ValidationError("header \"\(line)\" is not of the form 'Name: value'")
        }
        if let cap = transfer.maxConnectionsPerHost, cap < 1 { throw ValidationError("--max-connections-per-host must be at least 1") }
        guard transfer.minSegmentSize.bytes > 0 else { throw ValidationError("--min-segment-size must be positive") }
        guard transfer.retries >= 0 else { throw ValidationError("--retries must not be negative") }
        if let rate = transfer.limitRate, rate.bytes <= 0 { throw ValidationError("--limit-rate must be positive") }
        for value in [transfer.connectTimeout, transfer.stallTimeout, transfer.probeTimeout] + (transfer.maxTime.map { [$0] } ?? []) {
            guard value.duration > .zero else { throw ValidationError("timeouts must be positive") }
        }
        if let name = output.output, name.isEmpty { throw ValidationError("--output must not be empty") }
        if output.toStandardOutput {
            if output.events == "-" { throw ValidationError("--events - and -o - would both write to standard output") }
            if output.contentDisposition { throw ValidationError("--content-disposition names a file; -o - writes to standard output") }
            if output.refresh { throw ValidationError("--timestamping (-N) refreshes a file; -o - writes to standard output") }
            if isatty(STDOUT_FILENO) == 1 {
                throw ValidationError("-o - writes the file to standard output, which is a terminal; redirect it, or name a file")
            }
        }
        if let user = security.user, !user.contains(":") { throw ValidationError("--user must be USER:PASSWORD") }
        if !integrity.checksums.isEmpty && (urls.count > 1 || input.inputFile != nil) {
            throw ValidationError("--checksum is for one file; with several URLs use --checksum-file")
        }
        var options = makeOptions()
        options.integrity.expectedDigests = try integrity.givenDigests()
        options.integrity.reportedDigests = try integrity.reportedAlgorithms()
        do { try options.validate() } catch { throw ValidationError(error.message) }
    }

    /// The destination path from `-o`, `-d` and the URL.
    func destination() -> String {
        let name = output.output ?? defaultFileName(forURL: url)
        guard let directory = output.directory, !name.hasPrefix("/") else { return name }
        return directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }

    func makeOptions() -> DownloadOptions {
        var options = DownloadOptions()
        options.connections = transfer.connections
        options.minimumSegmentSize = transfer.minSegmentSize.bytes
        options.headers = transfer.headers.compactMap(HTTPHeader.init(line:))  // each checked by validate()
        options.mirrors.urls = transfer.mirrors
        options.mirrors.useLinks = !transfer.noMirrorLinks
        options.userAgent = transfer.userAgent
        options.retry.maximumRetries = transfer.retries
        options.timeouts.connect = transfer.connectTimeout.duration
        options.timeouts.stall = transfer.stallTimeout.duration
        options.timeouts.probe = transfer.probeTimeout.duration
        options.probe = transfer.probe.method
        options.http2 = transfer.http2.policy
        options.allowOverwrite = output.force
        options.durability.syncBeforeRename = !output.noSync
        options.restart = output.restart
        options.refresh = output.refresh
        options.remoteTime = output.remoteTime
        options.durability.checkpointInterval = output.checkpointInterval.duration
        if output.checkpointInterval.duration == .zero { options.durability.quickCheckpointInterval = .zero }
        if let user = security.user, let colon = user.firstIndex(of: ":") {
            options.credentials = Credentials(user: String(user[..<colon]), password: String(user[user.index(after: colon)...]))
        }
        options.insecure = security.insecure
        options.caCertificatePath = security.cacert.map { FilePath($0) }
        options.proxy.url = security.proxy
        options.proxy.noProxy = security.noProxy
        options.netrc = security.netrcSource
        options.allowHTTPSDowngrade = security.allowHTTPSDowngrade
        options.fileTransfer = fileTransfer.settings
        options.useContentDisposition = output.contentDisposition && output.output == nil
        options.maximumSize = output.maxSize?.bytes
        options.integrity.useServerDigests = !integrity.noServerDigest
        options.integrity.expectedDigests = (try? integrity.givenDigests()) ?? []  // checked in validate()
        options.integrity.reportedDigests = (try? integrity.reportedAlgorithms()) ?? []
        options.window = output.window.bytes
        options.maximumTime = transfer.maxTime?.duration
        if output.events != nil { options.progressInterval = EventLog.progressInterval }
        if output.verbose {
            var logger = Logger(label: "splitfetch") { label in StreamLogHandler.standardError(label: label) }
            logger.logLevel = .debug
            options.logger = logger
        }
        options.rateLimit = transfer.limitRate.flatMap { $0.bytes > 0 ? RateLimit(bytesPerSecond: $0.bytes) : nil }
        return options
    }

    /// Runs the command as ``runCommandLine()`` does.
    public static func main() async { await runCommandLine() }

    /// Parses the process's command line and runs it, then ends the process, with the exit
    /// statuses in the table: 0 for `--help` and `--version`, 2 for any usage error
    /// (swift-argument-parser's own is 64).
    public static func runCommandLine() async -> Never {
        // libcurl loads on a thread of its own while the arguments are parsed and the list read.
        Libcurl.preload()
        // A file size limit (ulimit -f) must be an error message, not a SIGXFSZ crash.
        signal(SIGXFSZ, SIG_IGN)
        if let failure = DaemonLauncher.execIfDaemonCommand(CommandLine.arguments) {
            writeRaw("splitfetch: \(failure)\n")
            end(ExitStatus.usage.rawValue)
        }
        let arguments = splittingClusters(Array(CommandLine.arguments.dropFirst()))
        var parsed: any ParsableCommand
        do {
            parsed = try parseAsRoot(arguments)
        } catch {
            end(with: firstUsageError(error, arguments))
        }
        guard let command = parsed as? SplitfetchCommand else {
            // --help and -h parse to swift-argument-parser's own help command, which prints.
            do { try parsed.run() } catch { end(with: error) }
            end(0)
        }
        end(await command.execute().rawValue)
    }

    /// The error to report for `arguments`, given the one their parse threw. swift-argument-parser
    /// runs ``validate()`` before it looks for arguments nobody took, so `splitfetch --bogus`
    /// said "missing URL"; parsed again without the checks, an unknown option or a stray value
    /// is reported instead, as curl and wget do. Only on the error path, so it costs a run nothing.
    static func firstUsageError(_ thrown: any Error, _ arguments: [String]) -> any Error {
        do {
            _ = try $skipsValidation.withValue(true) { try parseAsRoot(arguments) }
            return thrown
        } catch {
            return error
        }
    }

    /// What swift-argument-parser's `exit(withError:)` does, with the statuses in the table: the
    /// version, help or a completion script on standard output and 0, else the message and 2.
    private static func end(with error: any Error) -> Never {
        if exitCode(for: error) == .success {
            print(fullMessage(for: error))
            end(0)
        }
        writeRaw("splitfetch: \(message(for: error))\nTry 'splitfetch --help' for more information.\n")
        end(ExitStatus.usage.rawValue)
    }

    /// Ends the process once stdio is flushed, with `_exit`, not `exit`: every file is closed and
    /// synced by then, so nothing is left for exit handlers, and `exit` would run the destructors
    /// of the libraries libcurl links (OpenSSL's cleanup, GnuTLS, p11-kit) while the process's
    /// service threads (the I/O threads, Swift's pool finishing cancelled tasks) are still alive,
    /// or while libcurl's load (``Libcurl/preload()``) is under way on its own thread. glibc then
    /// sometimes found its heap damaged at exit and aborted (status 134, after the right message:
    /// twice in about 400 fault-table runs).
    private static func end(_ status: Int32) -> Never {
        fflush(nil)
        _exit(status)
    }

    /// Short flags, and short options that take a value, for ``splittingClusters(_:)``.
    static let shortFlags: Set<Character> = ["f", "q", "k", "h"]
    static let shortOptionsWithValue: Set<Character> = ["i", "j", "o", "d", "n", "H", "u"]

    /// getopt lets a cluster of short flags end in an option with its value attached (`-qfn4`
    /// for `-q -f -n 4`); swift-argument-parser takes clusters of flags, and `-n4`, but not the
    /// two together. This splits such a cluster into the flags and the option with its value;
    /// anything else, and everything after `--`, is left as it is.
    static func splittingClusters(_ arguments: [String]) -> [String] {
        var result: [String] = []
        for (index, argument) in arguments.enumerated() {
            if argument == "--" { return result + arguments[index...] }
            let characters = Array(argument.dropFirst())
            guard argument.hasPrefix("-"), !argument.hasPrefix("--"), characters.count > 2,
                  let valueAt = characters.firstIndex(where: { shortOptionsWithValue.contains($0) }), valueAt > 0,
                  characters[..<valueAt].allSatisfy({ shortFlags.contains($0) }) else {
                result.append(argument)
                continue
            }
            result += characters[..<valueAt].map { "-\($0)" }
            result.append("-" + String(characters[valueAt...]))
        }
        return result
    }

    public func run() async throws {
        let status = await execute()
        if status != .success { throw ExitCode(status.rawValue) }
    }

    func execute() async -> ExitStatus {
        if let directory = input.listPartials { return await listPartials(in: directory) }
        if urls.count > 1 || input.inputFile != nil || input.resumePartials != nil { return await executeMany() }
        if let failure = await Libcurl.ready() { return fail(.failure, failure) }
        let path = destination()
        var options = makeOptions()
        do throws(DownloadError) {
            options.cookies = try await security.cookies()
            options.fileTransfer.privateKeyPassphrase = try await fileTransfer.passphrase()
            options.integrity.expectedDigests += try expected(from: try await loadChecksumList(options: options), path: path, url: url)
            try options.validate()
        } catch {
            return fail(error.code == .usage ? .usage : ExitStatus(error.code), error.message)
        }

        if let directory = output.directory, !output.toStandardOutput, let problem = Self.createDirectories(directory) {
            return fail(.fileIO, problem)
        }
        if security.insecure {
            writeRaw("splitfetch: WARNING: --insecure: TLS certificates and host names are NOT verified; "
                + "anyone on the network path can read or change this download\n")
        }
        let log: EventLog?
        do { log = try output.events.map(EventLog.init(path:)) } catch { return fail(.fileIO, "\(error)") }
        // A per-host cap holds for one download too (its requests after a redirect included).
        let session = transfer.maxConnectionsPerHost.map { Session(maximumConnectionsPerHost: $0, maximumConnections: options.connections) }
        let download = output.toStandardOutput ? Download(url, writingTo: .standardOutput, options: options, session: session)
                                               : Download(url, to: FilePath(path), options: options, session: session)
        let work = Task { try await download.run() }
        let signals = SignalForwarder(onSignal: { work.cancel() })
        defer { signals.stop() }

        let quiet = output.quiet
        // Quiet and without --events, nothing reads the events (the stream keeps only the newest).
        let reader = quiet && log == nil ? nil : Task {
            var renderer = quiet ? nil : ProgressRenderer(style: output.progress)
            for await event in download.events {
                renderer?.handle(event)
                log?.record(event, download: 0)
            }
        }
        let result = await work.result
        await reader?.value
        await log?.close()
        await session?.shutdown()

        switch result {
        case .success(let statistics):
            if !quiet && statistics.unchanged {
                writeRaw("\(statistics.path): unchanged on the server, kept (\(ByteCount.format(Double(statistics.size))))\n")
            } else if !quiet {
                writeRaw("\(statistics.path): \(ByteCount.format(Double(statistics.size))) in \(ByteCount.fixed(statistics.seconds, 2)) s, "
                    + "\(ByteCount.format(statistics.averageBytesPerSecond))/s, \(statistics.connectionCount) connection"
                    + "\(statistics.connectionCount == 1 ? "" : "s"), \(statistics.requests) requests, \(statistics.retries) retries\n")
                writeDigests(statistics)
            }
            if let statsJson = output.statsJson {
                do { try writeStatistics(statistics, to: statsJson) } catch {
                    return fail(.fileIO, "cannot write statistics to \(statsJson): \(error)")
                }
            }
            return statistics.unchanged ? .unchanged : .success
        case .failure(let error as DownloadError):
            // The reader of a pipe sees its end before the message: `set -o pipefail` then
            // sees this status.
            if output.toStandardOutput { close(STDOUT_FILENO) }
            let status = ExitStatus(error.code)
            if let statsJson = output.statsJson {
                // Machine readers learn why, not only that, a run failed.
                let report = FailedDownload(url: redactedURL(url), path: path, error: .init(error), exitStatus: status.rawValue)
                do { try writeJSON(report, to: statsJson) } catch {
                    writeRaw("splitfetch: cannot write statistics to \(statsJson): \(error)\n")
                }
            }
            if error.code == .interrupted {
                let note = output.toStandardOutput ? " (a download to standard output cannot be resumed)" : ""
                writeRaw("\nsplitfetch: \(error.message)\(note)\n")
                return .interrupted
            }
            return fail(status, error.message + ExitStatus.hint(for: error.remedy))
        case .failure(let error):
            return fail(.failure, "\(error)")
        }
    }

    func fail(_ status: ExitStatus, _ message: String) -> ExitStatus {
        writeRaw("splitfetch: \(message)\n")
        return status
    }

    private func writeStatistics(_ statistics: DownloadStatistics, to path: String) throws {
        try writeJSON(statistics, to: path)
    }

    func writeJSON(_ value: some Encodable, to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        var data = try encoder.encode(value)
        data.append(contentsOf: "\n".utf8)
        try data.write(to: URL(fileURLWithPath: path))
    }
}

/// The text of a file, or of standard input for `-` (at most 64 MiB).
func readText(_ path: String) -> String? {
    guard let bytes = try? FileSystem.readAll(path == "-" ? "/dev/stdin" : path, limit: 64 << 20, followingLinks: true) else {
        return nil
    }
    return String(decoding: bytes, as: UTF8.self)
}
