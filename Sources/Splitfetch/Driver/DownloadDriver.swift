import Logging
import DownloadCore

/// Performs what a download's ``DownloadMachine`` decides, and tells it what happened.
///
/// The driver holds no policy. It turns actions into work (requests on the transport, file work
/// on the download's ``IOQueue``, a timer, events for the caller) and turns what comes back
/// (transfer results, checkpoint results, timer ticks, cancellation) into the machine's events.
/// It translates a libcurl or HTTP outcome into a ``DownloadMachine/TransferEnd``; whether that
/// means retry, back off, give up or restart is the machine's call.
///
/// Thread safety: not `Sendable`; one task runs ``run(_:)`` from start to end. The tasks it starts
/// capture only `Sendable` values and report through its ``EventQueue``.
final class DownloadDriver {
    enum Event: Sendable {
        /// How a transfer ended, its error (for messages), and for a stream the bytes it wrote.
        case transferEnded(DownloadMachine.TransferID, DownloadMachine.TransferEnd, DownloadError?, streamLength: Int64)
        case tick
        case checkpointEnded(Int, DownloadError?)
        /// The URL given was resolved again: the file it leads to now, if it is the same one.
        case resolved(RemoteResource?)
        case cancel
        /// From the reader of a download read in order: its progress, or its failure.
        case reader(PrefixReader.Report)
        /// A mirror's identity check ended: the URL it serves from, or why it is not used.
        case sourceChecked(Int, Result<String, DownloadError>)
    }

    private enum Step {
        case more([DownloadMachine.Action])
        case finished(DownloadStatistics)
    }

    let setup: DownloadSetup
    let partial: PartialFile
    let io: IOQueue
    let shared: SharedMachine
    let queue = EventQueue<Event>()
    let since: ContinuousClock.Instant
    var resource: RemoteResource
    var file: OutputFile?
    let resumedManifest: Manifest?
    /// Where quick checkpoints go after the run's first (``QuickManifestSlot``).
    let quickSlot: QuickManifestSlot
    /// The partial file's ``Manifest/instance``: the resumed one's, or new.
    let instance: String
    /// The probe's `GET` still receiving, until adopted or discarded.
    let open: OpenProbe?

    var transfers: [DownloadMachine.TransferID: Task<Void, Never>] = [:]
    var connectionOf: [DownloadMachine.TransferID: Int] = [:]
    var failures = FailureRecord()
    private var timer: (deadline: Double, token: TimerQueue.Token)?
    /// A re-resolution of the URL given, while one is out.
    private var resolution: Task<Void, Never>?
    var counters: [ConnectionCounters] = []
    var ticker: ProgressTicker?
    var resumedBytes: Int64 = 0
    var streamLength: Int64 = 0
    /// What is hashed and checked; decided once the probe has answered.
    var digestPlan = DigestPlan()
    /// Follows the written prefix when the plan hashes anything or a consumer reads in order.
    var reader: PrefixReader?
    /// Why the consumer of a download read in order stopped taking bytes, once it did.
    var outputFailure: DownloadError?
    /// Takes the file in order (a pipe): the file is then a ring, not a partial file.
    var consumer: (any ByteConsumer)? { setup.consumer }
    /// Each source's URL: the one given, then the mirrors (requests to source 0 go to
    /// `resource.finalURL`, to a mirror where its identity check was redirected).
    var sourceURLs: [String]
    /// Why each dropped source was dropped.
    var sourceErrors: [Int: DownloadError] = [:]
    /// Identity checks of the mirrors, while they run.
    var identityChecks: [Task<Void, Never>] = []

    init(setup: DownloadSetup, partial: PartialFile, io: IOQueue, machine: DownloadMachine, resource: RemoteResource,
         existing: PartialFile.Existing?, open: OpenProbe?, since: ContinuousClock.Instant, mirrors: [String] = []) {
        self.open = open
        sourceURLs = [setup.url] + mirrors
        self.setup = setup
        self.partial = partial
        self.io = io
        self.shared = SharedMachine(machine, origin: since)
        self.resource = resource
        self.file = existing?.file
        self.resumedManifest = existing?.manifest
        quickSlot = QuickManifestSlot(path: partial.store.quickPath)
        var random = SystemRandomNumberGenerator()
        instance = existing?.manifest.instance ?? String(random.next() as UInt64, radix: 16)
        self.since = since
        resumedBytes = machine.writtenBytes
        failures.timeLimit = setup.options.maximumTime
    }

