import CShims
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Writes a download read in order to a file descriptor: a pipe, a socket, standard output.
///
/// A slow reader blocks the write, and with it the download's reader thread: the download's
/// connections then pause. A reader that went away (`EPIPE`) ends the download with
/// ``DownloadError/Code/outputClosed``; SIGPIPE is blocked on the writing thread, so it never
/// ends the process. A non-blocking descriptor is waited on with `poll`.
///
/// Thread safety: immutable; `consume` runs on the download's reader thread.
struct DescriptorConsumer: ByteConsumer {
    let descriptor: FileDescriptor
    /// Names the descriptor in messages (`standard output`).
    let name: String

    func consume(_ bytes: UnsafeRawBufferPointer) throws(DownloadError) {
        var done = 0
        while done < bytes.count {
            let rest = UnsafeRawBufferPointer(rebasing: bytes[done...])
            let count = Glibc.write(descriptor.rawValue, rest.baseAddress, rest.count)
            if count >= 0 {
                done += count
                continue
            }
            let code = errno
            switch code {
            case EINTR:
                continue
            case EAGAIN:
                var wanted = pollfd(fd: descriptor.rawValue, events: Int16(POLLOUT), revents: 0)
                _ = poll(&wanted, 1, -1)
            case EPIPE:
                sf_discard_pending_sigpipe()
                throw DownloadError(.outputClosed, "\(name): the reader closed the pipe")
            default:
                throw DownloadError(.fileIO, "\(name): write failed: \(Errno(rawValue: code))")
            }
        }
    }

    /// A write blocked on a reader that is alive but not reading cannot be interrupted from
    /// here; the download ends without waiting for it.
    func abandon() {}
}

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
