import DownloadCore

/// The one error type Splitfetch throws: a stable ``Code``, a message for people, and the cause.
///
/// Messages name what failed: the URL with the HTTP status or libcurl's error text, or the path
/// with the errno text. URLs in messages have any credentials removed. Messages name no
/// command-line options; ``remedy`` says what the caller could change, in the library's terms, so
/// a tool can add its own hint.
///
/// Thread safety: a `Sendable` value.
public struct DownloadError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The class of failure; the command-line tool maps each to a documented exit status.
    ///
    /// A struct with static members rather than an enum, as async-http-client's `HTTPClientError`
    /// does, so that codes can be added without breaking a caller's exhaustive `switch`: match the
    /// codes you handle and keep a `default`.
    public struct Code: Hashable, Sendable, Codable, CustomStringConvertible {
        private enum Base: String, Codable {
            case usage, network, http, protocolViolation, fileIO, interrupted, outputExists, resumeConflict,
                 badManifest, remoteChanged, sizeLimit, proxy, integrity, outputClosed, timedOut
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Bad options or a bad URL given by the caller.
        public static let usage = Code(.usage)
        /// The network failed: DNS, connect, TLS, reset, timeout, too many redirects.
        public static let network = Code(.network)
        /// The server refused the request, and a retry did not change that: an HTTP error
        /// status (4xx, 5xx), or an FTP or SFTP refusal (no such file, permission denied, login
        /// refused).
        public static let http = Code(.http)
        /// The server broke the protocol: wrong `Content-Range`, ignored range mid-download,
        /// a body longer or shorter than announced, an encoded body, a bad length.
        public static let protocolViolation = Code(.protocolViolation)
        /// A local file operation failed (open, preallocate, write, rename, sync).
        public static let fileIO = Code(.fileIO)
        /// The download was interrupted (task cancelled, SIGINT, SIGTERM).
        public static let interrupted = Code(.interrupted)
        /// The output already exists and overwriting was not allowed.
        public static let outputExists = Code(.outputExists)
        /// Resuming is not possible as things are: a partial file without a manifest, a manifest
        /// for another URL or size, or another process downloading to the same file.
        public static let resumeConflict = Code(.resumeConflict)
        /// The manifest is damaged or from an unknown version.
        public static let badManifest = Code(.badManifest)
        /// The file on the server changed since the partial download began (ETag, Last-Modified
        /// or size); old and new bytes are never joined.
        public static let remoteChanged = Code(.remoteChanged)
        /// The file is larger than the caller's limit (`maximumSize`).
        public static let sizeLimit = Code(.sizeLimit)
        /// The proxy refused the request: it wants credentials (407) or would not connect. Over
        /// `http` and `https` alike; the message names the proxy, not the origin.
        public static let proxy = Code(.proxy)
        /// Every byte arrived, but the file's digest is not the one expected (given by the caller
        /// or stated by the server). Nothing is put under the final name; the data is discarded.
        public static let integrity = Code(.integrity)
        /// The reader of a download read in order went away before the end: the pipe's reader
        /// exited (`EPIPE`), or the `AsyncSequence`'s consumer stopped iterating.
        public static let outputClosed = Code(.outputClosed)
        /// The download took longer than ``DownloadOptions/maximumTime`` and was stopped, as a
        /// cancellation stops it: a segmented download's data and manifest are kept for a rerun.
        public static let timedOut = Code(.timedOut)

        /// A stable name: `usage`, `network`, `http`, …
        public var description: String { base.rawValue }

        /// Encoded as its stable name (`"network"`).
        public init(from decoder: any Decoder) throws { base = try Base(from: decoder) }
        public func encode(to encoder: any Encoder) throws { try base.encode(to: encoder) }
    }

    /// What the caller could change so that the same download may succeed.
    public struct Remedy: Hashable, Sendable, CustomStringConvertible {
        private enum Base: String { case restart, allowOverwrite, allowHTTPSDowngrade, raiseMaximumSize, proxyCredentials, resume, trustHostKey }
        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// Discard the partial data and start over (``DownloadOptions/restart``).
        public static let restart = Remedy(.restart)
        /// Replace the existing output (``DownloadOptions/allowOverwrite``).
        public static let allowOverwrite = Remedy(.allowOverwrite)
        /// Follow redirects from https to http (``DownloadOptions/allowHTTPSDowngrade``).
        public static let allowHTTPSDowngrade = Remedy(.allowHTTPSDowngrade)
        /// Accept a larger file (``DownloadOptions/maximumSize``).
        public static let raiseMaximumSize = Remedy(.raiseMaximumSize)
        /// Give the proxy's user name and password (in its URL).
        public static let proxyCredentials = Remedy(.proxyCredentials)
        /// Run the same download again: its data is kept, and it resumes where it stopped.
        public static let resume = Remedy(.resume)
        /// If the SFTP server's host key (its fingerprint is in the message) is the right one,
        /// add it to `known_hosts` or pin it (``DownloadOptions/FileTransfer-swift.struct/hostKeySHA256``).
        public static let trustHostKey = Remedy(.trustHostKey)

        public var description: String { base.rawValue }
    }

    /// The class of failure.
    public var code: Code
    /// A one-line human message naming the URL or path and the cause.
    public var message: String
    /// The HTTP status involved, if any.
    public var httpStatus: Int?
    /// What went wrong, as the core classifies it (`nil`: the HTTP status's, or not worth a
    /// retry). Set where the failure is seen; judged only by the core.
    var kind: FailureKind?
    /// Whether retrying the same request may succeed: the download core's table
    /// (`RetryPolicy.isTransient`) applied to what went wrong.
    public var isTransient: Bool { RetryPolicy.isTransient(failure.kind) }
    /// What the caller could change, when there is something.
    public var remedy: Remedy?
    /// The total size a `206` named when it disagreed with the probed size.
    var observedTotal: Int64?
    /// The server's `Retry-After`, when the response had one.
    var retryAfter: RetryAfter?
    /// A server answered a request with `If-Range` by the whole file although the validators
    /// still match: ask again without `If-Range`.
    var ignoredIfRange = false

    public init(_ code: Code, _ message: String, httpStatus: Int? = nil, remedy: Remedy? = nil) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.remedy = remedy
    }

    /// An error whose failure `kind` the core judges.
    init(_ code: Code, _ message: String, httpStatus: Int? = nil, kind: FailureKind) {
        self.init(code, message, httpStatus: httpStatus)
        self.kind = kind
    }

    public var description: String { message }
}

