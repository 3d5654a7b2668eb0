@testable import Splitfetch
import DownloadCore
import SystemPackage
import TestHTTPServer
import Testing

/// What running against servers nobody here wrote showed (Apache, httpbin, servers that cap
/// ranges or compress anyway), each reproduced by the test server and checked end to end.
@Suite("Real servers' habits")
struct RealServerTests {
    static let size: Int64 = (2 << 20) + 777

    static func options(connections: Int = 4) -> DownloadOptions {
        var o = testOptions(connections: connections, minimumSegmentSize: 256 << 10)
        o.retry.maximumRetries = 4
        o.timeouts.stall = .seconds(20)  // ThreadSanitizer slows transfers; none of these tests is about stalls
        o.timeouts.probe = patientTimeout(.seconds(2))
        return o
    }

    /// Options for a test that counts requests or probes once: a probe answered late is slow,
    /// not lost (with all suites at once on two cores, one waited over 2 s), and a second probe
    /// would be counted.
    static func unhurried() -> DownloadOptions {
        var o = options()
        o.timeouts.probe = .seconds(30)
        return o
    }

    func expectCorrect(_ server: TestServer, query: [String: String], options: DownloadOptions = options(),
                       sourceLocation: SourceLocation = #_sourceLocation) async throws -> DownloadStatistics {
        try await expectCorrectDownload(server, size: Self.size, query: query, options: options, sourceLocation: sourceLocation)
    }

