import CCurl

/// A URL as libcurl's own parser (`curl_url()`) reads it: the parser libcurl connects with, and
/// so the one that decides origins and credentials. Where a string scan and libcurl read a URL
/// differently (an `@` or `\` in the authority, an IPv6 literal, a percent-encoded `/`), a
/// decision made on the scan could send credentials to a host libcurl then connects to.
///
/// Thread safety: a value; each parse uses a handle of its own.
package struct CurlURL: Sendable, Equatable {
    /// The scheme, lowercased.
    let scheme: String
    /// The host as libcurl connects to it, lowercased; IPv6 literals in brackets.
    let host: String
    /// The port, explicit or the scheme's default.
    let port: Int
    /// The user name and password, percent-decoded, when the URL has them.
    let user: String?
    let password: String?

    /// `scheme://host:port`.
    package var origin: String { "\(scheme)://\(host):\(port)" }

    /// Parses `text`; `nil` when libcurl refuses it or it has no host.
    package init?(_ text: String) {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, text, 0) == CURLUE_OK else { return nil }
        func part(_ which: CURLUPart, _ flags: UInt32 = 0) -> String? {
            var value: UnsafeMutablePointer<CChar>?
            guard curl_url_get(handle, which, &value, flags) == CURLUE_OK, let value else { return nil }
            defer { curl_free(value) }
            return String(cString: value)
        }
        guard let scheme = part(CURLUPART_SCHEME), let host = part(CURLUPART_HOST), !host.isEmpty,
              let portText = part(CURLUPART_PORT, UInt32(CURLU_DEFAULT_PORT)), let port = Int(portText) else { return nil }
        self.scheme = scheme.lowercased()
        self.host = host.lowercased()
        self.port = port
        user = part(CURLUPART_USER, UInt32(CURLU_URLDECODE))
        password = part(CURLUPART_PASSWORD, UInt32(CURLU_URLDECODE))
    }

    /// The lowercased scheme libcurl reads in `text` (even a URL without a host, `file:///x`).
    static func scheme(of text: String) -> String? {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, text, UInt32(CURLU_NON_SUPPORT_SCHEME)) == CURLUE_OK else { return nil }
        var value: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, CURLUPART_SCHEME, &value, 0) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value).lowercased()
    }

    /// The credentials in the URL (`user:password@`), if any.
    var credentials: Credentials? {
        guard let user else { return nil }
        return Credentials(user: user, password: password ?? "")
    }

    /// `text` without its credentials, for messages, manifests and statistics; unchanged when
    /// libcurl finds none in it. A URL libcurl refuses loses everything up to its last `@` in
    /// the authority, so no secret survives in a message either way.
    static func redacting(_ text: String) -> String {
        guard let handle = curl_url() else { return text }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, text, 0) == CURLUE_OK else { return scannedRedaction(text) }
        var user: UnsafeMutablePointer<CChar>?, password: UnsafeMutablePointer<CChar>?
        let hasUser = curl_url_get(handle, CURLUPART_USER, &user, 0) == CURLUE_OK
        let hasPassword = curl_url_get(handle, CURLUPART_PASSWORD, &password, 0) == CURLUE_OK
        curl_free(user)
        curl_free(password)
        guard hasUser || hasPassword else { return text }
        curl_url_set(handle, CURLUPART_USER, nil, 0)
        curl_url_set(handle, CURLUPART_PASSWORD, nil, 0)
        var cleaned: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, CURLUPART_URL, &cleaned, 0) == CURLUE_OK, let cleaned else { return scannedRedaction(text) }
        defer { curl_free(cleaned) }
        return String(cString: cleaned)
    }

    /// For text libcurl will not parse (it is never requested): drop the authority up to its
    /// last `@`.
    private static func scannedRedaction(_ text: String) -> String {
        guard let r = text.firstRange(of: "://") else { return text }
        let rest = text[r.upperBound...]
        let authority = rest[..<(rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex)]
        guard let at = authority.lastIndex(of: "@") else { return text }
        return String(text[..<authority.startIndex]) + String(text[text.index(after: at)...])
    }
}
