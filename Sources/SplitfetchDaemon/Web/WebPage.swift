import Hummingbird
import NIOCore

/// The daemon's web page: one HTML document, its style sheet and its script, all served by the
/// daemon (nothing from another origin: it works offline). The script talks to the daemon over
/// the WebSocket at `/jsonrpc` with the token the user enters once (kept in the browser's
/// storage, never in a URL), and puts every text from a server or a URL on the page as text.
///
/// Every answer carries a Content-Security-Policy that allows scripts, styles and connections
/// from the daemon alone, no inline script, no frames, no forms posted elsewhere.
enum WebPage {
    struct Asset: Sendable {
        let path: String
        let contentType: String
        let body: String
    }

    static let assets = [
        Asset(path: "/", contentType: "text/html; charset=utf-8", body: html),
        Asset(path: "/app.css", contentType: "text/css; charset=utf-8", body: css),
        Asset(path: "/app.js", contentType: "text/javascript; charset=utf-8", body: script),
    ]

    static let contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        + "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    static func response(_ asset: Asset) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = asset.contentType
        headers[.contentSecurityPolicy] = contentSecurityPolicy
        headers[.xContentTypeOptions] = "nosniff"
        headers[.cacheControl] = "no-store"
        headers[.init("Referrer-Policy")!] = "no-referrer"
        headers[.init("X-Frame-Options")!] = "DENY"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: asset.body)))
    }
}
