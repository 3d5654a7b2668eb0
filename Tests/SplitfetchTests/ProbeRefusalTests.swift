@testable import Splitfetch
import DownloadCore
import TestHTTPServer
import Testing

/// Answers to the GET-first probe that real servers give and RFC 9110 does not expect: a `416`
/// to a first range longer than a small file (httpbin), a `416` without `Content-Range` to any
/// range of an empty object (S3, moto), and a redirect whose HTML body arrives before the probe
/// has read its `Location`.
@Suite("Probe refusals and redirect bodies")
struct ProbeRefusalTests {
    /// What the probe asks after a `416`, from what the `416` says.
    @Test(arguments: [
        // A size smaller than the range: that many bytes.
        (["content-range": "bytes */102400"], ByteRange(0, 1 << 20), Probe.AskAgain.range(ByteRange(0, 102_400))),
        (["content-range": "bytes */1"], ByteRange(0, 1 << 20), .range(ByteRange(0, 1))),
        (["content-range": "bytes */5"], ByteRange(0, .max), .range(ByteRange(0, 5))),
        // No size at all: the whole resource, unranged.
        ([:], ByteRange(0, 1 << 20), .unranged),
    ] as [([String: String], ByteRange, Probe.AskAgain)])
    func aRefusedFirstRangeAsksForWhatExists(fields: [String: String], requested: ByteRange, expected: Probe.AskAgain) {
        #expect(Probe.rangeAfterRefusal(head(416, fields), of: requested) == expected)
    }

    /// Nothing to ask again: an empty file (the `416` says so itself), a size the range already
    /// covered (the server should have served it), a range not from 0, a garbled field.
    @Test(arguments: [
        (["content-range": "bytes */0"], ByteRange(0, 1 << 20)),
        (["content-range": "bytes */2000000"], ByteRange(0, 1 << 20)),
        (["content-range": "bytes */100"], ByteRange(50, 1 << 20)),
        (["content-range": "bytes 0-9/100"], ByteRange(0, 1 << 20)),
        (["content-range": "pages */100"], ByteRange(0, 1 << 20)),
    ] as [([String: String], ByteRange)])
    func nothingIsAskedAgainWhenTheRefusalIsFinal(fields: [String: String], requested: ByteRange) {
        #expect(Probe.rangeAfterRefusal(head(416, fields), of: requested) == nil)
    }

    /// httpbin's `/range/N` answers `bytes=0-1048575` with `416 bytes */N` for a file of N < 1 MiB.
    @Test(arguments: [1, 100 << 10, (1 << 20) - 1] as [Int64])
    func aShortFileRefusingTheFirstRangeIsFetched(size: Int64) async throws {
        try await withServer { server in
            let stats = try await expectCorrectDownload(server, size: size, query: ["shortrange416": "1"],
                                                        options: testOptions(connections: 8, minimumSegmentSize: 1 << 20))
            #expect(stats.size == size)
            let gets = server.recordedRequests.filter { $0.method == "GET" }
            #expect(gets.map { $0.header("range") } == ["bytes=0-1048575", "bytes=0-\(size - 1)"])
        }
    }

    /// S3 answers a ranged GET of an empty object with `416 InvalidRange` and no `Content-Range`.
    @Test func anEmptyObjectRefusingEveryRangeIsAnEmptyFile() async throws {
        try await withServer { server in
            let stats = try await expectCorrectDownload(server, size: 0, query: ["emptyrange416": "1"],
                                                        options: testOptions(connections: 8, minimumSegmentSize: 1 << 20))
            #expect(stats.size == 0)
            let gets = server.recordedRequests.filter { $0.method == "GET" }
            #expect(gets.map { $0.header("range") } == ["bytes=0-1048575", nil])
        }
    }

    /// A redirect that expires mid-download and carries an HTML body: the re-resolution (a ranged
    /// GET that stops at the first body byte) reads the target from `Location`, as the first
    /// probe does; with `--probe head`, against a target that refuses HEAD, so the GET fallback
    /// meets the redirect too.
    @Test(arguments: [ProbeMethod.get, .head])
    func anExpiredRedirectWithABodyIsResolvedAgain(probe: ProbeMethod) async throws {
        try await withServer(.init(rateLimit: 4 << 20)) { server in
            var options = testOptions(connections: 4, minimumSegmentSize: 256 << 10)
            options.minimumSplitSize = 64 << 10
            options.probe = probe
            var query = ["signredirect": "3", "redirectbody": "1"]
            if probe == .head { query["nohead"] = "1" }
            let size: Int64 = (3 << 20) + 11
            _ = try await expectCorrectDownload(server, size: size, query: query, options: options)
            let signatures = Set(server.recordedRequests.compactMap { request in
                request.uri.split(separator: "?").last?.split(separator: "&").first { $0.hasPrefix("signed=") }
            })
            #expect(signatures.count >= 2, "the URL was never resolved again")
        }
    }

    private func head(_ status: Int, _ fields: [String: String]) -> ResponseHead {
        ResponseHead(status: status, fields: fields.map { ($0.key, $0.value) }, isComplete: true)
    }
}
