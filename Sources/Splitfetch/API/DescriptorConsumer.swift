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
