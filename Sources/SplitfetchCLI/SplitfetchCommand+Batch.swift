import FoundationEssentials
import Splitfetch
import SystemPackage
import NIOConcurrencyHelpers
#if canImport(Glibc)
import Glibc
#endif

/// Several URLs (`-i`, or more than one given): the library's batch scheduler over one session,
/// a line printed as each file ends, and the batch's statistics.
extension SplitfetchCommand {
    /// Several URLs: up to `--jobs` at a time over one shared session, so connections are reused.
    func executeMany() async -> ExitStatus {
        var collected = urls
        var mirrorsOf = urls.map { _ in [String]() }
        // A partial download's own destination (--resume-partials); the others are named from
        // their URL in --directory.
        var destinationOf = urls.map { _ in String?.none }
        if let inputFile = input.inputFile {
            guard let text = readText(inputFile) else { return fail(.usage, "cannot read \(inputFile)") }
            for sources in Self.inputSources(text) {
                collected.append(sources[0])
                mirrorsOf.append(Array(sources.dropFirst()))
                destinationOf.append(nil)
            }
        }
        if let directory = input.resumePartials {
            do throws(DownloadError) {
                for partial in try await PartialDownload.list(in: FilePath(directory)) {
                    collected.append(partial.url)
                    mirrorsOf.append(partial.mirrors)
                    destinationOf.append(partial.destination.string)
                }
            } catch { return fail(ExitStatus(error.code), error.message) }
        }
        let list = collected
        guard !list.isEmpty else { return fail(.usage, "no URLs to download") }
        // libcurl (loading since the start) reads the URLs and options from here on: once, rather
        // than every URL failing its own way.
        if let failure = await Libcurl.ready() { return fail(.failure, failure) }
        var options = makeOptions()
        do throws(DownloadError) {
            try options.validate()
            options.cookies = try await security.cookies()
            options.fileTransfer.privateKeyPassphrase = try await fileTransfer.passphrase()
        } catch { return fail(.usage, error.message) }
        let checksums: ChecksumList?
        do { checksums = try await loadChecksumList(options: options) } catch {
            return fail(error.code == .usage ? .usage : ExitStatus(error.code), error.message)
        }
        if security.insecure { writeRaw("splitfetch: WARNING: --insecure: TLS certificates and host names are NOT verified\n") }
        let jobs = input.jobs
        let directory = output.directory
        // Made once, not once per URL.
        if let directory, let problem = Self.createDirectories(directory) { return fail(.fileIO, problem) }
        // A transport thread per file at once, so each connection turns round on its own; not
        // when a file may come over HTTP/2, whose streams share a connection per thread.
        let mayMultiplex = options.http2 != .never
            && (list + mirrorsOf.joined()).contains { $0.utf8.prefix(8).lazy.map { $0 | 0x20 }.elementsEqual("https://".utf8) }
        let session = Session(maximumConnectionsPerHost: transfer.maxConnectionsPerHost,
                              maximumConnections: max(8, jobs * options.connections),
                              threads: mayMultiplex ? nil : Session.transportThreads(downloadsAtOnce: jobs))
        let quiet = output.quiet
        let started = ContinuousClock.now
        let log: EventLog?
        do { log = try output.events.map(EventLog.init(path:)) } catch { return fail(.fileIO, "\(error)") }
        let work = Task {
            await runBatch(BatchList(urls: list, mirrors: mirrorsOf, destinations: destinationOf, directory: directory,
                                     options: options, checksums: checksums),
                           session: session, log: log)
        }
        let signals = SignalForwarder(onSignal: { work.cancel() })
        defer { signals.stop() }
        let (tally, queue) = await work.value
        // Not shut down nor freed: the process ends with `_exit` once the summary is out (see
        // `runCommandLine`), and every download has ended, so no transfer is left to stop. Ending
        // the transport threads and freeing a queue of 2,000 records took 3 ms after the last answer.
        ProcessLifetime.keep(session, queue, tally)
        await log?.close()
        let seconds = (ContinuousClock.now - started).seconds
        // Counted as the files ended: no pass over 2,000 results after the last answer.
        let doneCount = tally.done, unchanged = tally.unchanged, total = tally.bytes
        if !quiet {
            writeRaw("\(doneCount) of \(list.count) files, \(ByteCount.format(Double(total))) in \(ByteCount.fixed(seconds, 2)) s, "
                + "\(ByteCount.format(seconds > 0 ? Double(total) / seconds : 0))/s"
                + (output.refresh ? ", \(unchanged) unchanged on the server\n" : "\n"))
        }
        if let statsJson = output.statsJson {
            let results = tally.results.compactMap { $0 }
            let done = results.compactMap { try? $0.1.get() }
            let failures = results.compactMap { url, result -> FailedDownload? in
                guard case .failure(let error) = result else { return nil }
                let status = ExitStatus(error.code)
                return FailedDownload(url: redactedURL(url), path: nil, error: .init(error), exitStatus: status.rawValue)
            }
            let batch = BatchStatistics(files: done, fileCount: list.count, failed: list.count - done.count, unchanged: unchanged, failures: failures,
                                        size: total, seconds: seconds, averageBytesPerSecond: seconds > 0 ? Double(total) / seconds : 0)
            do { try writeJSON(batch, to: statsJson) } catch {
                return fail(.fileIO, "cannot write statistics to \(statsJson): \(error)")
            }
        }
        if let failure = tally.firstFailure { return failure.status }
        guard tally.ended == list.count else { return .interrupted }
        return doneCount > 0 && unchanged == doneCount ? .unchanged : .success
    }

