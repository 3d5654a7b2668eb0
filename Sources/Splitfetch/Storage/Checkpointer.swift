import SegmentPlanning

/// Saves the manifest from its own thread, so `fdatasync` and file writes never stall the
/// connections or Swift's cooperative pool.
///
/// Two kinds of checkpoint:
/// - *durable* (every `durableInterval`, and on every stop): snapshot the written offsets,
///   `fdatasync` the data file, then save the manifest with `fsync` of file and directory. The
///   snapshot is taken before the sync, so the manifest never claims a byte that is not on disk.
///   A failed sync is fatal for the run and the manifest is not advanced.
/// - *quick* (every `quickInterval`): the same snapshot saved as `cached` offsets without any
///   sync, trusted on resume only within the same kernel boot (a killed process loses nothing from
///   the page cache). This keeps what a `kill -9` costs to a fraction of a second of transfer.
///
/// Thread safety: all methods may be called from any thread or task.
final class Checkpointer: Sendable {
    private struct State {
        var stopping = false
        var saveOnStop = true
        /// Run on the checkpoint thread after the last checkpoint (see `stop(saving:then:)`).
        var last: (@Sendable () throws(DownloadError) -> Void)?
        var waiters: [CheckedContinuation<DownloadError?, Never>] = []
        var failure: DownloadError?
        var failureWatchers: [CheckedContinuation<DownloadError?, Never>] = []
        var finished = false
        /// The failure watcher was cancelled (possibly before it started waiting).
        var watchCancelled = false
    }

    private let lock = ConditionLock()
    /// Guarded by `lock`.
    nonisolated(unsafe) private var state = State()
    private let table: SharedSegmentTable
    private let file: OutputFile
    private let store: ManifestStore
    private let template: Manifest
    private let durableInterval: Double
    private let quickInterval: Double
    /// Segment start → offset known to be on disk, from the manifest a resumed run started with.
    private let initialDurable: [Int64: Int64]

    init(table: SharedSegmentTable, file: OutputFile, store: ManifestStore, template: Manifest,
         durableInterval: Double, quickInterval: Double, initialDurable: [Int64: Int64] = [:]) {
        self.initialDurable = initialDurable
        self.table = table
        self.file = file
        self.store = store
        self.template = template
        self.durableInterval = durableInterval
        self.quickInterval = quickInterval
    }

    /// Starts the checkpoint thread.
    func start() {
        startThread(name: "sf-checkpoint") { [self] in run() }
    }

    /// Saves the first manifest before any transfer (blocking). It claims no bytes, so it needs no
    /// sync: if a power cut loses it, the next run reports a partial file without a manifest.
    func saveInitial() throws(DownloadError) {
        var durable = initialDurable
        try checkpoint(durable: false, durableOffsets: &durable)
    }

    /// Stops the thread; with `saving`, after a final durable checkpoint. Returns its error.
    ///
    /// - Parameter last: work for the same thread once checkpoints have ended and none failed (a
    ///   finished download's sync and rename): done here, no thread has to be started for it and
    ///   no task has to wait for this thread to end first. Its error is returned; after a failed
    ///   checkpoint it does not run and that failure is returned.
    func stop(saving: Bool, then last: (@Sendable () throws(DownloadError) -> Void)? = nil) async -> DownloadError? {
        await withCheckedContinuation { continuation in
            lock.lock()
            if state.finished {
                // Only a failed checkpoint ends the thread before a stop. With `last`, that failure
                // is the result: after a failed fsync the disk may have dropped written data, so
                // the file is not put in place.
                let failure = state.failure
                lock.unlock()
                continuation.resume(returning: saving || last != nil ? failure : nil)
                return
            }
            state.stopping = true
            state.saveOnStop = saving
            state.last = last
            state.waiters.append(continuation)
            lock.signal()
            lock.unlock()
        }
    }

    /// Waits until a checkpoint fails (returns the error) or the checkpointer stops (returns nil).
    /// Cancelling the waiting task returns nil.
    func failure() async -> DownloadError? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<DownloadError?, Never>) in
                lock.lock()
                if state.finished || state.failure != nil || state.watchCancelled {
                    let f = state.failure
                    lock.unlock()
                    continuation.resume(returning: f)
                    return
                }
                state.failureWatchers.append(continuation)
                lock.unlock()
            }
        } onCancel: {
            lock.lock()
            // Under the lock, so a watcher that has not started waiting yet sees it.
            state.watchCancelled = true
            let watchers = state.failureWatchers
            state.failureWatchers = []
            lock.unlock()
            for w in watchers { w.resume(returning: nil) }
        }
    }

    private func run() {
        var durableOffsets = initialDurable
        let start = ConditionLock.now()
        var nextQuick = quickInterval > 0 ? start + quickInterval : nil
        var nextDurable = durableInterval > 0 ? start + durableInterval : nil
        lock.lock()
        while true {
            let deadline = [nextQuick, nextDurable].compactMap { $0 }.min()
            while !state.stopping && (deadline == nil || ConditionLock.now() < deadline!) {
                lock.wait(until: deadline)
            }
            let stopping = state.stopping
            let saveOnStop = state.saveOnStop
            let last = state.last
            lock.unlock()

            let now = ConditionLock.now()
            var result: DownloadError?
            if !stopping || saveOnStop {
                let durable = stopping || (nextDurable.map { now >= $0 } ?? false)
                do {
                    try checkpoint(durable: durable, durableOffsets: &durableOffsets)
                } catch {
                    result = error
                }
                if durable, let _ = nextDurable { nextDurable = now + durableInterval }
                if nextQuick != nil { nextQuick = now + quickInterval }
            }
            if stopping, result == nil, let last {
                do { try last() } catch { result = error }
            }

            lock.lock()
            if let result, state.failure == nil { state.failure = result }
            if stopping || state.failure != nil {
                state.finished = true
                let waiters = state.waiters
                let watchers = state.failureWatchers
                let failure = state.failure
                state.waiters = []
                state.failureWatchers = []
                lock.unlock()
                for w in waiters { w.resume(returning: failure) }
                for w in watchers { w.resume(returning: failure) }
                return
            }
        }
    }

    /// Takes a snapshot and saves it. `durableOffsets` maps segment start to the written offset
    /// known to be on disk, carried between calls.
    private func checkpoint(durable: Bool, durableOffsets: inout [Int64: Int64]) throws(DownloadError) {
        let snapshot = table.withLock { $0.progressSnapshot().map { ProgressEntry(range: $0.range, written: $0.written) } }
        if durable {
            try file.sync()
        } else {
            file.startWriteback()
        }
        if durable {
            durableOffsets = Dictionary(uniqueKeysWithValues: snapshot.map { ($0.range.lowerBound, $0.written) })
        }
        var manifest = template
        manifest.bootID = currentBootID
        manifest.segments = snapshot.map { entry in
            let start = entry.range.lowerBound
            let onDisk = min(durableOffsets[start] ?? start, entry.written)
            return Manifest.Segment(start: start, end: entry.range.upperBound, written: onDisk,
                                    cached: entry.written > onDisk ? entry.written : nil)
        }
        try store.save(ManifestCodec.encode(manifest), durable: durable)
    }
}

/// One segment's progress in a snapshot.
struct ProgressEntry: Sendable {
    var range: ByteRange
    var written: Int64
}