    deinit {
        quickSlot.close()
    }

    var options: DownloadOptions { setup.options }
    /// How the file is fetched, as the machine decided (nil before the probe is answered).
    var mode: DownloadMachine.Mode? { shared.withLock { $0.mode } }
    var url: String { redactedURL(setup.url) }

    /// Runs the download to its end.
    ///
    /// - Returns: the statistics of the finished download (also emitted).
    /// - Throws: ``DownloadError`` after every transfer has ended and the file is closed.
    func run() async throws -> DownloadStatistics {
        defer {
            if let timer { TimerQueue.shared.cancel(timer.token) }
            ticker?.cancel()
            resolution?.cancel()
            for check in identityChecks { check.cancel() }
            reader?.stop()
            // Never expected: the machine ends only after every transfer did. Should an error
            // escape early, no transfer may outlive the file it writes to.
            for task in transfers.values { task.cancel() }
            // Nor the probe's response, should the error come before it was watched (the reader
            // failing to start): it would hold its bytes, then sit paused on its connection.
            // Once attached or discarded, this does nothing.
            open?.discard()
        }
        let queue = self.queue
        digestPlan = try DigestPlan(given: options.integrity.expectedDigests, server: options.integrity.useServerDigests ? resource.digests : [],
                                    reported: options.integrity.reportedDigests)
        for warning in digestPlan.warnings { setup.emit(.warning(warning)) }
        let answer = DownloadMachine.ProbeAnswer(size: resource.size, acceptsRanges: resource.acceptsRanges, openBody: open?.body,
                                                 redirected: resource.finalURL != setup.policy.url, inOrder: digestPlan.hashes)
        let now = shared.now()
        updateHostRoom()
        var pending = shared.withLock { $0.probed(answer, now: now) }
        if file != nil { try startReader() }  // resumed: the file is open already
        startIdentityChecks()
        if let open {
            if let id = shared.withLock({ $0.openBodyTransfer }) { watch(open, as: id) } else { open.discard() }
        }
        return try await withTaskCancellationHandler {
            while true {
                var next: [DownloadMachine.Action] = []
                for action in pending {
                    switch try await perform(action) {
                    case .more(let actions): next += actions
                    case .finished(let statistics): return statistics
                    }
                }
                pending = next.isEmpty ? handle(await queue.next()) : next
            }
        } onCancel: {
            queue.post(.cancel)
        }
    }

    // MARK: - Events

    private func handle(_ event: Event) -> [DownloadMachine.Action] {
        let now = shared.now()
        updateHostRoom()
        switch event {
        case .transferEnded(let id, let end, let error, let length):
            transfers[id] = nil
            if let error { failures.transfers[id] = error }
            if let connection = connectionOf.removeValue(forKey: id) { counters[connection].set(.idle) }
            if case .completed = end { streamLength = length }
            return shared.withLock { $0.transferEnded(id, end, now: now) }
        case .tick:
            timer = nil
            return shared.withLock { $0.tick(now: now) }
        case .checkpointEnded(let id, let error):
            if let error { failures.checkpoints[id] = error }
            return shared.withLock { $0.checkpointEnded(id, succeeded: error == nil, now: now) }
        case .resolved(let fresh):
            if let fresh { resource.finalURL = fresh.finalURL }
            return shared.withLock { $0.resolved(sameFile: fresh != nil, now: now) }
        case .cancel:
            return shared.withLock { $0.cancel(now: now) }
        case .reader(.delivered(let offset)):
            return shared.withLock { $0.delivered(through: offset, now: now) }
        case .sourceChecked(let source, let result):
            return sourceChecked(source, result, now: now)
        case .reader(.failed(let error)):
            // The consumer went away (or the bytes could not be read back): nothing more can
            // reach it, so the download stops, with this error.
            if outputFailure == nil { outputFailure = error }
            return shared.withLock { $0.cancel(now: now) }
        }
    }