    /// What a batch's files came to, kept as each ends (under a lock: the event reader and the
    /// loop adding the files both record), so the summary needs no pass over the results.
    struct BatchTally: Sendable {
        /// Each file's URL and result, by its index in the list; `nil` for one that never ended
        /// (the batch was interrupted).
        var results: [(String, Result<DownloadStatistics, DownloadError>)?]
        /// Files that ended, either way.
        private(set) var ended = 0
        /// Files downloaded or found unchanged.
        private(set) var done = 0
        /// Files found unchanged on the server (`-N`).
        private(set) var unchanged = 0
        /// Bytes fetched: a file found unchanged brought none.
        private(set) var bytes = Int64(0)
        /// The failure earliest in the list, whose exit status is the batch's.
        private(set) var firstFailure: (index: Int, status: ExitStatus)?

        init(count: Int) { results = Array(repeating: nil, count: count) }

        mutating func record(_ result: Result<DownloadStatistics, DownloadError>, of url: String, at index: Int) {
            if results[index] == nil { ended += 1 }
            results[index] = (url, result)
            switch result {
            case .success(let statistics):
                done += 1
                if statistics.unchanged { unchanged += 1 } else { bytes += statistics.size }
            case .failure(let error):
                if firstFailure.map({ index < $0.index }) ?? true {
                    firstFailure = (index, ExitStatus(error.code))
                }
            }
        }
    }

