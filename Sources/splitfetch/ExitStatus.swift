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
        case .interrupted: "interrupted by SIGINT or SIGTERM"
        }
    }

    static var table: String {
        allCases.map { "  \(String($0.rawValue).padding(to: 4)) \($0.meaning)" }.joined(separator: "\n")
    }
}

extension String {
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}
