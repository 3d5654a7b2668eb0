package import DownloadCore

#if canImport(Glibc)
import Glibc
#endif

/// What each request may carry. Credentials (from the URL's `user:password@` or the options) and
/// the headers `Authorization`, `Cookie` and `Proxy-Authorization` go only to the origin — scheme,
/// host and port — of the URL the caller gave; never to a redirect target or mirror elsewhere.
/// Origins are read by libcurl's own parser (``CurlURL``), the one it connects with.
package struct RequestPolicy: Sendable {
    /// Header names that carry secrets.
    static let sensitiveHeaders: Set<String> = ["authorization", "cookie", "proxy-authorization"]

    /// The caller's URL without its user name and password: what is requested. Messages show
    /// ``redactedURL(_:)`` of it, which also hides signatures and tokens in the query.
    let url: String
    let origin: String?
    let credentials: Credentials?
    let options: DownloadOptions

    package init(url rawURL: String, options: DownloadOptions) {
        self.url = CurlURL.removingUserinfo(rawURL)
        let parsed = CurlURL(rawURL)
        self.origin = parsed?.origin
        self.options = options
        self.credentials = options.credentials ?? parsed?.credentials
    }

    /// A request to `target` with what the policy allows there.
    package func request(_ target: String, method: TransferRequest.Method = .get, range: ByteRange? = nil) -> TransferRequest {
        var request = TransferRequest(url: target, method: method, range: range, options: options)
        let parsed = CurlURL(target)
        if let origin, let parsed, parsed.origin == origin {
            request.credentials = credentials
            if credentials == nil, let netrc = options.netrc {
                request.useNetrc = true
                if case .file(let path) = netrc { request.netrcFile = path.string }
            }
            if let jar = options.cookies,
               let cookies = jar.fieldValue(scheme: parsed.scheme, host: parsed.host, path: parsed.path, now: Int64(time(nil))) {
                request.headers = Self.adding(cookies: cookies, to: request.headers)
            }
        } else {
            request.headers = options.headers.filter { !Self.sensitiveHeaders.contains($0.name.lowercased()) }.map(\.description)
        }
        return request
    }

    /// `headers` with `cookies` in their `Cookie` field: appended to the caller's own, or a
    /// field of their own.
    static func adding(cookies: String, to headers: [String]) -> [String] {
        var headers = headers
        if let index = headers.firstIndex(where: { $0.prefix { $0 != ":" }.trimmingCharacters().lowercased() == "cookie" }) {
            headers[index] += "; " + cookies
        } else {
            headers.append("Cookie: " + cookies)
        }
        return headers
    }

    /// Checks one redirect hop; returns the error that stops it, if any.
    package func checkRedirect(from current: String, to next: String) -> DownloadError? {
        if let scheme = CurlURL.scheme(of: next), scheme != "http" && scheme != "https" {
            return DownloadError(.network, "\(redactedURL(current)): redirect to \(redactedURL(next)) refused: only http and https are followed")
        }
        guard let scheme = CurlURL(next)?.scheme else {
            return DownloadError(.network, "\(redactedURL(current)): redirect to \(redactedURL(next)) refused: not a URL libcurl accepts")
        }
        if CurlURL(current)?.scheme == "https" && scheme == "http" && !options.allowHTTPSDowngrade {
            return DownloadError(.network,
                "\(redactedURL(current)): redirect from https to http (\(redactedURL(next))) refused",
                remedy: .allowHTTPSDowngrade)
        }
        return nil
    }
}

extension Substring {
    func trimmingCharacters() -> String { String(self).trimmingSpaces() }
}
