import CShims
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Hands a download read in order to an `AsyncSequence`'s iterator, one chunk at a time.
///
/// The reader thread blocks in ``consume(_:)`` until the iterator has taken the previous chunk:
/// at most one chunk waits, so memory stays bounded, and a consumer that stops asking pauses
/// the download.
///
/// Thread safety: `@unchecked Sendable` because every mutable field is guarded by `lock`.
final class ChunkChannel: ByteConsumer, @unchecked Sendable {
    private let lock = ConditionLock()
    // Guarded by `lock`:
    private var waiting: [UInt8]?
    private var taker: CheckedContinuation<Result<[UInt8]?, DownloadError>, Never>?
    private var end: Result<Void, DownloadError>?
    private var abandoned = false

    func consume(_ bytes: UnsafeRawBufferPointer) throws(DownloadError) {
        let chunk = [UInt8](bytes)
        lock.lock()
        while waiting != nil && !abandoned { lock.wait() }
        if abandoned {
            lock.unlock()
            throw DownloadError(.outputClosed, "the consumer of the download's bytes stopped reading")
        }
        if let taker {
            self.taker = nil
            lock.unlock()
            taker.resume(returning: .success(chunk))
            return
        }
        waiting = chunk
        lock.unlock()
    }

    func abandon() {
        lock.lock()
        abandoned = true
        lock.unlock()
        lock.signal()
    }

    /// The download ended (every byte was consumed, or it failed): the iterator ends after the
    /// chunk waiting, if any.
    func close(_ result: Result<Void, DownloadError>) {
        lock.lock()
        end = result
        let taker = self.taker
        self.taker = nil
        lock.unlock()
        lock.signal()
        taker?.resume(returning: result.map { nil })
    }

    /// The next chunk; `nil` at the end.
    func next() async -> Result<[UInt8]?, DownloadError> {
        await withCheckedContinuation { continuation in
            lock.lock()
            if let chunk = waiting {
                waiting = nil
                lock.unlock()
                lock.signal()
                continuation.resume(returning: .success(chunk))
            } else if let end {
                lock.unlock()
                continuation.resume(returning: end.map { nil })
            } else {
                taker = continuation
                lock.unlock()
            }
        }
    }
}
