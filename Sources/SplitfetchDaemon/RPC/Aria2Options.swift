public import Splitfetch
public import SystemPackage

/// An error answered to a JSON-RPC call, as aria2 answers it: `{"code": 1, "message": …}` for a
/// refused call, the JSON-RPC codes for a malformed one.
public struct RPCError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: Int
    public var message: String

    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    static func invalidParams(_ message: String) -> RPCError { RPCError(code: 1, message: message) }
    static func failed(_ message: String) -> RPCError { RPCError(code: 1, message: message) }
    static func forbidden(_ message: String) -> RPCError { RPCError(code: 1, message: message) }
    static func notFound(_ gid: String) -> RPCError { RPCError(code: 1, message: "GID \(gid.prefix(32)) is not found") }
    static let unauthorized = RPCError(code: 1, message: "Unauthorized")
    static let parseError = RPCError(code: -32700, message: "Parse error.")
    static func invalidRequest(_ detail: String) -> RPCError { RPCError(code: -32600, message: "Invalid Request: \(detail)") }
    static func methodNotFound(_ name: String) -> RPCError {
        RPCError(code: -32601, message: "The method \"\(name.prefix(64))\" was not found.")
    }
}

/// aria2's options, mapped onto Splitfetch's where it has the concept.
///
/// - Mapped: `dir`, `out`, `split`, `max-connection-per-server`, `min-split-size`, `checksum`,
///   `header`, `referer`, `user-agent`, `all-proxy`, `max-download-limit`, `max-tries`,
///   `retry-wait`, `connect-timeout`, `timeout`, `pause`, `conditional-get` (a refresh, with
///   `ETag` as well as the date), `remote-time`; Splitfetch's own `priority` and
///   `content-disposition`; globally also
///   `max-overall-download-limit` and `max-concurrent-downloads`.
/// - Ignored (``ignored``), because Splitfetch always does what they ask or they concern
///   BitTorrent and Metalink.
/// - Refused (``daemonOnly``): anything that runs a command or names a file outside the download
///   root, settable only in the daemon's own configuration.
/// - Anything else: refused as unsupported, so that a typo is never silently dropped.
public enum Aria2Options {
    /// What a set of options means for one download.
    public struct Parsed: Sendable {
        public var options: DownloadOptions
        /// `dir`, resolved and created inside the root.
        public var dir: FilePath?
        public var out: String?
        public var paused = false
        public var bytesPerSecond: Int64?
        /// `priority` (Splitfetch's own): higher starts first.
        public var priority = 0
        /// The options as they are reported back (`getOption`).
        public var reported: [String: String] = [:]
    }

    /// Options accepted and ignored: Splitfetch already behaves so, or they are BitTorrent's.
    static let ignored: Set<String> = [
        "allow-overwrite", "auto-file-renaming", "continue", "always-resume", "file-allocation",
        "lowest-speed-limit", "max-file-not-found", "piece-length", "stream-piece-selector", "uri-selector",
        "http-accept-gzip", "enable-http-keep-alive", "enable-http-pipelining", "parameterized-uri",
        "realtime-chunk-checksum", "check-integrity", "follow-torrent", "follow-metalink", "seed-time", "seed-ratio",
        "max-resume-failure-tries", "proxy-method", "reuse-uri", "no-want-digest-header", "hash-check-only",
        "max-upload-limit", "async-dns", "disk-cache", "check-certificate",
    ]

    /// Options that run commands or name files outside the download root: the daemon's own
    /// configuration sets them, never the API.
    static func isDaemonOnly(_ name: String) -> Bool {
        name.hasPrefix("on-") || name.hasPrefix("rpc-") || name.hasSuffix("-file") || name.hasSuffix("-path")
            || ["log", "log-level", "save-session", "save-session-interval", "load-cookies", "save-cookies", "input-file",
                "conf-path", "certificate", "private-key", "ca-certificate", "interface", "multiple-interface",
                "enable-rpc", "daemon", "stop-with-process", "netrc-path", "server-stat-of", "server-stat-if",
                "dht-file-path", "quiet", "console-log-level", "summary-interval", "stop", "truncate-console-readout"]
            .contains(name)
    }