    /// `--list-partials DIR`: one JSON line per partial download under `DIR`, in the library's
    /// form (``PartialDownload``), URLs without credentials.
    func listPartials(in directory: String) async -> ExitStatus {
        let partials: [PartialDownload]
        do throws(DownloadError) { partials = try await PartialDownload.list(in: FilePath(directory)) } catch {
            return fail(ExitStatus(error.code), error.message)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for var partial in partials {
            partial.url = redactedURL(partial.url)
            partial.finalURL = redactedURL(partial.finalURL)
            partial.mirrors = partial.mirrors.map(redactedURL)
            guard let data = try? encoder.encode(partial) else { continue }
            writeOut(String(decoding: data, as: UTF8.self) + "\n")
        }
        return .success
    }

    /// An input file's lines (`-i`), each as its sources, in aria2's convention: the URLs of one
    /// file on one line, separated by tabs; the first is probed, the others are its mirrors.
    /// Blank lines and lines beginning with `#` are skipped.
    static func inputSources(_ text: String) -> [[String]] {
        func sources(of line: String) -> [String]? {
            guard !line.isEmpty, !line.hasPrefix("#") else { return nil }
            return line.split(separator: "\t").map { String($0).trimmingCharacters() }.filter { !$0.isEmpty }
        }
        // A list of thousands of URLs is read before the first request: in ASCII (as URLs almost
        // always are), split and trimmed on bytes, not characters, to the same lines.
        guard text.utf8.allSatisfy({ $0 < 0x80 }) else {
            return text.split(whereSeparator: \.isNewline).compactMap { sources(of: String($0).trimmingCharacters()) }
        }
        let isSpace = { (byte: UInt8) in byte == 0x20 || (0x09...0x0D).contains(byte) }
        func trimmed(_ bytes: Substring.UTF8View) -> Substring.UTF8View? {
            guard let first = bytes.firstIndex(where: { !isSpace($0) }), let last = bytes.lastIndex(where: { !isSpace($0) }) else {
                return nil
            }
            return bytes[first...last]
        }
        return text.utf8.split(whereSeparator: { (0x0A...0x0D).contains($0) }).compactMap { line in
            guard let line = trimmed(line), line.first != UInt8(ascii: "#") else { return nil }
            return line.split(separator: 0x09).compactMap { field in trimmed(field).map { String(Substring($0)) } }
        }
    }

    /// The URLs of a batch, and what each file's destination and options are made from.
    struct BatchList: Sendable {
        var urls: [String]
        var mirrors: [[String]]
        /// A partial download's own destination (--resume-partials); `nil` to name the file from its URL.
        var destinations: [String?]
        var directory: String?
        var options: DownloadOptions
        var checksums: ChecksumList?
    }

    /// Runs the files of a batch through a ``DownloadQueue`` over the session, printing a line as
    /// each ends; the results in the order of the list. Each file's identifier in the queue is its
    /// index in the list, which `--events` lines carry as `download`. Each file is named and given
    /// its options as it is added, so the first files are on their way while the rest of a long
    /// list is made ready.
    /// Runs the list; returns each URL's result, in the list's order, with the counts, and the
    /// queue that ran them (for the caller to keep: see ``ProcessLifetime``).
    private func runBatch(_ batch: BatchList, session: Session, log: EventLog?) async -> (BatchTally, DownloadQueue) {
        let list = batch.urls
        let quiet = output.quiet
        let tally = NIOLockedValueBox(BatchTally(count: list.count))
        let queue = DownloadQueue(session: session, maximumActive: input.jobs, readyAhead: true)
        // Lifecycle events are never dropped; progress only matters to --events. Without it,
        // only each file's end: the reader is woken once per file.
        let events = queue.subscribe(keepingProgress: log == nil ? 1 : 1024, endsOnly: log == nil)
        let reader = Task {
            for await item in events {
                guard let event = item.event, let index = Int(item.id) else { continue }
                log?.record(event, download: index)
                let result: Result<DownloadStatistics, DownloadError>
                switch event.kind {
                case .finished: result = .success(event.statistics!)
                case .failed: result = .failure(event.error!)
                default: continue
                }
                tally.withLockedValue { $0.record(result, of: list[index], at: index) }
                switch result {
                case .success(let s) where !quiet && s.unchanged:
                    writeRaw("\(s.path): unchanged on the server, kept\n")
                case .success(let s) where !quiet:
                    writeRaw("\(s.path): \(ByteCount.format(Double(s.size))) in \(ByteCount.fixed(s.seconds, 2)) s\n")
                    writeDigests(s)
                case .failure(let e):
                    writeRaw("splitfetch: \(e.message)\(ExitStatus.hint(for: e.remedy))\n")
                default:
                    break
                }
            }
        }
        // The first URL saved under a name has it: a later one is refused before it begins (as
        // it would be at its end, the name taken), instead of being downloaded for nothing.
        var firstWithName: [String: Int] = [:]
        for (index, url) in list.enumerated() {
            do throws(DownloadError) {
                let name = defaultFileName(forURL: url)
                let path = batch.destinations[index]
                    ?? batch.directory.map { $0.hasSuffix("/") ? $0 + name : $0 + "/" + name } ?? name
                if let first = firstWithName[path] {
                    throw DownloadError(.outputExists,
                        "\(path) is also where \(redactedURL(list[first])), earlier in the list, is saved; \(redactedURL(url)) is not downloaded")
                }
                firstWithName[path] = index
                // Its options, with its digests from the checksum list; a file whose entry is
                // unusable fails before it starts.
                var options = batch.options
                options.mirrors.urls = batch.mirrors[index]
                options.integrity.expectedDigests = try expected(from: batch.checksums, path: path, url: url)
                try queue.add(url, to: FilePath(path), options: options, id: String(index))
            } catch {
                log?.record(.failed(error), download: index)
                tally.withLockedValue { $0.record(.failure(error), of: url, at: index) }
                writeRaw("splitfetch: \(error.message)\(ExitStatus.hint(for: error.remedy))\n")
            }
        }
        // A signal cancels this task: the queue stops every download (each keeps its data and
        // says it was interrupted), and those not begun are not begun.
        await queue.finish()
        await reader.value
        // Moved out, not copied: 2,000 results' copies cost milliseconds after the last answer.
        return (tally.withLockedValue { tally in
            defer { tally = BatchTally(count: 0) }
            return tally
        }, queue)
    }
}
