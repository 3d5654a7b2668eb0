import DownloadCore

/// A download read in order (a pipe, an `AsyncSequence`): the bytes go through a ring of
/// ``DownloadOptions/window`` bytes in an anonymous temporary file, not through a partial file;
/// there is no manifest, and nothing is put in place at the end.
extension DownloadDriver {
    /// Creates the ring on the I/O queue and starts the reader that hands its bytes to the consumer.
    func prepareRing(_ preparation: DownloadMachine.Preparation) async throws -> [DownloadMachine.Action] {
        let size: Int64?
        switch preparation.mode {
        case .segmented(let s): size = s
        case .stream(let s): size = s
        }
        // A small file needs no more than its own size.
        let capacity = max(1, min(options.window, size ?? options.window))
        let directory = options.temporaryDirectory?.string ?? FileSystem.temporaryDirectory
        file = try await io.run { () throws(DownloadError) in try OutputFile.createRing(capacity: capacity, inDirectory: directory) }
        try startReader()
        let now = shared.now()
        return shared.withLock { $0.prepared(now: now) }
    }
}
