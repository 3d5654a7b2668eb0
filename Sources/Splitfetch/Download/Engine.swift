import SegmentPlanning
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Runs one download: probe, plan (or resume), workers, checkpoints, finish. Created and used by
/// ``Download/run()``.
struct Engine: Sendable {
    let url: String
    var destination: String
    let options: DownloadOptions
    let transport: CurlTransport
    /// What each request may carry; built once from the URL and options.
    let policy: RequestPolicy
    let emit: @Sendable (DownloadEvent) -> Void
    let clock = ContinuousClock()

    var partialPath: String { destination + ".part" }
    var manifestPath: String { destination + ".part.json" }

    func run() async throws -> DownloadStatistics {
        let startInstant = clock.now
        guard options.useContentDisposition else { return try await runWithLocalChecks(probed: nil, since: startInstant) }
        // The name depends on the server's answer: probe first, then look at local files.
        let resource = try await probe()
        var named = self
        named.destination = contentDispositionDestination(resource) ?? destination
        return try await named.runWithLocalChecks(probed: resource, since: startInstant)
    }

    private func probe() async throws -> RemoteResource {
        let resource = try await Probe(transport: transport, policy: policy).run()
        emit(.probed(resource))
        return resource
    }

    /// The destination with its name replaced by the server's `Content-Disposition` file name,
    /// reduced to a safe base name in the same directory; `nil` when there is none usable.
    func contentDispositionDestination(_ resource: RemoteResource) -> String? {
        guard let header = resource.contentDisposition, let raw = ContentDisposition.fileName(header),
              let name = safeFileName(raw) else { return nil }
        let directory = parentDirectory(of: destination)
        return directory == "/" ? "/" + name : directory + "/" + name
    }

    private func runWithLocalChecks(probed: RemoteResource?, since startInstant: ContinuousClock.Instant) async throws -> DownloadStatistics {
        let store = ManifestStore(path: manifestPath)
        if options.restart { try discardPartialData() }
        if let statistics = try finishedEarlier(store: store, since: startInstant) { return statistics }
        try checkDestination()
        let existing = try openPartialData(store: store)
        var keepExisting = false
        defer { if !keepExisting { existing?.file.close() } }
        try Task.checkCancellation()

        let resource: RemoteResource
        if let probed { resource = probed } else { resource = try await probe() }
        if let existing {
            try checkResumable(existing.manifest, file: existing.file, resource: resource)
            keepExisting = true
            return try await runSegmented(resource: resource, file: existing.file, manifest: existing.manifest,
                                          store: store, since: startInstant)
        }
        if resource.isSegmentable && resource.size! > 0 {
            let file = try await createPartialFile(size: resource.size!)
            do {
                return try await runSegmented(resource: resource, file: file, manifest: nil, store: store, since: startInstant)
            } catch let mismatch as SizeMismatch {
                // HEAD and a 206 disagree about the size. Ask with a ranged GET alone: if it agrees
                // with the 206, use that size; if the server cannot agree with itself, one stream.
                let confirmed = try await Probe(transport: transport, policy: policy).run(rangeOnly: true)
                emit(.probed(confirmed))
                if confirmed.isSegmentable, let size = confirmed.size, size == mismatch.observed, size > 0 {
                    let file = try await createPartialFile(size: size)
                    return try await runSegmented(resource: confirmed, file: file, manifest: nil, store: store,
                                                  since: startInstant, sizeConfirmed: true)
                }
                var stream = confirmed
                stream.size = nil
                stream.acceptsRanges = false
                return try await runSingle(resource: stream, since: startInstant)
            }
        }
        return try await runSingle(resource: resource, since: startInstant)
    }

    // MARK: - Segmented (resumable)

