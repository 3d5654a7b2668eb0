import DownloadCore
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import Splitfetch
import SystemPackage

/// Adding jobs: checked, placed, committed, then handed to the library queue.
extension Daemon {

    /// Adds a download, committed before this returns.
    ///
    /// - Parameters:
    ///   - uris: its URL, then its mirrors.
    ///   - options: aria2 options (see ``Aria2Options``).
    ///   - position: its place among the unfinished jobs; the end by default.
    /// - Returns: its GID.
    public func add(uris: [String], options: [String: String], position: Int? = nil) async throws(RPCError) -> String {
        try await add([(uris, options, position)])[0].get()
    }

    /// Adds several downloads (a `system.multicall` of `addUri`s), each checked and placed in
    /// order, in batches of growing size: each batch is committed together, then queued, before
    /// the next is checked. The first downloads start after a commit of a few jobs instead of
    /// one of them all (1,000 adds took about 0.1 s before the first request went out).
    public func add(_ requests: [(uris: [String], options: [String: String], position: Int?)]) async -> [Result<String, RPCError>] {
        var results: [Result<String, RPCError>] = []
        results.reserveCapacity(requests.count)
        var next = requests.startIndex
        var size = Self.firstAddBatch
        while next < requests.endIndex {
            let end = min(requests.endIndex, next + size)
            results += await addBatch(requests[next..<end])
            next = end
            size = min(size * 4, Self.largestAddBatch)
        }
        return results
    }

    /// The first batch of a many-add request: as many as `-j` starts at once, commonly.
    static let firstAddBatch = 8
    /// Past this, a larger batch saves no noticeable commit time.
    static let largestAddBatch = 512

    /// Checks a batch of adds, commits those that passed together, then queues them.
    private func addBatch(_ requests: ArraySlice<(uris: [String], options: [String: String], position: Int?)>) async
        -> [Result<String, RPCError>] {
        var results: [Result<String, RPCError>] = []
        var accepted: [(job: Job, options: DownloadOptions, position: Int?)] = []
        for request in requests {
            do throws(RPCError) {
                let (job, options) = try prepare(uris: request.uris, options: request.options, position: request.position)
                accepted.append((job, options, request.position))
                results.append(.success(job.gid))
            } catch {
                results.append(.failure(error))
            }
        }
        guard !accepted.isEmpty else { return results }
        defer {
            state.withLockedValue { state in for entry in accepted { state.saving[entry.job.destination] = nil } }
        }
        do {
            try await writer.persist(accepted.map(\.job.gid))
        } catch {
            state.withLockedValue { state in
                for entry in accepted { state.forget(entry.job) }
            }
            // Not confirmed: in a fleet, the job comes back into the copy with its row, if it
            // was made (the notifications are read again after the reconnect).
            let failure = if case StoreError.unconfirmed = error {
                RPCError.failed("\(error)")
            } else {
                RPCError.failed("the job could not be saved: \(error)")
            }
            return results.map { $0.flatMap { _ in .failure(failure) } }
        }
        if let fleet {
            // A worker with a free slot claims them (this one, woken now, or another, told by
            // the database).
            for entry in accepted {
                logger.info("added", metadata: ["gid": "\(entry.job.gid)", "url": "\(redactedURL(entry.job.uris[0]))"])
            }
            fleet.wake()
            return results
        }
        for entry in accepted {
            do {
                try enqueue(entry.job, paused: entry.job.state == .paused, position: entry.position)
                logger.info("added", metadata: ["gid": "\(entry.job.gid)", "url": "\(redactedURL(entry.job.uris[0]))"])
            } catch {
                var job = entry.job
                job.state = .failed
                job.errorCode = error.code.description
                job.errorMessage = error.message
                job.finishedAt = Date().timeIntervalSince1970
                state.withLockedValue { $0.store(job) }
                try? await writer.persist([job.gid])
                if let index = results.firstIndex(where: { (try? $0.get()) == job.gid }) { results[index] = .failure(.failed(error.message)) }
            }
        }
        return results
    }