    /// Under a per-host cap, tells the machine what the host has room for now: it decides
    /// whether a range may be split (``DownloadMachine/hostRoom``).
    private func updateHostRoom() {
        guard let room = setup.connector.room(for: resource.finalURL) else { return }
        shared.withLock { $0.hostRoom = room }
    }

    // MARK: - Actions

    private func perform(_ action: DownloadMachine.Action) async throws -> Step {
        switch action {
        case .prepare(let preparation):
            return .more(try await prepare(preparation))
        case .start(let start):
            begin(start)
        case .adopt(let start):
            await adopt(start)
        case .discardOpenBody:
            open?.discard()
        case .abort(let id, let reason):
            if reason == .stalled {
                failures.transfers[id] = DownloadError(.network, "\(redactedURL(resource.finalURL)): no data for \(formatSeconds(options.timeouts.stall.seconds)) s",
                                           kind: .network(.stalled))
            }
            transfers[id]?.cancel()
        case .notify(.retrying(let connection, let transfer, let attempt, let delay)):
            options.logger.debug("retrying", metadata: ["connection": "\(connection)", "attempt": "\(attempt)",
                                                        "delay": "\(formatSeconds(delay))", "error": "\(error(of: transfer).message)"])
            counters[connection].retries.wrappingAdd(1, ordering: .relaxed)
            counters[connection].set(.waitingToRetry)
            setup.emit(.retrying(connection: connection, error: error(of: transfer), delay: .seconds(delay)))
        case .notify(.ifRangeDropped(let connection, let transfer)):
            setup.emit(.retrying(connection: connection, error: error(of: transfer), delay: .zero))
        case .notify(.sourceDropped(let source, let transfer)):
            sourceDropped(source, transfer: transfer)
        case .notify(.connectionsReduced(let remaining, let transfer)):
            options.logger.debug("fewer connections", metadata: ["remaining": "\(remaining)", "reason": "\(error(of: transfer).message)"])
            setup.emit(.connectionsReduced(to: remaining, reason: error(of: transfer).message))
        case .checkpoint(let checkpoint):
            save(checkpoint)
        case .wake(let at):
            wake(at: at)
        case .discardAndProbeAgain:
            return .more(try await probeAgain())
        case .resolveAgain:
            resolveAgain()
        case .finish:
            return .finished(try await finish())
        case .fail(let failure, let finalCheckpointFailed):
            ticker?.cancel()
            let error = error(for: failure, finalCheckpointFailed: finalCheckpointFailed)
            options.logger.debug("download failed", metadata: ["code": "\(error.code)", "error": "\(error.message)"])
            file?.close()
            // A stream cannot resume: its partial file goes, on the I/O queue (unlinking a
            // large file can block).
            if case .stream? = mode, let file {
                let partial = self.partial
                await io.run { partial.removeOwnData(of: file) }
            }
            throw error
        }
        return .more([])
    }

    /// Creates the partial file (and the first manifest) on the I/O queue.
    private func prepare(_ preparation: DownloadMachine.Preparation) async throws -> [DownloadMachine.Action] {
        if consumer != nil { return try await prepareRing(preparation) }
        let size: Int64?
        switch preparation.mode {
        case .segmented(let s): size = s
        case .stream(let s):
            size = s
            if s == nil {  // the server could not agree on a size: take what the stream brings
                resource.size = nil
                resource.acceptsRanges = false
            }
        }
        let partial = self.partial
        let (template, quickSlot) = (manifestTemplate(size: size ?? 0), quickSlot)
        let segments = preparation.manifest?.segments
        // Without a manifest yet, the file stays unnamed: a run killed now leaves nothing behind.
        // Replacing a file (--force) is left to the named path, which renames.
        let unnamed = preparation.manifestCanWait && !options.allowOverwrite
        file = try await io.run { () throws(DownloadError) -> OutputFile in
            if unnamed, let size, let file = try partial.createUnnamed(size: size) { return file }
            let file = try partial.create(size: size)
            guard let segments else { return file }
            do throws(DownloadError) {
                try CheckpointWriter(file: file, store: partial.store, quick: quickSlot, template: template).save(segments, durable: false)
            } catch {
                file.close()
                partial.removeOwnData(of: file)
                throw error
            }
            return file
        }
        try startReader()
        let now = shared.now()
        return shared.withLock { $0.prepared(now: now) }
    }