extension DownloadError {
    /// The same error, saying that `retries` retries did not clear it.
    func givenUp(after retries: Int) -> DownloadError {
        DownloadError(code, "\(message) (gave up after \(retries) retries)", httpStatus: httpStatus)
    }

    /// What the download core needs to know about this error to decide on a retry.
    var failure: DownloadMachine.TransferFailure {
        DownloadMachine.TransferFailure(httpStatus: httpStatus, kind: kind ?? httpStatus.map { .http($0) } ?? .fatal, retryAfter: retryAfter,
                                        observedTotal: observedTotal, ignoredIfRange: ignoredIfRange)
    }
}

extension DownloadError {
    /// The proxy answered `status` (to a request, or to `CONNECT` for `https`). Named by
    /// ``naming(proxy:)`` once the download knows which proxy it used.
    static func proxyRefused(_ status: Int) -> DownloadError {
        let what = status == 407 ? "requires authentication (HTTP 407 Proxy Authentication Required)" : "refused the request (HTTP \(status))"
        var error = DownloadError(.proxy, "the proxy \(what)", httpStatus: status)
        error.remedy = status == 407 ? .proxyCredentials : nil
        return error
    }

    /// A proxy error that says which proxy: the one given (credentials removed), or the one in
    /// libcurl's environment variables.
    func naming(proxy: String?) -> DownloadError {
        guard code == .proxy else { return self }
        var named = self
        let name = proxy.map { "proxy \(redactedURL($0))" } ?? "the proxy from the environment (https_proxy, http_proxy or all_proxy)"
        named.message = message.replacingFirst("the proxy", with: name)
        return named
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let range = firstRange(of: target) else { return self }
        return self[..<range.lowerBound] + replacement + self[range.upperBound...]
    }
}
