import ArgumentParser
import Splitfetch
import SystemPackage

/// Credentials and TLS.
struct SecurityOptions: ParsableArguments {
    @Option(name: [.customShort("u", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("USER:PASSWORD for HTTP authentication; sent only to the URL's own origin.",
                               valueName: "user:password"))
    var user: String?

    @Flag(name: [.customShort("k"), .long], help: "Do not verify TLS certificates or host names (unsafe).")
    var insecure = false

    @Option(parsing: .unconditional, help: ArgumentHelp("PEM file of CA certificates to verify the server with.", valueName: "file"))
    var cacert: String?

    @Flag(name: .customLong("allow-https-downgrade"), help: "Follow redirects from https to http.")
    var allowHTTPSDowngrade = false

    @Option(name: [.customShort("x"), .long], parsing: .unconditional, help: ArgumentHelp(
        "Proxy for every request, [http|https|socks5h|socks5|socks4a|socks4]://[user:password@]host:port (default: the environment's http_proxy, https_proxy, all_proxy, no_proxy).",
        valueName: "url"))
    var proxy: String?

    @Option(name: .customLong("noproxy"), parsing: .unconditional, help: ArgumentHelp(
        "Hosts reached without the proxy: comma-separated names, domains or addresses, or * for all (overrides no_proxy).",
        valueName: "list"))
    var noProxy: String?

    @Flag(help: "Take the user name and password for the URL's host from ~/.netrc (sent only to that origin).")
    var netrc = false

    @Option(name: .customLong("netrc-file"), parsing: .unconditional,
            help: ArgumentHelp("Like --netrc, from this file.", valueName: "file"))
    var netrcFile: String?

    @Option(name: .customLong("load-cookies"), parsing: .unconditional, help: ArgumentHelp(
        "Send cookies from this Netscape cookie file (as curl, wget and browsers export), to the URL's own origin only.",
        valueName: "file"))
    var loadCookies: String?

    /// The netrc file to read, if any.
    var netrcSource: NetrcSource? {
        if let netrcFile { return .file(FilePath(netrcFile)) }
        return netrc ? .home : nil
    }

    /// The cookie file's cookies, read on the I/O threads.
    func cookies() async throws(DownloadError) -> CookieJar? {
        guard let loadCookies else { return nil }
        return try await CookieJar.load(FilePath(loadCookies))
    }
}
