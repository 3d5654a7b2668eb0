@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing
import PercentEncoding

/// `--load-cookies` and `--netrc`: what a cookie file says, which request gets which cookie, and
/// that cookies and netrc credentials reach only the origin of the URL given.
@Suite("Cookies and netrc")
struct CookieAndNetrcTests {
    static let file = """
        # Netscape HTTP Cookie File
        # a comment, then a blank line

        .example.com\tTRUE\t/\tFALSE\t0\tsite\twide
        www.example.com\tFALSE\t/docs\tFALSE\t0\tdocs\t1
        www.example.com\tFALSE\t/docs/api\tFALSE\t0\tapi\t2
        #HttpOnly_www.example.com\tFALSE\t/\tTRUE\t4102444800\tsession\ts3cret
        www.example.com\tFALSE\t/\tFALSE\t1000\told\tgone
        www.example.com\tFALSE\t/\tFALSE\t0\tempty
        127.0.0.1\tTRUE\t/\tFALSE\t0\tip\tv
        not enough\tfields
        www.example.com\tFALSE\t/\tFALSE\tsoon\tbad\texpiry
        """

    @Test func aNetscapeFileIsReadLineByLine() {
        let jar = CookieJar(netscapeText: Self.file.split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\r\n"))
        #expect(jar.cookies.map(\.name) == ["site", "docs", "api", "session", "old", "empty", "ip"])
        let site = jar.cookies[0]
        #expect(site.domain == "example.com" && site.includesSubdomains && site.expires == nil)
        let session = jar.cookies[3]
        #expect(session.domain == "www.example.com" && session.secure && session.expires == 4_102_444_800)
        #expect(jar.cookies[5].value == "")
    }

    @Test(arguments: [
        // scheme, host, path, expected Cookie field
        ("http", "www.example.com", "/", "site=wide; empty="),
        ("https", "www.example.com", "/", "site=wide; session=s3cret; empty="),
        ("http", "WWW.Example.COM", "/docs", "docs=1; site=wide; empty="),
        ("http", "www.example.com", "/docs/api/v1", "api=2; docs=1; site=wide; empty="),
        ("http", "www.example.com", "/docsx", "site=wide; empty="),  // /docs does not cover /docsx
        ("http", "cdn.example.com", "/docs", "site=wide"),  // only the domain-wide cookie
        ("http", "example.com", "/", "site=wide"),
        ("http", "badexample.com", "/", nil),
        ("http", "127.0.0.1", "/x", "ip=v"),
        ("http", "10.127.0.0.1", "/x", nil),  // an address is never a subdomain
    ] as [(String, String, String, String?)])
    func aRequestGetsTheCookiesItsSchemeHostAndPathMatch(scheme: String, host: String, path: String, expected: String?) {
        let jar = CookieJar(netscapeText: Self.file)
        #expect(jar.fieldValue(scheme: scheme, host: host, path: path, now: 2000) == expected)
    }

    @Test func theCallersCookieFieldIsExtendedNotRepeated() {
        #expect(RequestPolicy.adding(cookies: "a=1", to: ["X: y", "cookie: b=2"]) == ["X: y", "cookie: b=2; a=1"])
        #expect(RequestPolicy.adding(cookies: "a=1", to: ["X: y"]) == ["X: y", "Cookie: a=1"])
    }

    @Test func aMissingCookieOrNetrcFileIsAUsageError() async throws {
        await #expect(throws: DownloadError.self) { _ = try await CookieJar.load(FilePath("/nonexistent/cookies.txt")) }
        var options = DownloadOptions()
        options.netrc = .file(FilePath("/nonexistent/netrc"))
        #expect(throws: DownloadError.self) { try options.validate() }
    }

    /// A first server redirects to a second origin; the cookie file has cookies for both hosts.
    /// Only the first gets any, though the second's own cookie matches its host.
    @Test func cookiesGoOnlyToTheOriginGiven() async throws {
        let second = try await TestServer(configuration: .init(host: "127.0.0.2"))
        defer { Task { await second.shutdown() } }
        try await withServer { first in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3 << 20
                let url = first.url(size: size, query: ["redirect": percentEncode(second.url(size: size))])
                var options = testOptions(connections: 4)
                options.headers = [HTTPHeader("Cookie", "given=0")]
                options.cookies = CookieJar(netscapeText: """
                    127.0.0.1\tFALSE\t/\tFALSE\t0\ta\t1
                    127.0.0.1\tFALSE\t/size\tFALSE\t0\tb\t2
                    127.0.0.1\tFALSE\t/elsewhere\tFALSE\t0\tc\t3
                    127.0.0.1\tFALSE\t/\tTRUE\t0\tsecure\t4
                    127.0.0.1\tFALSE\t/\tFALSE\t1000\texpired\t5
                    127.0.0.2\tFALSE\t/\tFALSE\t0\tother\t6
                    """)
                let (_, digest) = try await download(url, to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                let firstRequests = first.recordedRequests
                #expect(!firstRequests.isEmpty)
                for request in firstRequests { #expect(request.header("cookie") == "given=0; b=2; a=1") }
                #expect(second.recordedRequests.count >= 4)
                for request in second.recordedRequests { #expect(request.header("cookie") == nil, "a cookie crossed origins") }
            }
        }
    }

    /// netrc credentials for the first host go to it; the second host's entry is not used on a
    /// redirect there; credentials given win over the file.
    @Test func netrcCredentialsGoOnlyToTheOriginGiven() async throws {
        let second = try await TestServer(configuration: .init(host: "127.0.0.2"))
        defer { Task { await second.shutdown() } }
        try await withServer { first in
            try await withTemporaryDirectory { dir in
                let netrc = dir + "/netrc"
                writeBytes(Array("""
                    machine 127.0.0.1 login alice password s3cret
                    machine 127.0.0.2
                      login bob
                      password other
                    """.utf8), to: netrc)
                let size: Int64 = 3 << 20
                let url = first.url(size: size, query: ["redirect": percentEncode(second.url(size: size))])
                var options = testOptions(connections: 4)
                options.netrc = .file(FilePath(netrc))
                let (_, digest) = try await download(url, to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                let firstRequests = first.recordedRequests
                #expect(!firstRequests.isEmpty)
                for request in firstRequests { #expect(request.header("authorization") == "Basic " + base64("alice:s3cret")) }
                #expect(second.recordedRequests.count >= 4)
                for request in second.recordedRequests { #expect(request.header("authorization") == nil, "netrc credentials crossed origins") }

                let before = first.recordedRequests.count
                options.credentials = Credentials(user: "carol", password: "given")
                let (_, again) = try await download(first.url(size: size), to: dir + "/g", options: options)
                #expect(again == SyntheticContent(size: size).sha256Hex())
                for request in first.recordedRequests.dropFirst(before) {
                    #expect(request.header("authorization") == "Basic " + base64("carol:given"))
                }
            }
        }
    }
}