    /// A server that caps each range at 64 KiB: every short `206` is data, the rest is asked
    /// for next, and no attempt counts as a failure.
    @Test func aServerThatCapsRangeLengthsIsFollowedToTheEnd() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let download = Download(server.url(size: Self.size, query: ["rangecap": "65536"]), to: FilePath(dir + "/f"),
                                        options: Self.options())
                let retries = Task { () -> [DownloadError] in
                    var errors: [DownloadError] = []
                    for await event in download.events where event.kind == .retry { event.error.map { errors.append($0) } }
                    return errors
                }
                let stats = try await download.run()
                let errors = await retries.value
                #expect(try sha256HexOfFile(atPath: dir + "/f") == SyntheticContent(size: Self.size).sha256Hex())
                #expect(!fileExists(dir + "/f.part"))
                #expect(stats.mode == .segmented)
                #expect(stats.requests >= Int(Self.size / 65536))
                // Were short answers failures, each would count: about one retry per request. A
                // transfer stalled on a loaded machine (all suites under ThreadSanitizer) is
                // retried too, and is not what this test is about; every retry's error is shown.
                let notStalls = errors.filter { $0.kind != .network(.stalled) }
                #expect(notStalls.count * 4 < stats.requests,
                        "\(errors.count) retries in \(stats.requests) requests: \(errors.map(\.message))")
            }
        }
    }

    /// httpbin answers a range covering the whole file with `200`: that body is the file.
    @Test("a whole-file range answered with 200 is used", arguments: [1, 4])
    func aWholeRangeAnsweredWith200IsUsed(connections: Int) async throws {
        try await withServer { server in
            var options = Self.options(connections: connections)
            options.minimumSegmentSize = Self.size  // one segment: its range is the whole file
            let stats = try await expectCorrect(server, query: ["wholerange200": "1"], options: options)
            #expect(stats.size == Self.size)
        }
    }

    /// Apache's weak ETag: no `If-Range` is sent (it would get the whole file every time), the
    /// download completes, and the rerun's change check compares the tags weakly.
    @Test func aWeakETagIsNeverSentInIfRangeAndComparesWeakly() async throws {
        try await withServer { server in
            _ = try await expectCorrect(server, query: ["weaketag": "1"])
            let ranged = server.recordedRequests.filter { $0.headers.contains { $0.name == "range" } }
            #expect(!ranged.isEmpty)
            #expect(!ranged.contains { $0.headers.contains { $0.name == "if-range" } })
        }
        #expect(HTTPFields.sameEntityTag("W/\"a\"", "\"a\""))
    }

    /// A server that answers every `If-Range` with the whole unchanged file: the download drops
    /// `If-Range` and completes.
    @Test func aServerMishandlingIfRangeStillGivesTheFile() async throws {
        try await withServer { server in
            let stats = try await expectCorrect(server, query: ["ifrangebroken": "1"])
            #expect(stats.mode == .segmented)
        }
    }

    /// A compressed range, or a length that disagrees with itself, cannot change on a retry: the
    /// download ends at once with the reason, refused at the probe before any other request.
    @Test("deterministic faults end the download without retries", arguments: [
        ("gzip", "Content-Encoding gzip"),
        ("badlength", "does not match Content-Range"),
    ])
    func deterministicFaultsAreNotRetried(fault: String, text: String) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let error = await failure(server.url(size: Self.size, query: ["fault": fault]), to: dir + "/f", options: Self.unhurried())
                #expect(error?.code == .protocolViolation)
                #expect(error?.message.contains(text) == true, "\(error?.message ?? "")")
                let ranged = server.recordedRequests.filter { $0.headers.contains { $0.name == "range" && $0.value != "bytes=0-0" } }
                // Both are refused at the probe, before its body is held: no other connection starts
                // (a badlength body taken whole would leave a byte on a connection libcurl reuses,
                // and the next request on it failed as "HTTP/0.9", 1 run in 100; a gzip refused
                // only by the segments let ThreadSanitizer's slow runs send 9 range requests).
                #expect(ranged.count == 1, "\(ranged.count) range requests")
            }
        }
    }

    /// The GET-first probe refuses a `206` whose Content-Length disagrees with its Content-Range
    /// itself, before the body is held for the first segment.
    @Test func theProbeRefusesALengthThatDisagreesWithItsRange() async throws {
        try await withServer { server in
            let url = server.url(size: Self.size, query: ["fault": "badlength"])
            let transport = CurlTransport(maximumConnections: 1)
            let probe = Probe(connector: Connector(transport: transport), policy: RequestPolicy(url: url, options: Self.unhurried()))
            do throws(DownloadError) {
                let (_, open) = try await probe.runGetFirst(range: ByteRange(0, 512 << 10))
                open?.discard()
                Issue.record("the probe took a 206 whose Content-Length disagrees with its Content-Range")
            } catch {
                #expect(error.code == .protocolViolation && !error.isTransient)
                #expect(error.message.contains("Content-Length 524287 does not match Content-Range bytes 0-524287/"), "\(error.message)")
            }
            await transport.shutdown()
        }
    }

    /// What the error mapping above relies on: libcurl says whether a request went out, and on a
    /// connection opened for it or one kept from before.
    @Test func aResultSaysWhetherTheRequestWentOutOnAReusedConnection() async throws {
        try await withServer { server in
            let url = server.url(size: 1000, query: [:])
            let transport = CurlTransport(maximumConnections: 1)
            let policy = RequestPolicy(url: url, options: Self.options())
            let first = await transport.perform(policy.request(url), sink: nil)
            let second = await transport.perform(policy.request(url), sink: nil)
            #expect(first.curlCode == 0 && first.requestSent && !first.reusedConnection)
            #expect(second.curlCode == 0 && second.requestSent && second.reusedConnection)
            let refused = await transport.perform(policy.request("http://127.0.0.1:1/f"), sink: nil)
            #expect(refused.curlCode != 0 && !refused.requestSent)
            await transport.shutdown()
        }
    }

    /// Every request asks for the bytes as stored.
    @Test func requestsAskForUncompressedBytes() async throws {
        try await withServer { server in
            _ = try await expectCorrect(server, query: [:])
            let requests = server.recordedRequests
            #expect(!requests.isEmpty)
            #expect(requests.allSatisfy { $0.headers.contains { $0.name == "accept-encoding" && $0.value == "identity" } })
        }
    }

    /// Presigned URLs: the signature and credential never reach statistics or error messages.
    @Test func signaturesInTheQueryStayOutOfStatisticsAndMessages() async throws {
        try await withServer { server in
            let query = ["X-Amz-Signature": "s3cr3tsig", "X-Amz-Credential": "AKIAEXAMPLE", "X-Amz-Expires": "60"]
            let stats = try await expectCorrect(server, query: query)
            // The server gets the signature; only what people and logs see is redacted.
            #expect(server.recordedRequests.allSatisfy { $0.uri.contains("X-Amz-Signature=s3cr3tsig") })
            for text in [stats.url, stats.finalURL] {
                #expect(!text.contains("s3cr3tsig") && !text.contains("AKIAEXAMPLE"), "\(text)")
                #expect(text.contains("X-Amz-Expires=60"))
            }
            try await withTemporaryDirectory { dir in
                var failing = query
                failing["fault"] = "gzip"
                let error = await failure(server.url(size: Self.size, query: failing), to: dir + "/f", options: Self.options())
                #expect(error?.message.contains("s3cr3tsig") == false && error?.message.contains("AKIAEXAMPLE") == false)
            }
        }
    }
}
