@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// Transient trouble at any stage is ridden out under the one retry policy: a `503` to the very
/// first request (with `Retry-After` in seconds, as a date, or none), an outage mid-download.
@Suite("Trouble at any stage")
struct TroubleTests {
    static let size: Int64 = (2 << 20) + 99

    static func options() -> DownloadOptions {
        var o = testOptions(connections: 4, minimumSegmentSize: 256 << 10)
        o.retry.baseDelay = .milliseconds(250)
        o.retry.maximumDelay = .seconds(30)  // five retries then wait at least 3.9 s in all
        o.timeouts.probe = patientTimeout(.seconds(2))
        return o
    }

    /// Downloads `query`'s file, checks its SHA-256, and returns how many requests the server saw.
    func expectCorrect(_ server: TestServer, query: [String: String], options: DownloadOptions = options(),
                       sourceLocation: SourceLocation = #_sourceLocation) async throws -> Int {
        _ = try await expectCorrectDownload(server, size: Self.size, query: query, options: options, sourceLocation: sourceLocation)
        return server.recordedRequests.count
    }

    @Test("a 503 to the very first requests is retried", arguments: [
        ["firstfail": "2"],
        ["firstfail": "2", "retryafter": "1"],
        ["firstfail": "1", "retryafter": "date:1"],
    ])
    func firstRequestsAnswered503AreRetried(query: [String: String]) async throws {
        try await withServer { server in
            let requests = try await expectCorrect(server, query: query)
            #expect(requests > Int(query["firstfail"]!)!)
        }
    }

    @Test func aServerThatNeverComesUpEndsWithTheRetriesCounted() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                var options = Self.options()
                options.retry.maximumRetries = 2
                options.retry.baseDelay = .milliseconds(20)
                let error = await failure(server.url(size: Self.size, query: ["firstfail": "1000"]), to: dir + "/f", options: options)
                #expect(error?.code == .http && error?.httpStatus == 503)
                #expect(error?.message.contains("gave up after 2 retries") == true, "\(error?.message ?? "")")
            }
        }
    }

    /// The server goes down for 3 s after the download has begun: in-flight responses are cut,
    /// new connections get no answer. The download waits it out and the file is right.
    @Test func aThreeSecondOutageMidDownloadIsRiddenOut() async throws {
        try await withServer(.init(rateLimit: 2 << 20)) { server in
            var options = Self.options()
            options.retry.maximumRetries = 5
            let requests = try await expectCorrect(server, query: ["outageafter": "3", "outagems": "3000"], options: options)
            #expect(requests > 4)
        }
    }
}

/// A URL that redirects to a signed URL which expires mid-download (S3 presigned URLs, release
/// assets): the download resolves the URL given again and goes on from the new signature.
@Suite("Expiring signed redirects")
struct ExpiringRedirectTests {
    @Test func anExpiredSignedURLIsResolvedAgainFromTheURLGiven() async throws {
        try await withServer(.init(rateLimit: 4 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = (3 << 20) + 11
                var options = testOptions(connections: 4, minimumSegmentSize: 256 << 10)
                options.minimumSplitSize = 64 << 10
                let (stats, digest) = try await download(server.url(size: size, query: ["signredirect": "3"]), to: dir + "/f",
                                                         options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                let signatures = Set(server.recordedRequests.compactMap { request in
                    request.uri.split(separator: "?").last?.split(separator: "&").first { $0.hasPrefix("signed=") }
                })
                #expect(signatures.count >= 2, "the URL was never resolved again")
                #expect(stats.url.contains("signredirect=3"))
            }
        }
    }

    /// When the URL given now leads to another file, nothing is mixed: the download stops.
    @Test func aResolutionToAnotherFileStops() {
        let old = RemoteResource(url: "u", finalURL: "a", size: 10, acceptsRanges: true, etag: "\"1\"", lastModified: nil,
                                 contentType: nil, contentDisposition: nil, probeMethod: "get")
        var same = old
        same.finalURL = "b"
        same.etag = "W/\"1\""
        var other = old
        other.etag = "\"2\""
        var longer = old
        longer.size = 11
        #expect(old.isSameFile(as: same))
        #expect(!old.isSameFile(as: other))
        #expect(!old.isSameFile(as: longer))
    }
}

/// A proxy that wants credentials is reported one way over http and https: a proxy error that
/// names the proxy, not the origin, and is not retried.
@Suite("Proxy authentication")
struct ProxyTests {
    @Test(arguments: ["http", "https"])
    func aProxyAsking407IsNamedAndNotRetried(scheme: String) async throws {
        var configuration = TestServer.Configuration()
        configuration.proxyAuthentication = true
        try await withServer(configuration) { proxy in
            try await withTemporaryDirectory { dir in
                var options = testOptions()
                options.proxy.url = "http://127.0.0.1:\(proxy.port)"
                // No probe timeout a loaded machine (ThreadSanitizer) could trip: a timed-out
                // probe is retried, and the count below is of the 407's requests.
                options.timeouts.probe = .seconds(60)
                // The origin is never reached: only the proxy (on loopback) is asked.
                let error = await failure("\(scheme)://127.0.0.2:9/size/100/f.bin", to: dir + "/f", options: options)
                #expect(error?.code == .proxy, "\(error?.message ?? "no error")")
                #expect(error?.httpStatus == 407)
                #expect(error?.remedy == .proxyCredentials)
                #expect(error?.message.contains("proxy http://127.0.0.1:\(proxy.port)") == true, "\(error?.message ?? "")")
                #expect(error?.message.contains("127.0.0.2") == false)
                #expect(proxy.statistics.requests == 1)
                #expect(!fileExists(dir + "/f") && !fileExists(dir + "/f.part"))
            }
        }
    }
}
