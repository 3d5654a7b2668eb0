public import SystemPackage

/// Cookies read from a Netscape cookie file (`--load-cookies`, the format curl, wget, aria2 and
/// browser exporters write), and the `Cookie` field each request gets from them.
///
/// A cookie goes to a request when its domain, path, `secure` flag and expiry match (RFC 6265
/// §5.4), and only to the origin of the URL the caller gave: the request policy leaves it off a
/// redirect target or a mirror elsewhere, even one the cookie's domain would cover.
///
/// The matching is done here rather than by libcurl's cookie engine: an easy handle keeps the
/// cookies it loaded across `curl_easy_reset`, and handles are reused for other origins.
///
/// Thread safety: a value.
public struct CookieJar: Sendable, Equatable {
    public struct Cookie: Sendable, Equatable {
        /// The domain, lowercased, without a leading dot.
        public var domain: String
        /// Whether subdomains of ``domain`` get it too (the file's second field).
        public var includesSubdomains: Bool
        public var path: String
        /// Only over `https`.
        public var secure: Bool
        /// Seconds since 1970 after which it is not sent; `nil` for a session cookie (0 in the file).
        public var expires: Int64?
        public var name: String
        public var value: String
    }

    public private(set) var cookies: [Cookie]

    /// The largest cookie file read.
    public static let maximumSize = 4 << 20

    /// Parses the text of a Netscape cookie file. Comments and blank lines are skipped, and so
    /// are lines that are not seven (or six, without a value) tab-separated fields; the
    /// `#HttpOnly_` prefix is read as part of the domain's line.
    public init(netscapeText text: String) {
        var cookies: [Cookie] = []
        for raw in text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            var line = Substring(raw)
            if line.last == "\r" { line = line.dropLast() }
            if line.hasPrefix("#HttpOnly_") {
                line = line.dropFirst("#HttpOnly_".count)
            } else if line.hasPrefix("#") || line.allSatisfy({ $0 == " " || $0 == "\t" }) {
                continue
            }
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 7 || fields.count == 6, !fields[0].isEmpty, !fields[5].isEmpty,
                  let expires = Int64(fields[4]) else { continue }
            var domain = fields[0].lowercased()
            let leadingDot = domain.hasPrefix(".")
            if leadingDot { domain.removeFirst() }
            cookies.append(Cookie(domain: domain, includesSubdomains: fields[1].uppercased() == "TRUE" || leadingDot,
                                  path: fields[2].isEmpty ? "/" : fields[2], secure: fields[3].uppercased() == "TRUE",
                                  expires: expires == 0 ? nil : expires, name: fields[5],
                                  value: fields.count == 7 ? fields[6] : ""))
        }
        self.cookies = cookies
    }

    /// Reads a Netscape cookie file.
    ///
    /// - Throws: ``DownloadError`` with code ``DownloadError/Code/usage`` when the file cannot be
    ///   read or is larger than ``maximumSize``.
    public init(contentsOf path: FilePath) throws(DownloadError) {
        let bytes: [UInt8]?
        do throws(Errno) {
            bytes = try FileSystem.readAll(path.string, limit: Self.maximumSize, followingLinks: true)
        } catch .fileTooLarge {
            throw DownloadError(.usage, "cookie file \(path) is larger than \(Self.maximumSize >> 20) MiB")
        } catch {
            throw DownloadError(.usage, "cannot read cookie file \(path): \(error.description)")
        }
        guard let bytes else { throw DownloadError(.usage, "cookie file \(path) does not exist") }
        self.init(netscapeText: String(decoding: bytes, as: UTF8.self))
    }

    /// Reads a Netscape cookie file on the I/O threads, off Swift's cooperative pool.
    ///
    /// - Throws: as ``init(contentsOf:)``.
    public static func load(_ path: FilePath) async throws(DownloadError) -> CookieJar {
        try await IOQueue().run { () throws(DownloadError) -> CookieJar in try CookieJar(contentsOf: path) }
    }

    /// The `Cookie` field's value for a request over `scheme` to `host` and `path` at `now`
    /// (seconds since 1970): the matching cookies, longest path first; `nil` when none match.
    public func fieldValue(scheme: String, host: String, path: String, now: Int64) -> String? {
        let host = host.lowercased()
        let path = path.isEmpty ? "/" : path
        let matching = cookies.enumerated().filter { _, cookie in
            Self.domainMatches(host: host, cookie: cookie) && Self.pathMatches(path, cookiePath: cookie.path)
                && (!cookie.secure || scheme.lowercased() == "https") && (cookie.expires.map { $0 > now } ?? true)
        }
        guard !matching.isEmpty else { return nil }
        // Longer paths first; among equal ones, the file's order.
        let ordered = matching.sorted { ($0.element.path.count, -$0.offset) > ($1.element.path.count, -$1.offset) }
        return ordered.map { "\($0.element.name)=\($0.element.value)" }.joined(separator: "; ")
    }

    static func domainMatches(host: String, cookie: Cookie) -> Bool {
        if host == cookie.domain { return true }
        // A subdomain match needs a name: an IP address matches only itself.
        guard cookie.includesSubdomains, !host.hasPrefix("["), !host.allSatisfy({ $0.isNumber || $0 == "." }) else { return false }
        return host.hasSuffix("." + cookie.domain)
    }

    /// RFC 6265 §5.1.4.
    static func pathMatches(_ path: String, cookiePath: String) -> Bool {
        if path == cookiePath { return true }
        guard path.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || path.dropFirst(cookiePath.count).hasPrefix("/")
    }
}