    /// Reads `values` onto `base`.
    ///
    /// - Parameter resolvingPaths: resolve `dir` (made inside the root) and `out`; `false` when
    ///   the job's file is already decided and only the other options are wanted.
    /// - Throws: ``RPCError`` naming the first option that is refused or malformed.
    public static func parse(_ values: [String: String], base: DownloadOptions, root: DownloadRoot,
                             resolvingPaths: Bool) throws(RPCError) -> Parsed {
        var parsed = Parsed(options: base)
        var split: Int?, perServer: Int?
        for (name, value) in values.sorted(by: { $0.key < $1.key }) {
            if isDaemonOnly(name) {
                throw RPCError.forbidden("option \(name) can only be set in the daemon's configuration, not through the API")
            }
            switch name {
            case "dir":
                if resolvingPaths { parsed.dir = try root.directory(value) }
            case "out":
                guard !value.isEmpty else { throw RPCError.invalidParams("out is empty") }
                parsed.out = value
            case "split":
                split = try count(name, value, in: 1...64)
            case "max-connection-per-server":
                perServer = try count(name, value, in: 1...64)
            case "min-split-size":
                parsed.options.minimumSegmentSize = try size(name, value, atLeast: 1 << 20)
            case "checksum":
                do {
                    parsed.options.integrity.expectedDigests.append(try ExpectedDigest(parsing: value))
                } catch {
                    throw RPCError.invalidParams("checksum: \(error.message)")
                }
            case "header":
                for line in value.split(separator: "\n") where !line.isEmpty {
                    guard let header = HTTPHeader(line: String(line)) else {
                        throw RPCError.invalidParams("header \"\(line.prefix(60))\" is not of the form \"Name: value\"")
                    }
                    parsed.options.headers.append(header)
                }
            case "referer":
                parsed.options.headers.append(HTTPHeader("Referer", value))
            case "user-agent":
                parsed.options.userAgent = value
            case "all-proxy", "http-proxy", "https-proxy":
                parsed.options.proxy.url = value.isEmpty ? nil : value
            case "max-download-limit":
                let rate = try size(name, value, atLeast: 0)
                parsed.bytesPerSecond = rate == 0 ? nil : rate
            case "max-tries":
                let tries = try count(name, value, in: 0...1000)
                parsed.options.retry.maximumRetries = tries == 0 ? 1000 : tries - 1
            case "retry-wait":
                parsed.options.retry.baseDelay = .seconds(try count(name, value, in: 0...600))
            case "connect-timeout":
                parsed.options.timeouts.connect = .seconds(try count(name, value, in: 1...600))
            case "timeout":
                parsed.options.timeouts.stall = .seconds(try count(name, value, in: 1...600))
            case "pause":
                parsed.paused = try flag(name, value)
            case "priority":
                // Splitfetch's own: aria2 orders its queue by position alone.
                parsed.priority = try count(name, value, in: -1000...1000)
            case "conditional-get":
                // A refresh: a job for a file already there asks for it only if it changed,
                // with the validators the daemon recorded when it downloaded it (or else those
                // kept with the file), and replaces it only when a new version is complete.
                parsed.options.refresh = try flag(name, value)
            case "remote-time":
                parsed.options.remoteTime = try flag(name, value)
            case "content-disposition":
                // Splitfetch's own: name the file from the server's Content-Disposition (a safe
                // base name in the same directory), unless `out` names it.
                parsed.options.useContentDisposition = try flag(name, value)
            case "gid":
                throw RPCError.invalidParams("option gid is not supported: the daemon gives each download its GID")
            case _ where ignored.contains(name) || name.hasPrefix("bt-") || name.hasPrefix("metalink-"):
                break
            default:
                throw RPCError.invalidParams("option \(name.prefix(64)) is not supported")
            }
            parsed.reported[name] = value
        }
        if parsed.out != nil { parsed.options.useContentDisposition = false }
        if split != nil || perServer != nil {
            parsed.options.connections = min(split ?? 64, perServer ?? 64)
        }
        return parsed
    }

    static func flag(_ name: String, _ value: String) throws(RPCError) -> Bool {
        guard value == "true" || value == "false" else { throw RPCError.invalidParams("\(name) must be true or false") }
        return value == "true"
    }

    public static func count(_ name: String, _ value: String, in range: ClosedRange<Int>) throws(RPCError) -> Int {
        guard let number = Int(value), range.contains(number) else {
            throw RPCError.invalidParams("\(name) must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// A byte count as aria2 writes it: digits, optionally followed by `K` or `M` (1024-based).
    public static func size(_ name: String, _ value: String, atLeast minimum: Int64) throws(RPCError) -> Int64 {
        var digits = Substring(value)
        var unit: Int64 = 1
        if let last = digits.last, "KkMm".contains(last) {
            unit = "Kk".contains(last) ? 1024 : 1024 * 1024
            digits = digits.dropLast()
        }
        guard let number = Int64(digits), number >= 0, number <= Int64.max / unit, number * unit >= minimum || number == 0 else {
            throw RPCError.invalidParams("\(name) must be a size such as 1048576, 512K or 8M\(minimum > 0 ? " (at least \(minimum))" : "")")
        }
        return number * unit
    }
}
