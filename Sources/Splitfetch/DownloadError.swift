/// The one error type Splitfetch throws: a stable ``Code``, a message for people, and the cause.
///
/// Messages name what failed: the URL with the HTTP status or libcurl's error text, or the path
/// with the errno text. URLs in messages have any credentials removed.
public struct DownloadError: Error, Sendable, CustomStringConvertible, Equatable {
    /// The class of failure; the command-line tool maps each to a documented exit status.
    public enum Code: String, Sendable, Codable, CaseIterable {
        /// Bad options or a bad URL given by the caller.
        case usage
        /// The network failed: DNS, connect, TLS, reset, timeout, too many redirects.
        case network
        /// The server answered with an HTTP error status (4xx, 5xx) that did not clear on retry.
        case http
        /// The server broke the protocol: wrong `Content-Range`, ignored range mid-download,
        /// a body longer or shorter than announced, an encoded body, a bad length.
        case protocolViolation
        /// A local file operation failed (open, preallocate, write, rename, sync).
        case fileIO
        /// The download was interrupted (task cancelled, SIGINT, SIGTERM).
        case interrupted
        /// The output already exists and overwriting was not allowed.
        case outputExists
        /// Resuming is not possible as things are: a partial file without a manifest, a manifest
        /// for another URL or size, or another process downloading to the same file.
        case resumeConflict
        /// The manifest is damaged or from an unknown version.
        case badManifest
        /// The file on the server changed since the partial download began (ETag, Last-Modified
        /// or size); old and new bytes are never joined.
        case remoteChanged
        /// The file is larger than the caller's limit (`maximumSize`).
        case sizeLimit
    }

    /// The class of failure.
    public var code: Code
    /// A one-line human message naming the URL or path and the cause.
    public var message: String
    /// The HTTP status involved, if any.
    public var httpStatus: Int?
    /// Whether retrying the same request may succeed (used by the scheduler).
    public var isTransient: Bool
    /// The total size a `206` named when it disagreed with the probed size.
    var observedTotal: Int64?

    public init(_ code: Code, _ message: String, httpStatus: Int? = nil, isTransient: Bool = false) {
        self.code = code
        self.message = message
        self.httpStatus = httpStatus
        self.isTransient = isTransient
    }

    public var description: String { message }
}
