import CShims

/// Reads a download's file in order while it downloads, on a thread of its own: it hashes the
/// bytes, hands them to a consumer (a pipe, an `AsyncSequence`), or both.
///
/// The writers report the lowest unwritten byte (``advance(to:)``); the reader reads the bytes
/// below it back, from the page cache where they were just written. It reads what is on disk,
/// not what came off the network: the digest is that of the file that goes under the final
/// name. At the end (``finish(at:)``) it takes what is left and returns the digests, moments
/// after the last byte when the prefix kept up (an in-order plan sees to that).
///
/// For a consumer, the file is a ring (``OutputFile/createRing(capacity:inDirectory:)``) that
/// holds `capacity` bytes from the lowest byte not yet consumed (``delivered``). A writer whose
/// piece would pass that asks first (``admits(through:)``); when it may not, its transfer pauses
/// and is resumed (``resumeWhen(through:_:)``) once the consumer has taken enough.
///
/// Memory is one 256 KiB buffer, whatever the file's size. The reader reads through a
/// descriptor of its own (a `dup`), so closing the download's file never leaves it reading a
/// descriptor number the process may have reused.
///
/// Thread safety: `@unchecked Sendable` because its mutable state is guarded by `lock`; the
/// digests and the buffer are used by the reader's thread alone.
final class PrefixReader: @unchecked Sendable {
    /// What the reader tells the download.
    enum Report: Sendable {
        /// The consumer has taken `[0, offset)`.
        case delivered(Int64)
        /// The consumer failed (or the file could not be read back): the download should stop.
        case failed(DownloadError)
    }

    /// Bytes read and hashed at a time: a quarter of a typical L2 cache.
    static let chunk = 256 << 10
    /// The reader sleeps until at least this much is ready (or the end is known, or a writer
    /// waits for room).
    static let wakeAfter: Int64 = 1 << 20
    /// Progress is reported to the download at least this often, in bytes consumed.
    static let reportEvery: Int64 = 1 << 20

    let algorithms: [DigestAlgorithm]
    private let reader: OutputFile
    private let consumer: (any ByteConsumer)?
    private let report: @Sendable (Report) -> Void
    private let lock = ConditionLock()
    // Guarded by `lock`:
    private var available: Int64
    private var consumed: Int64
    private var end: Int64?
    private var sleeping = false
    private var stopped = false
    private var outcome: Result<[Digest], DownloadError>?
    private var waiter: CheckedContinuation<Result<[Digest], DownloadError>, Never>?
    /// Paused writers: the end of the piece each waits to write, and how to resume it.
    private var blocked: [(through: Int64, resume: @Sendable () -> Void)] = []

    /// Starts reading `file` from byte 0; `[0, written)` is already on disk (a resumed download).
    ///
    /// - Parameters:
    ///   - algorithms: the digests to compute (may be empty when there is a consumer).
    ///   - consumer: takes the bytes in order; `file` is then a ring.
    ///   - report: told of the consumer's progress and failure, on the reader's thread.
    /// - Throws: ``DownloadError`` when the file cannot be opened a second time.
    init(file: OutputFile, algorithms: [DigestAlgorithm], written: Int64, consumer: (any ByteConsumer)? = nil,
         report: @escaping @Sendable (Report) -> Void = { _ in }) throws(DownloadError) {
        precondition(!algorithms.isEmpty || consumer != nil)
        precondition(consumer == nil || file.ringCapacity != nil)
        self.algorithms = algorithms
        self.consumer = consumer
        self.report = report
        reader = try file.duplicate()
        available = written
        consumed = 0  // a resumed download's prefix is read (hashed) again from byte 0
        startThread(name: consumer == nil ? "splitfetch-hash" : "splitfetch-read") { [self] in run() }
    }

    /// The bytes `[0, prefix)` are written. Cheap: the reader is woken only once a megabyte or
    /// more waits for it.
    func advance(to prefix: Int64) {
        lock.lock()
        var wake = false
        if prefix > available {
            available = prefix
            wake = sleeping && (available - consumed >= Self.wakeAfter || !blocked.isEmpty)
            if wake { sleeping = false }
        }
        lock.unlock()
        if wake { lock.signal() }
    }

