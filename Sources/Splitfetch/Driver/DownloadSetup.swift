import Logging
import DownloadCore
import SystemPackage

/// Runs one download: the local checks, the probe, then a ``DownloadDriver`` around a
/// ``DownloadMachine``. Created and used by ``Download/run()``.
struct DownloadSetup: Sendable {
    let url: String
    var destination: String
    let options: DownloadOptions
    let connector: Connector
    /// What each request may carry; built once from the URL and options.
    let policy: RequestPolicy
    let emit: @Sendable (DownloadEvent) -> Void
    /// Called once every byte has arrived, before the file is synced and renamed.
    var transferred: @Sendable () -> Void = {}
    /// Takes the file in order instead of a file on disk (a pipe): no local files are looked
    /// at, nothing is resumed, and the machine keeps its ranges inside the window.
    var consumer: (any ByteConsumer)?

    var partial: PartialFile { PartialFile(url: redactedURL(url), destination: destination, options: options) }

    func run() async throws -> DownloadStatistics {
        let start = ContinuousClock.now
        if consumer != nil { return try await runInOrder(since: start) }
        guard options.useContentDisposition else { return try await runWithLocalChecks(probed: nil, since: start) }
        // The name depends on the server's answer: probe first, then look at local files.
        let resource = try await probe(since: start)
        var named = self
        named.destination = contentDispositionDestination(resource) ?? destination
        return try await named.runWithLocalChecks(probed: resource, since: start)
    }

    private func probe(since start: ContinuousClock.Instant) async throws -> RemoteResource {
        try await probe(getFirst: false, since: start).0
    }

    /// The header fields of a conditional refresh's plan.
    static func conditions(of plan: ConditionalRefresh.Plan?) -> [String] {
        guard case .conditional(let ifNoneMatch, let ifModifiedSince)? = plan else { return [] }
        return (ifNoneMatch.map { ["If-None-Match: \($0)"] } ?? []) + (ifModifiedSince.map { ["If-Modified-Since: \($0)"] } ?? [])
    }

    /// Probes as the core's ``ProbePhase`` decides: which request, when a failure is asked again
    /// (the same ``RetryPolicy`` as every later request, its jitter seeded), when to give up, and
    /// the time limit (``DownloadOptions/maximumTime``, counted from `start`). GET-first, the
    /// first segment's request asks (open-ended with one connection) and its body comes back open.
    private func probe(getFirst: Bool, since start: ContinuousClock.Instant,
                       conditions: [String] = []) async throws -> (RemoteResource, OpenProbe?) {
        // Over FTP and SFTP the probe asks for the size and time alone (SIZE and MDTM, a stat).
        let getFirst = getFirst && !RemoteScheme.isFileTransfer(policy.url)
        var phase = ProbePhase(request: getFirst ? .getFirst : .head, retry: retryPolicy, probeTimeout: options.timeouts.probe.seconds,
                               deadline: options.maximumTime?.seconds, seed: UInt64.random(in: .min ... .max))
        let first = ByteRange(0, options.connections == 1 ? Int64.max : options.minimumSegmentSize)
        func now() -> Double { (ContinuousClock.now - begun(start)).seconds }
        var step = phase.next(now: now())
        var lastError: DownloadError?
        while true {
            switch step {
            case .ask(let request, let timeout):
                do {
                    var probe = Probe(connector: connector, policy: policy, timeout: .seconds(timeout))
                    probe.conditions = conditions
                    let (resource, open) = request == .getFirst ? try await probe.runGetFirst(range: first) : (try await probe.run(), nil)
                    emit(.probed(resource.redacted))
                    return (resource, open)
                } catch {
                    if error.code == .interrupted { throw error }
                    lastError = error
                    step = phase.failed(error.failure, now: now())
                }
            case .wait(let delay, let retry):
                let error = lastError!
                options.logger.debug("retrying the probe", metadata: ["attempt": "\(retry)", "delay": "\(formatSeconds(delay))",
                                                                      "error": "\(error.message)"])
                emit(.retrying(connection: 0, error: error, delay: .seconds(delay)))
                do { try await Task.sleep(for: .seconds(delay)) } catch {
                    throw DownloadError(.interrupted, "interrupted while probing \(redactedURL(url))")
                }
                step = phase.next(now: now())
            case .giveUp(let retried):
                let error = lastError!
                throw retried.map { error.givenUp(after: $0) } ?? error
            case .timedOut:
                let limit = formatSeconds(options.maximumTime?.seconds ?? 0)
                let detail = lastError.map { "; \($0.message)" } ?? ""
                throw DownloadError(.timedOut, "\(redactedURL(url)): the time limit of \(limit) s passed while probing\(detail)")
            }
        }
    }