    private func runSegmented(resource: RemoteResource, file: OutputFile, manifest: Manifest?, store: ManifestStore,
                              since startInstant: ContinuousClock.Instant, sizeConfirmed: Bool = false) async throws -> DownloadStatistics {
        let size = resource.size!
        let policy = SegmentTable.SplitPolicy(minimumPiece: options.minimumSplitSize)
        let table: SharedSegmentTable
        let workerCount: Int
        if let manifest {
            let progress = manifest.usableProgress(currentBootID: currentBootID)
            table = SharedSegmentTable(SegmentTable(size: size, progress: progress.map { (ByteRange($0.start, $0.end), $0.written) },
                                                    policy: policy))
            let left = progress.reduce(Int64(0)) { $0 + ($1.end - $1.written) }
            workerCount = max(1, min(options.connections, Int((left + options.minimumSegmentSize - 1) / options.minimumSegmentSize)))
        } else {
            let plan = Planner.plan(size: size, connections: options.connections, minimumSegmentSize: options.minimumSegmentSize)
            table = SharedSegmentTable(SegmentTable(size: size, ranges: plan, policy: policy))
            workerCount = plan.count
        }
        let resumedBytes = table.withLock { $0.writtenBytes }
        let template = Manifest(url: redactedURL(url), finalURL: redactedURL(resource.finalURL), size: size,
                                etag: resource.etag, lastModified: resource.lastModified,
                                minimumSegmentSize: manifest?.minimumSegmentSize ?? options.minimumSegmentSize,
                                bootID: currentBootID, segments: [])
        let checkpointer = Checkpointer(table: table, file: file, store: store, template: template,
                                        durableInterval: options.checkpointInterval,
                                        quickInterval: options.quickCheckpointInterval,
                                        initialDurable: Dictionary(manifest?.segments.map { ($0.start, $0.written) } ?? [],
                                                                   uniquingKeysWith: { a, _ in a }))
        if manifest == nil {
            do { try checkpointer.saveInitial() } catch {
                file.close()
                unlink(partialPath)
                store.remove()
                throw error
            }
        }
        checkpointer.start()

        let counters = (0..<workerCount).map { WorkerCounters(id: $0) }
        emit(.started(mode: .segmented, connections: workerCount, size: size))
        let ticker = startTicker(counters: counters, total: size, base: resumedBytes, since: clock.now)
        defer { ticker.cancel() }

        do {
            try await runWorkers(resource: resource, total: size, file: file, table: table, counters: counters,
                                 checkpointer: checkpointer, mayRestartOnSizeMismatch: manifest == nil && !sizeConfirmed)
        } catch let mismatch as SizeMismatch {
            // Nothing was written: remove the files and let the caller start again.
            _ = await checkpointer.stop(saving: false)
            file.close()
            unlink(partialPath)
            store.remove()
            throw mismatch
        } catch {
            ticker.cancel()
            // Keep what is on disk: a final durable checkpoint, then report.
            let checkpointError = await checkpointer.stop(saving: true)
            file.close()
            let written = table.withLock { $0.writtenBytes }
            let percent = size > 0 ? Double(written) * 100 / Double(size) : 100
            if let checkpointError, !(error is DownloadError && (error as! DownloadError).code == .fileIO) {
                throw checkpointError
            }
            if error is CancellationError || Task.isCancelled {
                throw DownloadError(.interrupted, "paused at \(formatPercent(percent))% — run the same command to resume (\(partialPath))")
            }
            if var e = error as? DownloadError {
                if e.code != .remoteChanged && e.code != .interrupted {
                    e.message += "; \(formatPercent(percent))% kept in \(partialPath), run the same command to resume"
                }
                throw e
            }
            throw error
        }
        ticker.cancel()
        guard table.withLock({ $0.isComplete }) else {
            _ = await checkpointer.stop(saving: false)
            file.close()
            throw DownloadError(.protocolViolation, "\(redactedURL(url)): transfers ended with bytes missing")
        }
        let splits = table.withLock { $0.splitCount }
        // The checkpoint thread, already waiting on the disk's behalf, ends the download.
        let engine = self
        if let error = await checkpointer.stop(saving: false, then: { () throws(DownloadError) in
            try engine.putInPlaceNow(file, store: store)
        }) {
            file.close()  // already closed if the work ran; not if a checkpoint had failed
            throw error
        }
        return finish(resource: resource, mode: .segmented, size: size, counters: counters, splits: splits,
                      resumed: resumedBytes, since: startInstant)
    }

