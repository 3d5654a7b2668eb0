import DownloadCore

/// How a download ends: every byte in, checked, and put in place under its final name (or, read
/// in order, handed to the reader); or failed, with the error that says why; and the manifest
/// that a checkpoint saves.
extension DownloadDriver {
    /// Waits for the reader's last bytes and checks the digests; then syncs and renames the file
    /// into place on the I/O queue (a download read in order has nothing to put in place).
    func finish() async throws -> DownloadStatistics {
        beginReporting()
        ticker?.finish()
        setup.transferred()
        for counter in counters { counter.set(.done) }
        let (file, length) = (self.file!, streamLength)
        let segmented: Bool
        let unknownSize: Bool
        switch mode {
        case .segmented?: (segmented, unknownSize) = (true, false)
        case .stream(let size)?: (segmented, unknownSize) = (false, size == nil)
        case nil: (segmented, unknownSize) = (false, false)
        }
        let size: Int64
        switch mode {
        case .segmented(let s)?: size = s
        default: size = resource.size ?? length
        }
        let digests = try await checkDigests(size: size)
        var validators: ConditionalRefresh.Recorded?
        if consumer != nil {
            file.close()  // read in order: every byte has reached the reader; nothing to put in place
        } else {
            validators = try await putInPlace(file, segmented: segmented, unknownSize: unknownSize, length: length)
        }
        let splits = shared.withLock { $0.splitCount }
        return setup.statistics(resource: resource, mode: segmented ? .segmented : .single, size: size, counters: counters,
                                 splits: splits, resumed: resumedBytes, since: since, digests: digests, verified: digestPlan.checks,
                                 sources: sourceStatistics(), validators: validators)
    }

    /// Syncs the finished file and gives it its final name; the directory's sync makes the name
    /// last. One job on the I/O queue does all three, and returns when the directory's sync has.
    /// Without the data's sync (`syncBeforeRename` off) the directory is not synced either: a
    /// name made to last over data that may not would promise what nothing keeps.
    private func putInPlace(_ file: OutputFile, segmented: Bool, unknownSize: Bool, length: Int64) async throws -> ConditionalRefresh.Recorded? {
        let (partial, durable, quickSlot) = (self.partial, options.durability.syncBeforeRename, quickSlot)
        let validators = (etag: resource.etag, lastModified: resource.lastModified)
        let done: Result<ConditionalRefresh.Recorded?, DownloadError> = await withCheckedContinuation { continuation in
            io.submit {
                do throws(DownloadError) {
                    if unknownSize {
                        do throws(DownloadError) { try file.truncate(to: length) } catch {
                            file.close()
                            throw error
                        }
                    }
                    quickSlot.close()
                    let recorded = try partial.putInPlace(file, removingManifest: segmented, validators: validators)
                    guard durable else { return continuation.resume(returning: .success(recorded)) }
                    // The rename lasts once the directory is synced: by a sync that starts now,
                    // perhaps shared with other downloads' renames, and run on this thread if none is.
                    DirectorySync.shared.syncHere(partial.store.directory) { continuation.resume(returning: .success(recorded)) }
                } catch {
                    if !segmented { partial.removeOwnData(of: file) }
                    return continuation.resume(returning: .failure(error))
                }
            }
        }
        return try done.get()
    }

    // MARK: - Errors and manifests

    func error(of transfer: DownloadMachine.TransferID) -> DownloadError {
        failures.error(of: transfer, finalURL: redactedURL(resource.finalURL))
    }

    func error(for failure: DownloadMachine.Failure, finalCheckpointFailed: Bool) -> DownloadError {
        if let outputFailure { return outputFailure }
        let segmented: Bool
        if case .segmented? = mode { segmented = true } else { segmented = false }
        let (written, size) = shared.withLock { ($0.writtenBytes, $0.table?.size ?? 0) }
        let standing = FailureRecord.Standing(url: url, finalURL: redactedURL(resource.finalURL),
                                              resumable: segmented && file?.isNamed == true,
                                              percent: formatPercent(size > 0 ? Double(written) * 100 / Double(size) : 100),
                                              partialPath: partial.partialPath, manifestPath: partial.manifestPath)
        return failures.error(for: failure, finalCheckpointFailed: finalCheckpointFailed, at: standing)
    }

    func manifestTemplate(size: Int64) -> Manifest {
        var manifest = Manifest(url: url, finalURL: redactedURL(resource.finalURL), size: size, etag: resource.etag,
                                lastModified: resource.lastModified,
                                minimumSegmentSize: resumedManifest?.minimumSegmentSize ?? options.minimumSegmentSize,
                                bootID: currentBootID, segments: [],
                                serverDigest: DigestPlan.serverDigest(of: resource.digests)?.digest ?? resumedManifest?.serverDigest)
        if sourceURLs.count > 1 { manifest.mirrors = sourceURLs.dropFirst().map(redactedURL) }
        manifest.instance = instance
        return manifest
    }
}
