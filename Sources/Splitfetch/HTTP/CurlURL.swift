import CCurl
import PercentEncoding
import NIOConcurrencyHelpers

/// A URL as libcurl's own parser (`curl_url()`) reads it: the parser libcurl connects with, and
/// so the one that decides origins and credentials. Where a string scan and libcurl read a URL
/// differently (an `@` or `\` in the authority, an IPv6 literal, a percent-encoded `/`), a
/// decision made on the scan could send credentials to a host libcurl then connects to.
///
/// Thread safety: a value; each parse uses a handle of its own, and the recent parses kept
/// (``ParseMemo``) are behind a lock.
package struct CurlURL: Sendable, Equatable {
    /// The scheme, lowercased.
    let scheme: String
    /// The host as libcurl connects to it, lowercased; IPv6 literals in brackets.
    let host: String
    /// The port, explicit or the scheme's default.
    let port: Int
    /// The path, as sent (percent-encoded); `/` at least.
    let path: String
    /// The user name and password, percent-decoded, when the URL has them.
    let user: String?
    let password: String?

    /// `scheme://host:port`.
    package var origin: String { "\(scheme)://\(host):\(port)" }

    /// Parses `text`; `nil` when libcurl refuses it or it has no host.
    package init?(_ text: String) {
        guard let parsed = Self.remembered(text, \.parsed, Self.parse) else { return nil }
        self = parsed
    }

    private init(scheme: String, host: String, port: Int, path: String, user: String?, password: String?) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
        self.user = user
        self.password = password
    }

    /// libcurl's parse of `text` (``init(_:)`` without the memo).
    static func parse(_ text: String) -> CurlURL? {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, text, 0) == CURLUE_OK else { return nil }
        guard let scheme = part(handle, CURLUPART_SCHEME), let host = part(handle, CURLUPART_HOST), !host.isEmpty,
              let portText = part(handle, CURLUPART_PORT, UInt32(CURLU_DEFAULT_PORT)), let port = Int(portText) else { return nil }
        return CurlURL(scheme: scheme.lowercased(), host: host.lowercased(), port: port, path: part(handle, CURLUPART_PATH) ?? "/",
                       user: part(handle, CURLUPART_USER, UInt32(CURLU_URLDECODE)),
                       password: part(handle, CURLUPART_PASSWORD, UInt32(CURLU_URLDECODE)))
    }

    /// The lowercased scheme libcurl reads in `text` (even a URL without a host, `file:///x`).
    static func scheme(of text: String) -> String? {
        remembered(text, \.scheme, parseScheme)
    }

    /// libcurl's reading of the scheme in `text` (``scheme(of:)`` without the memo).
    static func parseScheme(_ text: String) -> String? {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, text, UInt32(CURLU_NON_SUPPORT_SCHEME)) == CURLUE_OK else { return nil }
        return part(handle, CURLUPART_SCHEME)?.lowercased()
    }

    /// A `Location` value resolved against the URL of the request it answered, as libcurl
    /// resolves one when it follows a redirect itself (relative references, spaces and non-ASCII
    /// bytes percent-encoded); `nil` when libcurl refuses either.
    static func resolving(_ location: String, against base: String) -> String? {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, base, 0) == CURLUE_OK,
              curl_url_set(handle, CURLUPART_URL, location, UInt32(CURLU_URLENCODE | CURLU_ALLOW_SPACE)) == CURLUE_OK else { return nil }
        return part(handle, CURLUPART_URL)
    }

    /// The credentials in the URL (`user:password@`), if any.
    var credentials: Credentials? {
        guard let user else { return nil }
        return Credentials(user: user, password: password ?? "")
    }

    /// `text` without its credentials, for messages, manifests and statistics: no user name or
    /// password, and the values of query parameters that carry a signature or a token (presigned
    /// S3, GCS and Azure URLs) replaced by `REDACTED`. Unchanged when libcurl finds none. A URL
    /// libcurl refuses loses everything up to its last `@` in the authority, so no secret
    /// survives in a message either way.
    static func redacting(_ text: String) -> String {
        rewritten(text, redactingQuery: true)
    }

    /// `text` without a user name or password, and otherwise as it is: the URL to request, its
    /// credentials going separately to its origin only. A query's signature stays, since the
    /// server needs it.
    static func removingUserinfo(_ text: String) -> String {
        rewritten(text, redactingQuery: false)
    }

    private static func rewritten(_ text: String, redactingQuery: Bool) -> String {
        // Without an `@` there is no user information, and without a `?` no query: nothing to
        // take out, whether libcurl parses the text or not (``scannedRedaction(_:)`` keeps it too).
        mayCarrySecret(text) ? rewrite(text, redactingQuery: redactingQuery) : text
    }

    /// libcurl's reading of `text`, rewritten (``redacting(_:)`` and ``removingUserinfo(_:)``
    /// without their shortcut).
    static func rewrite(_ text: String, redactingQuery: Bool) -> String {
        guard let handle = curl_url() else { return text }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, text, 0) == CURLUE_OK else { return scannedRedaction(text) }
        let user = part(handle, CURLUPART_USER), password = part(handle, CURLUPART_PASSWORD)
        let query = part(handle, CURLUPART_QUERY)
        let redactedQuery = redactingQuery ? query.map(redactingQuery(_:)) : query
        guard user != nil || password != nil || redactedQuery != query else { return text }
        curl_url_set(handle, CURLUPART_USER, nil, 0)
        curl_url_set(handle, CURLUPART_PASSWORD, nil, 0)
        if let redactedQuery { curl_url_set(handle, CURLUPART_QUERY, redactedQuery, 0) }
        return part(handle, CURLUPART_URL) ?? scannedRedaction(text)
    }

    /// One part of a parsed URL, as libcurl gives it (still percent-encoded).
    private static func part(_ handle: OpaquePointer, _ which: CURLUPart, _ flags: UInt32 = 0) -> String? {
        var value: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, which, &value, flags) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value)
    }

    /// Whether a query parameter's name says its value is a secret: `X-Amz-Signature`,
    /// `X-Amz-Credential`, `X-Amz-Security-Token`, `X-Goog-Signature`, Azure's `sig`,
    /// `access_token`, `api_key` and the like.
    static func isCredentialParameter(_ name: String) -> Bool {
        let name = percentDecoded(Substring(name)).lowercased()
        let suffixes = ["signature", "credential", "token", "secret", "password"]
        return suffixes.contains { name.hasSuffix($0) } || ["sig", "api_key", "apikey", "key", "passwd", "auth"].contains(name)
    }

    /// A query with the values of credential parameters replaced by `REDACTED`.
    static func redactingQuery(_ query: String) -> String {
        query.split(separator: "&", omittingEmptySubsequences: false).map { pair in
            guard let equals = pair.firstIndex(of: "="), isCredentialParameter(String(pair[..<equals])) else { return String(pair) }
            return pair[..<equals] + "=REDACTED"
        }.joined(separator: "&")
    }

    /// For text libcurl will not parse (it is never requested): drop the authority up to its
    /// last `@`, and redact the query's secrets as ``redactingQuery(_:)`` does.
    private static func scannedRedaction(_ text: String) -> String {
        var result = text
        if let r = text.firstRange(of: "://") {
            let rest = text[r.upperBound...]
            let authority = rest[..<(rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex)]
            if let at = authority.lastIndex(of: "@") {
                result = String(text[..<authority.startIndex]) + String(text[text.index(after: at)...])
            }
        }
        guard let question = result.firstIndex(of: "?") else { return result }
        let end = result[question...].firstIndex(of: "#") ?? result.endIndex
        let query = String(result[result.index(after: question)..<end])
        return String(result[...question]) + redactingQuery(query) + String(result[end...])
    }
}

