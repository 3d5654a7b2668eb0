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
    /// connections (and within its per-host cap): a ``DownloadQueue`` of the files, in order.
    ///
    /// As many more files as `jobs` are readied ahead, waiting to go the moment one's network part
    /// ends (``DownloadQueue/init(session:maximumActive:bytesPerSecond:readyAhead:)``). A file
    /// whose bytes have all arrived makes room for the next while it is synced and renamed, so no file waits for another's `fsync`, and each is still durable under its
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
        var byID: (@Sendable (DownloadQueue.ID, Download) -> Void)?
        if let observe {
            byID = { id, download in observe(Int(id) ?? 0, download) }
        }
        let queue = DownloadQueue(session: self, maximumActive: max(1, jobs), bytesPerSecond: nil, readyAhead: true, observe: byID)
        let events = queue.subscribe(keepingProgress: 1, endsOnly: true)
        let work = Task {
            let reader = Task {
                for await update in events {
                    guard let event = update.event, event.isLast, let index = Int(update.id) else { continue }
                    let file = files[index]
                    let result: Result<DownloadStatistics, DownloadError> = event.kind == .finished
                        ? .success(event.statistics!) : .failure(event.error!)
                    continuation.yield(BatchResult(index: index, url: file.url, destination: file.destination, result: result))
                }
            }
            for (index, file) in files.enumerated() {
                do throws(DownloadError) {
                    try queue.add(file.url, to: file.destination, options: file.options, id: String(index))
                } catch {
                    continuation.yield(BatchResult(index: index, url: file.url, destination: file.destination, result: .failure(error)))
                }
            }
            await queue.finish()
            await reader.value
            continuation.finish()
        }
        continuation.onTermination = { _ in work.cancel() }
        return stream
    }
}
