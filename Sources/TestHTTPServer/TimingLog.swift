#if canImport(Glibc)
import Glibc
#endif

/// Appends timestamped lines to a file: `SECONDS.NANOSECONDS TEXT`, wall-clock time, one
/// `write` per line on an `O_APPEND` descriptor so lines from different event loops never mix.
final class TimingLog: Sendable {
    struct OpenError: Error, CustomStringConvertible {
        var description: String
    }

    private let fd: Int32

    init(path: String) throws {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw OpenError(description: "cannot open \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd) }

    func record(_ text: String) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let nanos = String(now.tv_nsec)
        var line = "\(now.tv_sec).\(String(repeating: "0", count: 9 - nanos.count))\(nanos) \(text)\n"
        line.withUTF8 { bytes in _ = write(fd, bytes.baseAddress, bytes.count) }
    }
}
