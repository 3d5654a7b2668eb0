import SegmentPlanning
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Runs one download: probe, plan, workers, finish. Created and used by ``Download/run()``.
struct Engine: Sendable {
    let url: String
    let destination: String
    let options: DownloadOptions
    let transport: CurlTransport
    let emit: @Sendable (DownloadEvent) -> Void
    let clock = ContinuousClock()

    var partialPath: String { destination + ".part" }

    func run() async throws -> DownloadStatistics {
        let startInstant = clock.now
        try checkDestination()
        if Task.isCancelled { throw CancellationError() }
        let resource = try await Probe(transport: transport, options: options).run(url: url)
        emit(.probed(resource))

        let file = try OutputFile.create(path: partialPath, replace: options.allowOverwrite)
        var finished = false
        defer {
            if !finished {
                file.close()
                unlink(partialPath)
            }
        }
        if let size = resource.size { try file.preallocate(size) }

        let segmented = resource.isSegmentable && (resource.size ?? 0) > 0
        let plan = segmented
            ? Planner.plan(size: resource.size!, connections: options.connections, minimumSegmentSize: options.minimumSegmentSize)
            : []
        let workerCount = segmented ? plan.count : 1
        let counters = (0..<workerCount).map { WorkerCounters(id: $0) }
        let mode: DownloadStatistics.Mode = segmented ? .segmented : .single
        emit(.started(mode: mode, connections: workerCount, size: resource.size))

        let transferStart = clock.now
        let ticker = startTicker(counters: counters, total: resource.size, since: transferStart)
        defer { ticker.cancel() }

        let size: Int64
        var splits = 0
        if segmented {
            let total = resource.size!
            let table = SharedSegmentTable(SegmentTable(size: total, ranges: plan,
                                           policy: .init(minimumPiece: options.minimumSplitSize)))
            try await runSegmented(resource: resource, total: total, file: file, table: table, counters: counters)
            let (complete, made) = table.withLock { ($0.isComplete, $0.splitCount) }
            guard complete else {
                throw DownloadError(.protocolViolation, "\(redactedURL(url)): transfers ended with bytes missing")
            }
            splits = made
            size = total
        } else if resource.size == 0 {
            size = 0
        } else {
            size = try await runStream(resource: resource, file: file, counters: counters[0])
        }
        ticker.cancel()

        if options.syncBeforeRename { try file.sync() }
        file.close()
        try moveIntoPlace()
        finished = true

        let seconds = (clock.now - startInstant).seconds
        let connectionStats = counters.map(\.statistics)
        let statistics = DownloadStatistics(
            url: redactedURL(url), finalURL: redactedURL(resource.finalURL), path: destination, mode: mode,
            size: size, seconds: seconds, averageBytesPerSecond: seconds > 0 ? Double(size) / seconds : 0,
            connectionCount: workerCount, connections: connectionStats,
            requests: connectionStats.reduce(0) { $0 + $1.requests },
            retries: connectionStats.reduce(0) { $0 + $1.retries },
            splits: splits,
            bytesReceived: counters.reduce(0) { $0 + $1.received.load(ordering: .relaxed) })
        emit(.finished(statistics))
        return statistics
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

    private func startTicker(counters: [WorkerCounters], total: Int64?, since start: ContinuousClock.Instant) -> Task<Void, Never> {
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
                emit(.progress(DownloadProgress(bytesWritten: bytes, totalBytes: total, bytesPerSecond: max(0, smoothed),
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