    /// When the download began: `start`, less any wait at its batch's gate for a permit
    /// (``NetworkTicket/waited``), which its time limit, duration and speed do not count.
    func begun(_ start: ContinuousClock.Instant) -> ContinuousClock.Instant {
        guard let ticket = connector.ticket else { return start }
        return start + ticket.waited
    }

    var retryPolicy: RetryPolicy {
        RetryPolicy(retries: options.retry.maximumRetries, baseDelay: options.retry.baseDelay.seconds, maximumDelay: options.retry.maximumDelay.seconds)
    }

    /// The destination with its name replaced by the server's `Content-Disposition` file name,
    /// reduced to a safe base name in the same directory; `nil` when there is none usable.
    func contentDispositionDestination(_ resource: RemoteResource) -> String? {
        guard let header = resource.contentDisposition, let raw = ContentDisposition.fileName(header),
              let name = safeFileName(raw) else { return nil }
        let directory = FileSystem.parentDirectory(of: destination)
        return directory == "/" ? "/" + name : directory + "/" + name
    }

    /// What a conditional refresh knows before its first request: the record kept with the file,
    /// and the conditions the core chose from it.
    struct Refresh: Sendable {
        let recorded: ConditionalRefresh.Recorded?
        let plan: ConditionalRefresh.Plan

        /// Reads the record (unless `given`, kept elsewhere) of the file found at `destination`
        /// (blocking: on the I/O queue).
        init(destination: String, found: Stat?, given: ConditionalRefresh.Recorded?) {
            let local = RecordedValidators.local(found)
            recorded = local == nil ? nil : given ?? RecordedValidators.read(destination)
            plan = ConditionalRefresh.plan(recorded: recorded, local: local)
        }
    }

    /// What is on disk before the download starts.
    private enum LocalState: Sendable {
        case fresh
        case resumable(PartialFile.Existing)
        case finishedEarlier(Manifest)
    }

    private func runWithLocalChecks(probed: RemoteResource?, since start: ContinuousClock.Instant) async throws -> DownloadStatistics {
        let partial = self.partial
        let io = IOQueue()
        let (local, refresh) = try await io.run { () throws(DownloadError) -> (LocalState, Refresh?) in
            if partial.options.restart { try partial.discard() }
            // (A refresh goes on to ask the server; the manifest left is removed all the same.)
            var disk = try partial.look()
            if let manifest = partial.finishedEarlier(&disk), !partial.options.refresh { return (.finishedEarlier(manifest), nil) }
            try partial.checkDestination(disk.destination)
            // A refresh looks at what was recorded with the file there now.
            let refresh = partial.options.refresh
                ? Refresh(destination: partial.destination, found: disk.destination, given: partial.options.refreshRecord) : nil
            return (try partial.openExisting(disk).map(LocalState.resumable) ?? .fresh, refresh)
        }
        var existing: PartialFile.Existing?
        switch local {
        case .finishedEarlier(let manifest):
            let resource = RemoteResource(url: manifest.url, finalURL: manifest.finalURL, size: manifest.size, acceptsRanges: true,
                                          etag: manifest.etag, lastModified: manifest.lastModified, contentType: nil,
                                          contentDisposition: nil, probeMethod: "manifest")
            return statistics(resource: resource, mode: .segmented, size: manifest.size, counters: [], splits: 0,
                              resumed: manifest.size, since: start)
        case .resumable(let found): existing = found
        case .fresh: break
        }
        var handedOver = false
        var open: OpenProbe?
        defer {
            if !handedOver {
                existing?.file.close()
                open?.discard()
            }
        }
        try Task.checkCancellation()

        let resource: RemoteResource
        if let probed {
            resource = probed
        } else {
            // A resumed download checks the server's file before any byte is fetched: HEAD first.
            // So does one asking S3 for its checksum, which S3 states on a HEAD but not on a 206.
            (resource, open) = try await probe(getFirst: options.probe == .get && existing == nil && !options.asksForObjectChecksum,
                                               since: start, conditions: Self.conditions(of: refresh?.plan))
        }
        if let refresh, case .conditional = refresh.plan, let recorded = refresh.recorded {
            let answer = ConditionalRefresh.Answer(etag: resource.etag, lastModified: resource.lastModified, size: resource.size)
            let verdict = ConditionalRefresh.judge(status: resource.notModified ? 304 : 200, answer: answer, recorded: recorded)
            options.logger.debug("conditional refresh", metadata: ["verdict": "\(verdict)", "url": "\(redactedURL(url))"])
            if verdict != .changed {
                // The file kept is current: nothing is written, and the probe's body (a server
                // that ignored the conditions) is let go. The network part is over: a queue
                // starts its next download now.
                transferred()
                return statistics(resource: resource, mode: .single, size: recorded.size, counters: [], splits: 0, resumed: 0,
                                  since: begun(start), unchanged: true, validators: recorded)
            }
        }
        let mirrors = self.mirrors(of: resource)
        var configuration = machineConfiguration()
        configuration.sources = 1 + mirrors.count
        var machine: DownloadMachine
        if let existing {
            try partial.checkResumable(existing, resource: resource)
            let manifest = existing.manifest
            let progress = manifest.usableProgress(currentBootID: currentBootID).map { (ByteRange($0.start, $0.end), $0.written) }
            let durable = Dictionary(manifest.segments.map { ($0.start, $0.written) }, uniquingKeysWith: { first, _ in first })
            machine = DownloadMachine(configuration: configuration, resuming: manifest.size, progress: progress,
                                      durable: durable)
        } else {
            machine = DownloadMachine(configuration: configuration)
        }
        handedOver = true
        return try await DownloadDriver(setup: self, partial: partial, io: io, machine: machine, resource: resource,
                                        existing: existing, open: open, since: begun(start), mirrors: mirrors).run()
    }

