/// Hashes a download's file while it downloads, on a thread of its own.
///
/// The writers report the lowest unwritten byte (``advance(to:)``); the hasher reads the bytes
/// below it back, from the page cache where they were just written, and feeds every algorithm
/// asked for. It reads what is on disk, not what came off the network: the digest is that of
/// the file that will go under the final name. At the end (``finish(at:)``) it hashes what is
/// left and returns the digests, moments after the last byte when the prefix kept up (an
/// in-order plan sees to that).
///
/// Memory is one 256 KiB buffer, whatever the file's size. The hasher reads through a
/// descriptor of its own (a `dup`), so closing the download's file never leaves it reading a
/// descriptor number the process may have reused.
///
/// Thread safety: `@unchecked Sendable` because its mutable state is guarded by `lock`; the
/// digests and the buffer are used by the hasher's thread alone.
final class PrefixHasher: @unchecked Sendable {
    /// Bytes read and hashed at a time: a quarter of a typical L2 cache.
    static let chunk = 256 << 10
    /// The hasher sleeps until at least this much is ready (or the end is known).
    static let wakeAfter: Int64 = 1 << 20

    let algorithms: [DigestAlgorithm]
    private let reader: OutputFile
    private let lock = ConditionLock()
    // Guarded by `lock`:
    private var available: Int64
    private var hashed: Int64 = 0
    private var end: Int64?
    private var sleeping = false
    private var stopped = false
    private var outcome: Result<[Digest], DownloadError>?
    private var waiter: CheckedContinuation<Result<[Digest], DownloadError>, Never>?

    /// Starts hashing `file` from byte 0; `[0, written)` is already on disk (a resumed download).
    ///
    /// - Throws: ``DownloadError`` when the file cannot be opened a second time.
    init(file: OutputFile, algorithms: [DigestAlgorithm], written: Int64) throws(DownloadError) {
        precondition(!algorithms.isEmpty)
        self.algorithms = algorithms
        reader = try file.duplicate()
        available = written
        startThread(name: "splitfetch-hash") { [self] in run() }
    }

    /// The bytes `[0, prefix)` are written. Cheap: the hasher is woken only once a megabyte or
    /// more waits for it.
    func advance(to prefix: Int64) {
        lock.lock()
        var wake = false
        if prefix > available {
            available = prefix
            wake = sleeping && available - hashed >= Self.wakeAfter
            if wake { sleeping = false }
        }
        lock.unlock()
        if wake { lock.signal() }
    }

    /// Every byte `[0, size)` is written: hashes what is left and returns the digests, in the
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

    /// The download failed or was cancelled: the hasher stops after the read under way.
    func stop() {
        lock.lock()
        stopped = true
        lock.unlock()
        lock.signal()
    }

    private func run() {
        let digests = algorithms.map(MessageDigest.init)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunk, alignment: 4096)
        defer {
            buffer.deallocate()
            reader.close()
        }
        var position: Int64 = 0
        while true {
            lock.lock()
            while !stopped && end == nil && available - position < Self.wakeAfter {
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
                    for digest in digests { digest.update(UnsafeRawBufferPointer(slice)) }
                    position += Int64(count)
                }
            } catch {
                deliver(.failure(error))
                return
            }
            lock.lock()
            hashed = position
            let done = end.map { position >= $0 } ?? false
            lock.unlock()
            if done {
                deliver(.success(digests.map { $0.finish() }))
                return
            }
        }
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