    /// Whether a piece ending at `through` (exclusive) fits in the ring now. Always true for a
    /// plain file, and once the reader has stopped: nothing is read any more, and a writer must
    /// not wait (and spin through pauses) until its transfer is cancelled.
    func admits(through: Int64) -> Bool {
        guard let capacity = reader.ringCapacity else { return true }
        lock.lock()
        defer { lock.unlock() }
        return through <= consumed + capacity || stopped
    }

    /// Calls `resume` once a piece ending at `through` fits in the ring (at once if it does now).
    func resumeWhen(through: Int64, _ resume: @escaping @Sendable () -> Void) {
        let capacity = reader.ringCapacity ?? .max
        lock.lock()
        if through <= consumed + capacity || stopped {
            lock.unlock()
            resume()
            return
        }
        blocked.append((through, resume))
        // The reader must not sleep on less than a megabyte while a writer waits for room.
        let wake = sleeping && available > consumed
        if wake { sleeping = false }
        lock.unlock()
        if wake { lock.signal() }
    }

    /// Every byte `[0, size)` is written: reads what is left and returns the digests, in the
    /// order of ``algorithms``.
    func finish(at size: Int64) async -> Result<[Digest], DownloadError> {
        await withCheckedContinuation { continuation in
            lock.lock()
            end = size
            available = max(available, size)
            if let outcome {
                lock.unlock()
                continuation.resume(returning: outcome)
                return
            }
            waiter = continuation
            sleeping = false
            lock.unlock()
            lock.signal()
        }
    }

    /// The download failed or was cancelled: the reader stops after the read under way, a
    /// consumer is told to give up, and paused writers go on (to be cancelled).
    func stop() {
        lock.lock()
        stopped = true
        let waiting = blocked
        blocked = []
        lock.unlock()
        lock.signal()
        consumer?.abandon()
        for writer in waiting { writer.resume() }
    }

    private func run() {
        // A pipe whose reader has gone fails this thread's write with EPIPE; SIGPIPE would end the process.
        if consumer != nil { sf_block_sigpipe_on_this_thread() }
        let digests = algorithms.map(MessageDigest.init)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunk, alignment: 4096)
        defer {
            buffer.deallocate()
            reader.close()
        }
        var position: Int64 = 0
        var reported: Int64 = 0
        while true {
            lock.lock()
            while !stopped && end == nil && !(available > position && (available - position >= Self.wakeAfter || !blocked.isEmpty)) {
                sleeping = true
                lock.wait()
            }
            let (target, stop) = (available, stopped)
            lock.unlock()
            if stop { return }
            do throws(DownloadError) {
                while position < target {
                    let count = Int(min(Int64(Self.chunk), target - position))
                    let slice = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
                    try reader.read(into: slice, at: position)
                    let bytes = UnsafeRawBufferPointer(slice)
                    for digest in digests { digest.update(bytes) }
                    try consumer?.consume(bytes)
                    position += Int64(count)
                    release(through: position)
                    if consumer != nil && (position - reported >= Self.reportEvery || position == target) {
                        reported = position
                        report(.delivered(position))
                    }
                }
            } catch {
                report(.failed(error))
                deliver(.failure(error))
                return
            }
            lock.lock()
            let done = end.map { position >= $0 } ?? false
            lock.unlock()
            if done {
                deliver(.success(digests.map { $0.finish() }))
                return
            }
        }
    }

    /// The consumer has taken `[0, position)`: its room in the ring goes to paused writers.
    private func release(through position: Int64) {
        let capacity = reader.ringCapacity ?? .max
        lock.lock()
        consumed = position
        var ready: [@Sendable () -> Void] = []
        if !blocked.isEmpty {
            blocked.removeAll { writer in
                guard writer.through <= position + capacity else { return false }
                ready.append(writer.resume)
                return true
            }
        }
        lock.unlock()
        for resume in ready { resume() }
    }

    private func deliver(_ result: Result<[Digest], DownloadError>) {
        lock.lock()
        outcome = result
        let waiting = waiter
        waiter = nil
        lock.unlock()
        waiting?.resume(returning: result)
    }
}
