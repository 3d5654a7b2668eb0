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
            var line = EventLine(event: "", download: download, elapsed: elapsed)
            line.fill(from: event)
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

/// One line of `--events`: the fields every line has, and those of its kind. Optional fields
/// left `nil` are not written.
struct EventLine: Encodable {
    struct Failure: Encodable {
        var code: String
        var message: String
        var httpStatus: Int?
        init(_ error: DownloadError) {
            code = error.code.description
            message = error.message
            httpStatus = error.httpStatus
        }
    }

    struct Connection: Encodable {
        var id: Int
        var state: String
        var bytes: Int64
        var bytesPerSecond: Double
        var range: [Int64]?
        /// The source it fetches from, with mirrors (absent without).
        var source: Int?
    }

    let schema = EventLog.schema
    var event: String
    var download: Int
    var elapsed: Double
    // probed
    var url: String?
    var finalURL: String?
    var size: Int64?
    var acceptsRanges: Bool?
    var etag: String?
    var lastModified: String?
    // started
    var mode: String?
    var connectionCount: Int?
    // progress
    var bytes: Int64?
    var total: Int64?
    var bytesPerSecond: Double?
    var connections: [Connection]?
    // retry, split
    var connection: Int?
    var delay: Double?
    var range: [Int64]?
    // probed: the mirrors the server announced
    var mirrors: [String]?
    // connectionsReduced, warning
    var to: Int?
    var reason: String?
    var message: String?
    // finished, failed
    var statistics: DownloadStatistics?
    var error: Failure?
    var exitStatus: Int32?

    mutating func fill(from event: DownloadEvent) {
        switch event {
        case .probed(let resource):
            self.event = "probed"
            (url, finalURL, size, acceptsRanges) = (resource.url, resource.finalURL, resource.size, resource.acceptsRanges)
            (etag, lastModified) = (resource.etag, resource.lastModified)
            mirrors = resource.mirrors.isEmpty ? nil : resource.mirrors
        case .started(let mode, let connections, let size):
            self.event = "started"
            (self.mode, connectionCount, self.size) = (mode.rawValue, connections, size)
        case .progress(let progress):
            self.event = "progress"
            (bytes, total, bytesPerSecond) = (progress.bytesWritten, progress.totalBytes, progress.bytesPerSecond)
            connections = progress.connections.map { c in
                Connection(id: c.id, state: Self.name(of: c.state), bytes: c.bytes, bytesPerSecond: c.bytesPerSecond,
                           range: c.range.map { [$0.lowerBound, $0.upperBound] }, source: c.source)
            }
        case .retrying(let connection, let error, let delay):
            self.event = "retry"
            (self.connection, self.delay, self.error) = (connection, delay.seconds, Failure(error))
        case .split(let connection, let range):
            self.event = "split"
            (self.connection, self.range) = (connection, [range.lowerBound, range.upperBound])
        case .connectionsReduced(let to, let reason):
            self.event = "connectionsReduced"
            (self.to, self.reason) = (to, reason)
        case .warning(let text):
            self.event = "warning"
            message = text
        case .sourceDropped(let url, let error):
            self.event = "sourceDropped"
            (self.url, self.error) = (url, Failure(error))
        case .finished(let statistics):
            self.event = "finished"
            self.statistics = statistics
        case .failed(let error):
            self.event = "failed"
            self.error = Failure(error)
            exitStatus = (error.code == .interrupted ? ExitStatus.interrupted : ExitStatus(error.code)).rawValue
        }
    }

    static func name(of state: ConnectionProgress.State) -> String {
        switch state {
        case .idle: "idle"
        case .receiving: "receiving"
        case .waitingToRetry: "waitingToRetry"
        case .done: "done"
        }
    }
}
