import Dispatch
import FoundationEssentials
import Splitfetch

#if canImport(Glibc)
import Glibc
#endif

/// `--events FILE|-`: every download's events as JSON lines, one object a line, in the schema the
/// manual documents (Documentation/Manual/Events.md). Field names are stable within a schema
/// version; new fields may be added, and a reader ignores those it does not know.
///
/// Lines are encoded and written in order on a serial dispatch queue of their own, so a slow
/// reader of the file (a pipe) never blocks Swift's cooperative pool.
///
/// Thread safety: `@unchecked Sendable` because the encoder and the descriptor are used only on
/// `queue`, which serializes them; everything else is immutable.
final class EventLog: @unchecked Sendable {
    static let schema = 1
    /// The progress lines' cadence (the downloads' progress interval when `--events` is given).
    static let progressInterval: Duration = .milliseconds(500)

    private let queue = DispatchQueue(label: "splitfetch.events")
    private let descriptor: Int32
    private let start = ContinuousClock.now
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// Opens `path` for writing (created or truncated), or standard output for `-`.
    init(path: String) throws {
        if path == "-" {
            descriptor = dup(STDOUT_FILENO)
        } else {
            descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        }
        guard descriptor >= 0 else { throw EventLogError(path: path, code: errno) }
    }

    /// Writes `event` of the `download`-th download (0 for a single URL) as one line.
    func record(_ event: DownloadEvent, download: Int) {
        let elapsed = (ContinuousClock.now - start).seconds
        queue.async { [self] in
            let line = EventLine(event: event, download: download, elapsed: elapsed)
            guard var bytes = try? encoder.encode(line) else { return }
            bytes.append(UInt8(ascii: "\n"))
            bytes.withUnsafeBytes { raw in
                var done = 0
                while done < raw.count {
                    let count = write(descriptor, raw.baseAddress! + done, raw.count - done)
                    if count < 0 && errno == EINTR { continue }
                    if count <= 0 { return }  // a reader that went away loses the rest, not the download
                    done += count
                }
            }
        }
    }

    /// Writes what is queued and closes the file.
    func close() async {
        let descriptor = self.descriptor
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                _ = Glibc.close(descriptor)
                continuation.resume()
            }
        }
    }
}

struct EventLogError: Error, CustomStringConvertible {
    var path: String
    var code: Int32
    var description: String { "cannot open \(path) for --events: \(String(cString: strerror(code)))" }
}

/// One line of `--events`: the library's encoding of the event (``DownloadEvent``'s `Codable`
/// form, the documented schema), with the fields every line has and, for `failed`, the exit
/// status the CLI gives that error.
struct EventLine: Encodable {
    enum CodingKeys: String, CodingKey {
        case schema, download, elapsed, exitStatus
    }

    var event: DownloadEvent
    var download: Int
    var elapsed: Double

    func encode(to encoder: any Encoder) throws {
        try event.encode(to: encoder)
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(EventLog.schema, forKey: .schema)
        try c.encode(download, forKey: .download)
        try c.encode(elapsed, forKey: .elapsed)
        if event.kind == .failed, let error = event.error {
            try c.encode((error.code == .interrupted ? ExitStatus.interrupted : ExitStatus(error.code)).rawValue, forKey: .exitStatus)
        }
    }
}
