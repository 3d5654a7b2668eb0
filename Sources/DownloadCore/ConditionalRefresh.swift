/// Conditional refresh (wget's `-N`, aria2's `--conditional-get`, curl's `--etag-compare`): whether
/// a file already downloaded may be asked for only if it changed, with which conditions, and
/// whether the server's answer means it did.
///
/// A pure value: the driver reads what was recorded with the file and what the file is now, asks
/// ``plan(recorded:local:)`` which conditions the first request carries, and hands the answer to
/// ``judge(status:answer:recorded:)``.
public enum ConditionalRefresh {
    /// What was recorded with a complete file when it was put in place: the server's validators
    /// and the file as it was then (so that a file changed since is never trusted).
    public struct Recorded: Sendable, Equatable, Codable {
        /// The `ETag` as the server sent it, weak (`W/"…"`) or strong.
        public var etag: String?
        /// The `Last-Modified` as the server sent it (never the local file's time).
        public var lastModified: String?
        /// The file's size and modification time (nanoseconds since 1970) when recorded.
        public var size: Int64
        public var modifiedNanoseconds: Int64

        public init(etag: String?, lastModified: String?, size: Int64, modifiedNanoseconds: Int64) {
            self.etag = etag
            self.lastModified = lastModified
            self.size = size
            self.modifiedNanoseconds = modifiedNanoseconds
        }
    }

    /// The file under the destination's name now.
    public struct Local: Sendable, Equatable {
        public var size: Int64
        public var modifiedNanoseconds: Int64

        public init(size: Int64, modifiedNanoseconds: Int64) {
            self.size = size
            self.modifiedNanoseconds = modifiedNanoseconds
        }
    }

    /// What the first request asks.
    public enum Plan: Sendable, Equatable {
        /// The file as usual: nothing is known that a condition could use.
        case unconditional(Reason)
        /// Only if changed: `If-None-Match` with the ETag, `If-Modified-Since` with the server's
        /// `Last-Modified` (each when recorded).
        case conditional(ifNoneMatch: String?, ifModifiedSince: String?)
    }

    /// Why a refresh asks for the whole file.
    public enum Reason: Sendable, Equatable {
        /// No file under the destination's name.
        case noFile
        /// A file, but nothing recorded with it (downloaded by another tool, or the record lost).
        case nothingRecorded
        /// The record holds no validator (the server sent neither `ETag` nor `Last-Modified`).
        case noValidators
        /// The file's size or modification time is not what was recorded: it was changed here.
        case changedLocally
    }

    /// The conditions for the first request.
    public static func plan(recorded: Recorded?, local: Local?) -> Plan {
        guard let local else { return .unconditional(.noFile) }
        guard let recorded else { return .unconditional(.nothingRecorded) }
        guard recorded.size == local.size, recorded.modifiedNanoseconds == local.modifiedNanoseconds else {
            return .unconditional(.changedLocally)
        }
        guard recorded.etag != nil || recorded.lastModified != nil else { return .unconditional(.noValidators) }
        return .conditional(ifNoneMatch: recorded.etag, ifModifiedSince: recorded.lastModified)
    }

    /// The server's answer to the first request: its validators and the size it states.
    public struct Answer: Sendable, Equatable {
        public var etag: String?
        public var lastModified: String?
        public var size: Int64?

        public init(etag: String?, lastModified: String?, size: Int64?) {
            self.etag = etag
            self.lastModified = lastModified
            self.size = size
        }
    }

    /// What the answer means for the file kept.
    public enum Verdict: Sendable, Equatable {
        /// `304 Not Modified`: the file is kept as it is.
        case notModified
        /// A full answer for the same file: the server ignored the conditions; kept as it is.
        case sameFileConditionsIgnored
        /// Another version (or one that cannot be shown to be the same): download it.
        case changed
    }

    /// Judges an answer to a conditional request. A full answer is taken for the same file only
    /// on proof: an equal strong ETag and size, or, with no strong ETag on either side, an equal
    /// `Last-Modified` and size. A weak ETag alone proves nothing about the bytes.
    public static func judge(status: Int, answer: Answer, recorded: Recorded) -> Verdict {
        if status == 304 { return .notModified }
        guard answer.size == recorded.size else { return .changed }
        if let ours = recorded.etag, let theirs = answer.etag, isStrong(ours), isStrong(theirs) {
            return ours == theirs ? .sameFileConditionsIgnored : .changed
        }
        if let ours = recorded.etag, let theirs = answer.etag, opaque(ours) != opaque(theirs) { return .changed }
        if let ours = recorded.lastModified, let theirs = answer.lastModified, ours == theirs { return .sameFileConditionsIgnored }
        return .changed
    }

    static func isStrong(_ etag: String) -> Bool { !etag.hasPrefix("W/") }

    /// The tag without its weakness prefix (weak comparison, RFC 9110 §8.8.3.2).
    static func opaque(_ etag: String) -> Substring {
        etag.hasPrefix("W/") ? etag.dropFirst(2) : Substring(etag)
    }
}
