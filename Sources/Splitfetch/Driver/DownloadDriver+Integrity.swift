/// The reader's part of a download: started on the open file, and its verdict at the end.
extension DownloadDriver {
    /// Starts the reader on the open file when the plan hashes anything or a consumer takes the
    /// bytes in order; it begins with what is written already (a resumed download's contiguous
    /// prefix).
    func startReader() throws(DownloadError) {
        guard digestPlan.hashes || consumer != nil, let file else { return }
        let queue = self.queue
        reader = try PrefixReader(file: file, algorithms: digestPlan.algorithms, written: shared.withLock { $0.contiguousPrefix },
                                  consumer: consumer, report: { queue.post(.reader($0)) })
    }

    /// Waits for the reader's last bytes and checks its digests against the plan's. A mismatch
    /// discards the file and its manifest: the wrong bytes cannot be told from the right ones,
    /// so resuming would keep them; the next run downloads the file afresh.
    ///
    /// - Returns: the digests computed (none when nothing is hashed).
    func checkDigests(size: Int64) async throws(DownloadError) -> [Digest] {
        guard let reader, let file else { return [] }
        let mismatch: DownloadError
        switch await reader.finish(at: size) {
        case .success(let digests):
            guard let error = digestPlan.mismatch(digests, url: url) else { return digests }
            mismatch = error
        case .failure(let error):
            // The bytes could not be read back (they may be right, so they stay for a resume),
            // or the consumer went away.
            file.close()
            throw error
        }
        file.close()
        let partial = self.partial
        await io.run { partial.removeOwnData(of: file) }
        throw mismatch
    }
}