    /// A download read in order: probe, then the driver with a window and no checkpoints (a
    /// pipe cannot be resumed).
    private func runInOrder(since start: ContinuousClock.Instant) async throws -> DownloadStatistics {
        let (resource, open) = try await probe(getFirst: options.probe == .get && !options.asksForObjectChecksum, since: start)
        let mirrors = self.mirrors(of: resource)
        var configuration = machineConfiguration()
        configuration.sources = 1 + mirrors.count
        configuration.window = options.window
        configuration.quickCheckpointInterval = 0
        configuration.durableCheckpointInterval = 0
        return try await DownloadDriver(setup: self, partial: partial, io: IOQueue(), machine: DownloadMachine(configuration: configuration),
                                        resource: resource, existing: nil, open: open, since: begun(start), mirrors: mirrors).run()
    }

    /// The mirrors of this download: those given, then those the server announced, each once,
    /// never the URL probed itself, at most ``DownloadOptions/Mirrors-swift.struct/maximum``.
    func mirrors(of resource: RemoteResource) -> [String] {
        var seen: Set<String> = [url, resource.finalURL]
        return (options.mirrors.urls + resource.mirrors).filter { seen.insert($0).inserted }.prefix(options.mirrors.maximum).map { $0 }
    }

    /// The core's tunables, from the options; the jitter's seed differs between runs.
    func machineConfiguration() -> DownloadMachine.Configuration {
        var configuration = DownloadMachine.Configuration()
        configuration.connections = options.connections
        configuration.minimumSegmentSize = options.minimumSegmentSize
        configuration.split = SegmentTable.SplitPolicy(minimumPiece: options.minimumSplitSize)
        configuration.retry = retryPolicy
        configuration.stallTimeout = options.timeouts.stall.seconds
        configuration.quickCheckpointInterval = options.durability.quickCheckpointInterval.seconds
        configuration.durableCheckpointInterval = options.durability.checkpointInterval.seconds
        configuration.seed = UInt64.random(in: .min ... .max)
        configuration.deadline = options.maximumTime?.seconds
        return configuration
    }

    /// The statistics of a finished download; emits ``DownloadEvent/finished(_:)``.
    func statistics(resource: RemoteResource, mode: DownloadStatistics.Mode, size: Int64, counters: [ConnectionCounters],
                    splits: Int, resumed: Int64, since start: ContinuousClock.Instant, digests: [Digest] = [],
                    verified: [ExpectedDigest] = [], sources: [DownloadStatistics.Source] = [], unchanged: Bool = false,
                    validators: ConditionalRefresh.Recorded? = nil) -> DownloadStatistics {
        let duration = ContinuousClock.now - start
        let seconds = duration.seconds
        let connectionStats = counters.map(\.statistics)
        var statistics = DownloadStatistics(
            url: redactedURL(url), finalURL: redactedURL(resource.finalURL), path: FilePath(destination), mode: mode,
            size: size, duration: duration, averageBytesPerSecond: seconds > 0 && !unchanged ? Double(size - resumed) / seconds : 0,
            connectionCount: counters.count, connections: connectionStats,
            requests: connectionStats.reduce(0) { $0 + $1.requests },
            retries: connectionStats.reduce(0) { $0 + $1.retries },
            splits: splits,
            bytesReceived: counters.reduce(0) { $0 + $1.received.load(ordering: .relaxed) },
            resumedBytes: resumed)
        statistics.digests = digests
        statistics.verified = verified
        statistics.sources = sources
        statistics.unchanged = unchanged
        statistics.validators = validators
        options.logger.debug("finished", metadata: ["path": "\(statistics.path)", "bytes": "\(statistics.size)",
                                                    "seconds": "\(formatSeconds(statistics.seconds))", "requests": "\(statistics.requests)"])
        emit(.finished(statistics))
        return statistics
    }
}