/// What libcurl's parser said about the URLs asked of it lately.
///
/// A download asks about its URL again and again on its way to the first request: its scheme
/// (supported? FTP?), its host (the per-host cap), its parts (the request's policy). Each parse
/// by libcurl costs a few microseconds and allocations; for a list of small files the same URL's
/// parses were about 5 % of the CPU (`perf record --call-graph dwarf` of 2,000 unchanged files on
/// loopback). Every answer is a pure function of the text, so the last few hundred are kept, then
/// forgotten all at once.
///
/// A text that may carry a secret (user information, or a query that may be signed) is never
/// kept: it is parsed each time, as before.
///
/// Thread safety: behind a lock; libcurl's parses run outside it. The lock is NIO's (a
/// `pthread_mutex`, whose ordering ThreadSanitizer sees), as elsewhere in the library: under the
/// standard library's `Mutex`, a full run under ThreadSanitizer reported two of the memo's locked
/// accesses as a race.
fileprivate struct ParseMemo: Sendable {
    struct Entry {
        /// Outer `nil`: not asked yet.
        var parsed: CurlURL??
        var scheme: String??
    }

    /// The most texts kept before they are all forgotten.
    static let capacity = 256

    var entries: [String: Entry] = [:]
}

private let recentParses = NIOLockedValueBox(ParseMemo())

extension CurlURL {
    /// `field` of `text`'s entry in the memo, computed by `compute` (outside the lock) when it is
    /// not there.
    fileprivate static func remembered<T: Sendable>(_ text: String, _ field: WritableKeyPath<ParseMemo.Entry, T?>,
                                                    _ compute: (String) -> T) -> T {
        guard !mayCarrySecret(text) else { return compute(text) }
        if let known = recentParses.withLockedValue({ $0.entries[text]?[keyPath: field] }) { return known }
        let value = compute(text)
        recentParses.withLockedValue { memo in
            if memo.entries[text] == nil && memo.entries.count >= ParseMemo.capacity { memo.entries.removeAll(keepingCapacity: true) }
            memo.entries[text, default: ParseMemo.Entry()][keyPath: field] = value
        }
        return value
    }

    /// Whether `text` has an `@` (user information) or a `?` (a query, perhaps signed). Without
    /// either it carries no credentials, and redacting it leaves it as it is.
    static func mayCarrySecret(_ text: String) -> Bool {
        text.utf8.contains { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "?") }
    }

    /// Whether `text` has an entry in the memo now (for tests).
    static func isRemembered(_ text: String) -> Bool {
        recentParses.withLockedValue { $0.entries[text] != nil }
    }
}
