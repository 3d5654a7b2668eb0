/// The URL schemes Splitfetch downloads from: the web's, and the file-transfer protocols that
/// libcurl speaks (FTP, implicit FTPS, SFTP). Redirects are followed only between the web's.
package enum RemoteScheme {
    static let web: Set<String> = ["http", "https"]
    static let fileTransfer: Set<String> = ["ftp", "ftps", "sftp"]
    /// For messages: "an http, https, ftp, ftps or sftp".
    static let names = "an http, https, ftp, ftps or sftp"

    /// Throws unless libcurl is ready (``Libcurl/failure``: ``DownloadError/Code/network``, the
    /// transport cannot be set up) and reads `url` as a URL of a scheme Splitfetch downloads from
    /// (``DownloadError/Code/usage``).
    static func check(_ url: String) throws(DownloadError) {
        if let failure = CurlGlobal.failure { throw DownloadError(.network, failure) }
        guard isSupported(url) else { throw DownloadError(.usage, "\(redactedURL(url)): not \(names) URL") }
    }

    /// Whether libcurl reads `url` as a URL of a scheme Splitfetch downloads from.
    package static func isSupported(_ url: String) -> Bool {
        guard let scheme = CurlURL(url)?.scheme else { return false }
        return web.contains(scheme) || fileTransfer.contains(scheme)
    }

    /// Whether `url` is an `ftp`, `ftps` or `sftp` URL.
    package static func isFileTransfer(_ url: String) -> Bool {
        CurlURL.scheme(of: url).map(fileTransfer.contains) ?? false
    }
}
