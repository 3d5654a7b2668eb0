import Splitfetch

/// The command's exit statuses. Documented in the manual (Documentation/Manual/ExitStatus.md)
/// and in `--help`.
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
    case proxy = 12
    case integrity = 13
    case outputClosed = 14
    case timedOut = 15
    /// `-N`: the file, or every file of a batch, was unchanged on the server; nothing was fetched.
    case unchanged = 16
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
        case .proxy: self = .proxy
        case .integrity: self = .integrity
        case .outputClosed: self = .outputClosed
        case .timedOut: self = .timedOut
        default: self = .failure  // a code newer than this table
        }
    }

    /// The command's own hint for what the library says could be changed.
    static func hint(for remedy: DownloadError.Remedy?) -> String {
        switch remedy {
        case .restart?: " (run with --restart to start over)"
        case .allowOverwrite?: " (use --force to replace it)"
        case .allowHTTPSDowngrade?: " (--allow-https-downgrade permits it)"
        case .raiseMaximumSize?: " (raise --max-size to accept it)"
        case .proxyCredentials?: " (give them in the proxy URL: --proxy http://user:password@host:port)"
        case .resume?: "; run the same command to resume"
        case .trustHostKey?: " (if that is the server's key, add it to known_hosts, or pin it with --ssh-host-key-sha256)"
        default: ""
        }
    }

    var meaning: String {
        switch self {
        case .success: "success: the file is complete under its final name"
        case .failure: "an unexpected error"
        case .usage: "usage error: bad option, argument or URL"
        case .network: "network error: DNS, connect, TLS, reset, timeout, too many redirects"
        case .http: "the server refused: an HTTP error status, or FTP/SFTP no such file, access or login refused (after retries)"
        case .protocolViolation: "range or protocol error: wrong Content-Range, ignored range, bad length"
        case .fileIO: "file I/O error: create, preallocate, write, sync or rename failed"
        case .outputExists: "the output (or its partial file) exists; --force replaces it"
        case .resumeConflict: "cannot resume: no manifest, another URL's manifest, or another process on it"
        case .badManifest: "the manifest is damaged or of an unknown version (--restart discards it)"
        case .remoteChanged: "the file changed on the server since the download began (see --restart)"
        case .sizeLimit: "the file is larger than --max-size"
        case .proxy: "the proxy wants credentials (407) or refused the request"
        case .integrity: "the file's digest is not the expected one; nothing is kept (see --checksum)"
        case .outputClosed: "-o -: the reader of standard output exited before the end (EPIPE)"
        case .timedOut: "--max-time passed: the download stopped, its data kept; run the same command to resume"
        case .unchanged: "-N: the file (with several, every file) was unchanged on the server and kept as it was; nothing was fetched"
        case .interrupted: "interrupted by SIGINT or SIGTERM; run the same command to resume"
        }
    }

    /// The table for `--help` and the manual: one status a line.
    static var table: String {
        allCases.map { status in
            let number = String(status.rawValue)
            return "  " + number + String(repeating: " ", count: max(1, 5 - number.count)) + status.meaning
        }.joined(separator: "\n")
    }
}
