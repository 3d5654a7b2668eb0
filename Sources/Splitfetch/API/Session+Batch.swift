public import SystemPackage

/// One file of a batch (``Session/download(_:jobs:observe:)``).
public struct BatchFile: Sendable {
    public var url: String
    public var destination: FilePath
    public var options: DownloadOptions

    public init(_ url: String, to destination: FilePath, options: DownloadOptions = DownloadOptions()) {
        self.url = url
        self.destination = destination
        self.options = options
    }
}

/// How one file of a batch ended.
public struct BatchResult: Sendable {
    /// Its place in the array given.
    public var index: Int
    public var url: String
    public var destination: FilePath
    /// The statistics, or the error ``Download/run()`` threw.
    public var result: Result<DownloadStatistics, DownloadError>
}

extension Session {
    /// Downloads many files, up to `jobs` of them using the network at once, over this session's
    /// connections (and within its per-host cap).
    ///
    /// A file whose bytes have all arrived makes room for the next while it is synced and
    /// renamed, so no file waits for another's `fsync`, and each is still durable under its
    /// final name. Results come in the order the files end. Stopping the iteration (or
    /// cancelling the task that iterates) cancels the files under way: they end as
    /// ``DownloadError/Code/interrupted`` (a segmented one keeps its data, so the same batch
    /// resumes), and those not started are not started.
    ///
    /// - Parameters:
    ///   - files: what to download, each with its own options.
    ///   - jobs: files at once, at least 1.
    ///   - observe: called with each file's index and ``Download`` before it runs, to read its
    ///     ``Download/events``.
    public func download(_ files: [BatchFile], jobs: Int,
                         observe: (@Sendable (Int, Download) -> Void)? = nil) -> AsyncStream<BatchResult> {
        let (stream, continuation) = AsyncStream.makeStream(of: BatchResult.self, bufferingPolicy: .unbounded)
        let work = Task {
            await runBatch(files, jobs: max(1, jobs), observe: observe) { continuation.yield($0) }
            continuation.finish()
        }
        continuation.onTermination = { _ in work.cancel() }
        return stream
    }

    private func runBatch(_ files: [BatchFile], jobs: Int, observe: (@Sendable (Int, Download) -> Void)?,
                          report: (BatchResult) -> Void) async {
        enum Step: Sendable {
            case transferred
            case finished(BatchResult)
        }
        // Under a per-host cap, the files not begun count as work waiting for their host: a
        // download splits no healthy range while they wait (DownloadMachine.hostRoom).
        let hosts = limiter == nil ? [] : files.map { Connector.host(of: $0.url) }
        for host in hosts { limiter?.expect(host: host, 1) }
        await withTaskGroup(of: Step.self) { group in
            var next = 0
            defer { for host in hosts.dropFirst(next) { limiter?.expect(host: host, -1) } }
            func add(_ group: inout TaskGroup<Step>) {
                let index = next
                next += 1
                if !hosts.isEmpty { limiter?.expect(host: hosts[index], -1) }
                let file = files[index]
                let download = Download(file.url, to: file.destination, options: file.options, session: self)
                observe?(index, download)
                group.addTask {
                    await download.transferred()
                    return .transferred
                }
                group.addTask {
                    let result: Result<DownloadStatistics, DownloadError>
                    do throws(DownloadError) { result = .success(try await download.run()) } catch { result = .failure(error) }
                    return .finished(BatchResult(index: index, url: file.url, destination: file.destination, result: result))
                }
            }
            while next < min(jobs, files.count) { add(&group) }
            while let step = await group.next() {
                switch step {
                case .transferred:
                    if next < files.count && !Task.isCancelled { add(&group) }
                case .finished(let result):
                    report(result)
                }
            }
        }
    }
}