    /// Checks one add and reserves its place and its file; nothing is committed yet.
    func prepare(uris: [String], options: [String: String], position: Int?) throws(RPCError) -> (Job, DownloadOptions) {
        guard let url = uris.first, !url.isEmpty else { throw RPCError.invalidParams("addUri needs at least one URI") }
        let parsed = try Aria2Options.parse(options, base: downloadOptions(), root: root, resolvingPaths: true)
        var download = parsed.options
        download.mirrors.urls = Array(uris.dropFirst())
        let name = if let out = parsed.out { out } else { try Self.fileName(for: url) }
        let destination = try root.file(name, in: parsed.dir ?? root.path)
        do { try download.validate() } catch { throw RPCError.invalidParams(error.message) }
        guard RemoteScheme.isSupported(url) else {
            throw RPCError.invalidParams("\(redactedURL(url)): only http, https, ftp, ftps and sftp URLs are supported")
        }
        // A refresh (conditional-get) is for a file already there; it replaces it only with a
        // complete new version.
        if FileManagerLite.exists(destination.string) && !download.refresh {
            throw RPCError.failed("\(destination) exists; choose another `out`, or refresh it with conditional-get (nothing is overwritten)")
        }
        let gid = Self.newGID()
        return try state.withLockedValue { state -> Result<(Job, DownloadOptions), RPCError> in
            // An add of the same file still being saved may yet fail: that is not a job to point to.
            guard state.saving[destination.string] == nil else {
                return .failure(RPCError.failed("an add of \(destination) is being saved now; ask again when it has answered"))
            }
            guard !state.destinations.contains(destination.string) else {
                return .failure(RPCError.failed("another download in the queue writes \(destination)"))
            }
            state.saving[destination.string] = gid
            let job = Job(gid: gid, order: state.order(at: position), uris: uris, destination: destination.string,
                          options: parsed.reported, state: parsed.paused ? .paused : .waiting, priority: parsed.priority,
                          bytesPerSecond: parsed.bytesPerSecond, addedAt: Date().timeIntervalSince1970)
            state.store(job)
            return .success((job, download))
        }.get()
    }

    /// Hands a job to the library queue. Its options are made from the job's record when it
    /// starts (``optionsAtStart(_:)``, one closure for every job), so that a waiting job costs the
    /// queue only a small record (they were checked when the job was added; its file is already
    /// decided).
    func enqueue(_ job: Job, paused: Bool, position: Int? = nil) throws(DownloadError) {
        try queue.add(job.url, to: FilePath(job.destination), id: job.gid, priority: job.priority, at: position, paused: paused,
                      bytesPerSecond: job.bytesPerSecond, optionsAtStart: startOptions)
    }

    /// The options a job starts with: its aria2 options (only its priority and rate limit change
    /// after the add, and the queue applies those itself) over the daemon's, with its mirrors, and
    /// for a refresh the validators of the file's last complete download.
    func optionsAtStart(_ gid: String) throws(DownloadError) -> DownloadOptions {
        guard let job = job(gid) else { throw DownloadError(.interrupted, "GID#\(gid) is no longer in the queue") }
        do throws(RPCError) {
            var options = try Aria2Options.parse(job.options, base: downloadOptions(), root: root, resolvingPaths: false).options
            options.mirrors.urls = job.mirrors
            if options.refresh { options.refreshRecord = recordedValidators(of: job.destination) }
            return options
        } catch {
            throw DownloadError(.usage, error.message)
        }
    }

    /// The validators recorded with the last complete download of `destination`, if any.
    func recordedValidators(of destination: String) -> ConditionalRefresh.Recorded? {
        state.withLockedValue { $0.recorded[destination]?.validators }
    }

    /// The settings every download starts from: the daemon's, with the global options applied.
    func downloadOptions() -> DownloadOptions {
        var options = defaults
        // The queue's files are resumed by later runs of the daemon, never overwritten.
        options.allowOverwrite = false
        return options
    }

    static func fileName(for url: String) throws(RPCError) -> String {
        let name = defaultFileName(forURL: url)
        guard let safe = safeFileName(name) else { throw RPCError.invalidParams("no file name in \(redactedURL(url)); give `out`") }
        return safe
    }

    /// 16 hexadecimal digits, as aria2's GIDs.
    static func newGID() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
