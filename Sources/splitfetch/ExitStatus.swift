import CommandLineParsing
import Splitfetch

/// The command's exit statuses. Documented in the README and in `--help`.
enum ExitStatus: Int32, CaseIterable {
    case success = 0
    case failure = 1
    case usage = 2
    case network = 3
    case http = 4
    case protocolViolation = 5
    case fileIO = 6
    case outputExists = 7
    case resumeConflict = 8
    case badManifest = 9
    case remoteChanged = 10
    case sizeLimit = 11
    case interrupted = 130

    init(_ code: DownloadError.Code) {
        switch code {
        case .usage: self = .usage
        case .network: self = .network
        case .http: self = .http
        case .protocolViolation: self = .protocolViolation
        case .fileIO: self = .fileIO
        case .interrupted: self = .interrupted
        case .outputExists: self = .outputExists
        case .resumeConflict: self = .resumeConflict
        case .badManifest: self = .badManifest
        case .remoteChanged: self = .remoteChanged
        case .sizeLimit: self = .sizeLimit
        }
    }

    var meaning: String {
        switch self {
        case .success: "success: the file is complete under its final name"
        case .failure: "an unexpected error"
        case .usage: "usage error: bad option, argument or URL"
        case .network: "network error: DNS, connect, TLS, reset, timeout, too many redirects"
        case .http: "HTTP error status from the server (after retries)"
        case .protocolViolation: "range or protocol error: wrong Content-Range, ignored range, bad length"
        case .fileIO: "file I/O error: create, preallocate, write, sync or rename failed"
        case .outputExists: "the output (or its partial file) exists; --force replaces it"
        case .resumeConflict: "cannot resume: partial file without manifest, manifest for another URL, or another process on it"
        case .badManifest: "the manifest is damaged or of an unknown version (--restart discards it)"
        case .remoteChanged: "the file changed on the server since the download began (--restart starts over)"
        case .sizeLimit: "the file is larger than --max-size"
        case .interrupted: "interrupted by SIGINT or SIGTERM; run the same command to resume"
        }
    }

    /// The table for `--help`, wrapped to 80 columns.
    static var table: String {
        allCases.flatMap { helpEntry("  \($0.rawValue)", $0.meaning, column: 7) }.joined(separator: "\n")
    }
}