    private func runWorkers(resource: RemoteResource, total: Int64, file: OutputFile, table: SharedSegmentTable,
                            counters: [WorkerCounters], checkpointer: Checkpointer, mayRestartOnSizeMismatch: Bool) async throws {
        let ifRange = HTTPFields.ifRangeValue(etag: resource.etag, lastModified: resource.lastModified)
        let crew = Crew(size: counters.count, mayRestartOnSizeMismatch: mayRestartOnSizeMismatch)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for worker in counters {
                group.addTask {
                    try await segmentWorker(worker, resource: resource, ifRange: ifRange, total: total, file: file,
                                            table: table, crew: crew)
                }
            }
            // A failed checkpoint (fsync) stops every connection.
            group.addTask {
                if let failure = await checkpointer.failure() { throw failure }
                throw CancellationError()
            }
            for _ in counters { try await group.next() }
            group.cancelAll()
        }
    }

    // MARK: - Single stream (no ranges or no length; not resumable)

    private func runSingle(resource: RemoteResource, since startInstant: ContinuousClock.Instant) async throws -> DownloadStatistics {
        let file = try await createPartialFile(size: resource.size)
        var finished = false
        defer {
            if !finished {
                file.close()
                unlink(partialPath)
            }
        }
        let counters = [WorkerCounters(id: 0)]
        emit(.started(mode: .single, connections: 1, size: resource.size))
        let ticker = startTicker(counters: counters, total: resource.size, base: 0, since: clock.now)
        defer { ticker.cancel() }
        let size = resource.size == 0 ? 0 : try await runStream(resource: resource, file: file, counters: counters[0])
        ticker.cancel()
        try await putInPlace(file, store: nil)
        finished = true
        return finish(resource: resource, mode: .single, size: size, counters: counters, splits: 0, resumed: 0, since: startInstant)
    }

    private func finish(resource: RemoteResource, mode: DownloadStatistics.Mode, size: Int64, counters: [WorkerCounters],
                        splits: Int, resumed: Int64, since startInstant: ContinuousClock.Instant) -> DownloadStatistics {
        let seconds = (clock.now - startInstant).seconds
        let connectionStats = counters.map(\.statistics)
        let statistics = DownloadStatistics(
            url: redactedURL(url), finalURL: redactedURL(resource.finalURL), path: destination, mode: mode,
            size: size, seconds: seconds, averageBytesPerSecond: seconds > 0 ? Double(size - resumed) / seconds : 0,
            connectionCount: counters.count, connections: connectionStats,
            requests: connectionStats.reduce(0) { $0 + $1.requests },
            retries: connectionStats.reduce(0) { $0 + $1.retries },
            splits: splits,
            bytesReceived: counters.reduce(0) { $0 + $1.received.load(ordering: .relaxed) },
            resumedBytes: resumed)
        emit(.finished(statistics))
        return statistics
    }

    // MARK: - Partial data on disk

    /// Removes a partial file and manifest left by an earlier run (`restart`); only regular files.
    private func discardPartialData() throws(DownloadError) {
        for path in [partialPath, manifestPath, manifestPath + ".tmp"] {
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            guard (info.st_mode & S_IFMT) == S_IFREG else {
                throw DownloadError(.fileIO, "\(path) is not a regular file; refusing to remove it")
            }
            if unlink(path) != 0 {
                throw DownloadError(.fileIO, "cannot remove \(path): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// A run killed after renaming the finished file but before removing its manifest left the
    /// final file and the manifest: report that download as complete.
    private func finishedEarlier(store: ManifestStore, since startInstant: ContinuousClock.Instant) throws -> DownloadStatistics? {
        guard !options.allowOverwrite, fileExists(destination), !fileExists(partialPath),
              let bytes = try store.read(), let manifest = try? ManifestCodec.decode(bytes, path: manifestPath),
              manifest.url == redactedURL(url), fileSizeIfRegular(destination) == manifest.size else { return nil }
        store.remove()
        let resource = RemoteResource(url: manifest.url, finalURL: manifest.finalURL, size: manifest.size, acceptsRanges: true,
                                      etag: manifest.etag, lastModified: manifest.lastModified, contentType: nil,
                                      contentDisposition: nil, probeMethod: "manifest")
        return finish(resource: resource, mode: .segmented, size: manifest.size, counters: [], splits: 0,
                      resumed: manifest.size, since: startInstant)
    }

    /// Opens and locks the partial file of an earlier run, with its manifest; `nil` when there is
    /// neither. Anything else is a conflict with a message saying what to do.
    private func openPartialData(store: ManifestStore) throws -> (file: OutputFile, manifest: Manifest)? {
        let hasPartial = fileExists(partialPath)
        let manifestBytes = try store.read()
        switch (hasPartial, manifestBytes) {
        case (false, nil):
            return nil
        case (false, .some):
            throw DownloadError(.resumeConflict,
                "\(manifestPath) exists but \(partialPath) does not; run with --restart to start over")
        case (true, nil):
            // Lock first: an active download may not have written its manifest yet.
            let file = try OutputFile.openExisting(path: partialPath)
            defer { file.close() }
            try file.lockExclusively()
            throw DownloadError(.resumeConflict,
                "\(partialPath) exists without a manifest, so its bytes cannot be trusted; run with --restart to discard it")
        case (true, .some):
            let file = try OutputFile.openExisting(path: partialPath, injectedFullDiskOffset: options.injectedFullDiskOffset)
            do {
                try file.lockExclusively()
                // Read again under the lock: the manifest may have changed while another run held it.
                guard let bytes = try store.read() else {
                    throw DownloadError(.resumeConflict, "\(manifestPath) disappeared; run again")
                }
                return (file, try ManifestCodec.decode(bytes, path: manifestPath))
            } catch {
                file.close()
                throw error
            }
        }
    }

    /// Checks that an earlier run's data belongs to this URL and to the file the server has now.
    private func checkResumable(_ manifest: Manifest, file: OutputFile, resource: RemoteResource) throws(DownloadError) {
        if manifest.url != redactedURL(url) {
            throw DownloadError(.resumeConflict,
                "\(manifestPath) belongs to \(manifest.url), not \(redactedURL(url)); use another output name, or --restart")
        }
        let changed = "the file changed on the server since the download began"
        if resource.size != manifest.size {
            throw DownloadError(.remoteChanged,
                "\(redactedURL(url)): \(changed) (size \(manifest.size) is now \(resource.size.map(String.init) ?? "unknown")); run with --restart to download the new file")
        }
        if let old = manifest.etag, let new = resource.etag, old != new {
            throw DownloadError(.remoteChanged, "\(redactedURL(url)): \(changed) (ETag \(old) is now \(new)); run with --restart to download the new file")
        }
        if manifest.etag == nil || resource.etag == nil, let old = manifest.lastModified, let new = resource.lastModified, old != new {
            throw DownloadError(.remoteChanged,
                "\(redactedURL(url)): \(changed) (Last-Modified \(old) is now \(new)); run with --restart to download the new file")
        }
        if !resource.acceptsRanges {
            throw DownloadError(.resumeConflict, "\(redactedURL(url)): the server no longer accepts ranges; run with --restart to download it whole")
        }
        let length = try file.currentSize()
        if length != manifest.size {
            throw DownloadError(.resumeConflict, "\(partialPath) has \(length) bytes but its manifest says \(manifest.size); run with --restart")
        }
    }

    /// Creates and locks a new partial file and, when the size is known, preallocates it; on a
    /// thread of its own: allocating a large file can take milliseconds (about 0.3 ms per GiB on
    /// ext4 here).
    private func createPartialFile(size: Int64?) async throws -> OutputFile {
        let (path, replace, fullDisk) = (partialPath, options.allowOverwrite, options.injectedFullDiskOffset)
        return try await blockingCall("sf-allocate") { () throws -> OutputFile in
            let file = try OutputFile.create(path: path, replace: replace, injectedFullDiskOffset: fullDisk)
            do {
                try file.lockExclusively()
                if let size {
                    try file.checkFreeSpace(for: size)
                    try file.preallocate(size)
                }
                return file
            } catch {
                file.close()
                unlink(path)
                throw error
            }
        }
    }

    // MARK: - Destination

    private func checkDestination() throws(DownloadError) {
        var info = stat()
        if lstat(destination, &info) == 0 {
            if (info.st_mode & S_IFMT) != S_IFREG {
                throw DownloadError(.fileIO, "\(destination) exists and is not a regular file; refusing to replace it")
            }
            if !options.allowOverwrite {
                throw DownloadError(.outputExists, "\(destination) already exists (use --force to replace it)")
            }
        }
        let directory = parentDirectory(of: destination)
        var dirInfo = stat()
        if stat(directory, &dirInfo) != 0 || (dirInfo.st_mode & S_IFMT) != S_IFDIR {
            throw DownloadError(.fileIO, "directory \(directory) does not exist")
        }
    }

    /// The end of every successful download, on a thread of its own (it waits for the disk): the
    /// data reaches the disk (unless `syncBeforeRename` is off), the file is closed and renamed
    /// into place, the manifest removed and the directory synced so the rename lasts.
    private func putInPlace(_ file: OutputFile, store: ManifestStore?) async throws(DownloadError) {
        let engine = self
        try await blockingCall("sf-finish") { () throws(DownloadError) in try engine.putInPlaceNow(file, store: store) }
    }

    /// ``putInPlace(_:store:)``'s work, on the calling thread (which may wait for the disk).
    private func putInPlaceNow(_ file: OutputFile, store: ManifestStore?) throws(DownloadError) {
        defer { file.close() }  // on every path; renaming an open file is fine
        if options.syncBeforeRename { try file.sync() }
        try moveIntoPlace()
        store?.remove()
        try? store?.syncDirectory()
    }

    /// Renames the partial file to the destination; without overwrite, never replaces a file that
    /// appeared meanwhile (`link` fails if the name exists).
    private func moveIntoPlace() throws(DownloadError) {
        if options.allowOverwrite {
            if rename(partialPath, destination) != 0 {
                throw DownloadError(.fileIO, "cannot rename \(partialPath) to \(destination): \(String(cString: strerror(errno)))")
            }
            return
        }
        if link(partialPath, destination) != 0 {
            let code = errno
            if code == EEXIST {
                throw DownloadError(.outputExists, "\(destination) appeared during the download; the data is kept in \(partialPath)")
            }
            // File systems without hard links: fall back to rename after a last check.
            var info = stat()
            if lstat(destination, &info) == 0 {
                throw DownloadError(.outputExists, "\(destination) appeared during the download")
            }
            if rename(partialPath, destination) != 0 {
                throw DownloadError(.fileIO, "cannot rename \(partialPath) to \(destination): \(String(cString: strerror(errno)))")
            }
            return
        }
        unlink(partialPath)
    }

    // MARK: - Progress

    private func startTicker(counters: [WorkerCounters], total: Int64?, base: Int64, since start: ContinuousClock.Instant) -> Task<Void, Never> {
        let interval = options.progressInterval
        let emit = self.emit
        let clock = self.clock
        return Task {
            var lastBytes: Int64 = 0
            var lastTime = 0.0
            var smoothed = 0.0
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(Int(interval * 1000)))
                if Task.isCancelled { break }
                let now = (clock.now - start).seconds
                let connections = counters.map(\.progress)
                let bytes = connections.reduce(0) { $0 + $1.bytes }
                let dt = now - lastTime
                if dt > 0 {
                    let instant = Double(bytes - lastBytes) / dt
                    smoothed = smoothed == 0 ? instant : smoothed + (instant - smoothed) * min(1, dt / 2.0)
                }
                lastBytes = bytes
                lastTime = now
                emit(.progress(DownloadProgress(bytesWritten: base + bytes, totalBytes: total, bytesPerSecond: max(0, smoothed),
                                                elapsed: now, connections: connections)))
            }
        }
    }

    // MARK: - Retries

    /// The wait before retry number `attempt` (1-based): exponential with jitter, or what the
    /// server asked for with `Retry-After` on 429/503, capped at the maximum delay.
    func retryDelay(attempt: Int, head: ResponseHead?) -> Double {
        if let head, head.status == 429 || head.status == 503, let value = head.first("retry-after"),
           let asked = HTTPFields.retryAfter(value, now: Int64(time(nil))) {
            return min(options.retryMaximumDelay, asked)
        }
        let exponential = options.retryBaseDelay * Double(1 << min(attempt - 1, 16))
        let capped = min(options.retryMaximumDelay, exponential)
        return capped * Double.random(in: 0.5...1.0)
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}

/// The directory part of a path (`.` for a bare name).
func parentDirectory(of path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    if slash == path.startIndex { return "/" }
    return String(path[..<slash])
}

func fileExists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}

/// The size of a regular file (not following symlinks), or `nil`.
func fileSizeIfRegular(_ path: String) -> Int64? {
    var info = stat()
    guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
    return Int64(info.st_size)
}

/// `42.1`, one decimal, without Foundation.
func formatPercent(_ value: Double) -> String {
    let tenths = Int((value * 10).rounded(.down))
    return "\(tenths / 10).\(tenths % 10)"
}