    /// The first transfer emits `.started` and starts the progress ticker.
    func beginReporting() {
        guard counters.isEmpty else { return }
        let (count, size) = shared.withLock { ($0.connectionCount, $0.table?.size) }
        let mirrored = sourceURLs.count > 1
        counters = shared.withLock { machine in
            (0..<max(1, count)).map { ConnectionCounters(id: $0, source: mirrored ? machine.source(ofConnection: $0) : nil) }
        }
        if case .stream? = mode {
            setup.emit(.started(mode: .single, connections: 1, size: resource.size))
        } else {
            setup.emit(.started(mode: .segmented, connections: counters.count, size: size))
        }
        var segments: (@Sendable () -> [SegmentProgress])?
        if case .segmented? = mode {
            segments = { [shared] in
                shared.withLock { $0.segmentMap }.map {
                    SegmentProgress(range: $0.start..<$0.end, written: $0.written, connection: $0.connection, isSplit: $0.isSplit)
                }
            }
        }
        ticker = ProgressTicker(interval: options.progressInterval, emit: setup.emit, counters: counters,
                                total: size ?? resource.size, base: resumedBytes, segments: segments)
    }

    private func save(_ checkpoint: DownloadMachine.Checkpoint) {
        // A download read in order cannot resume: there is no manifest to save.
        if consumer != nil { return queue.post(.checkpointEnded(checkpoint.id, nil)) }
        let writer = CheckpointWriter(file: file!, store: partial.store, quick: quickSlot,
                                      template: manifestTemplate(size: shared.withLock { $0.table?.size ?? 0 }))
        let segments = checkpoint.segments
        let (queue, id, durable, partial) = (queue, checkpoint.id, checkpoint.durable, partial)
        io.submit {
            do throws(DownloadError) {
                try partial.nameForResuming(writer.file)
                try writer.save(segments, durable: durable)
                queue.post(.checkpointEnded(id, nil))
            } catch {
                queue.post(.checkpointEnded(id, error))
            }
        }
    }

    /// One timer: a wake earlier than the one pending replaces it; a later one waits for it
    /// (the machine asks again after every tick).
    private func wake(at deadline: Double) {
        if let timer, timer.deadline <= deadline { return }
        if let timer { TimerQueue.shared.cancel(timer.token) }
        let queue = queue
        timer = (deadline, TimerQueue.shared.schedule(at: shared.instant(at: deadline)) { queue.post(.tick) })
    }

    /// The URL a redirect led to expired: follow the URL given again (a ranged probe, in a task
    /// of its own while the other transfers go on) and keep the new target only if it is the
    /// same file: same size, and the same validators where both answers have them.
    private func resolveAgain() {
        let (queue, old) = (queue, resource)
        let probe = Probe(connector: setup.connector, policy: setup.policy)
        resolution = Task {
            var fresh: RemoteResource?
            do { fresh = try await probe.run(rangeOnly: true) } catch { fresh = nil }
            let same = fresh.map { old.isSameFile(as: $0) } ?? false
            queue.post(.resolved(same ? fresh : nil))
        }
    }

    /// A `206` named another size: start over from a ranged probe.
    private func probeAgain() async throws -> [DownloadMachine.Action] {
        if consumer != nil {
            // Bytes of the old file may have reached the reader already: nothing can be undone.
            throw DownloadError(.remoteChanged, "\(url): the file changed size on the server while it was read in order")
        }
        ticker?.cancel()
        ticker = nil
        counters = []
        reader?.stop()
        reader = nil
        let (partial, old) = (self.partial, file)
        old?.close()
        file = nil
        await io.run { partial.removeOwnData(of: old) }
        let confirmed = try await Probe(connector: setup.connector, policy: setup.policy).run(rangeOnly: true)
        setup.emit(.probed(confirmed.redacted))
        resource = confirmed
        let (answer, now) = (DownloadMachine.ProbeAnswer(size: confirmed.size, acceptsRanges: confirmed.acceptsRanges,
                                                         inOrder: digestPlan.hashes), shared.now())
        return shared.withLock { $0.probed(answer, now: now) }
    }
}
