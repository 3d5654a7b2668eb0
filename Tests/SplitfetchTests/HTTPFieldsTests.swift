@testable import Splitfetch
import DownloadCore
import Testing

@Suite("Header parsing and response checks")
struct HTTPFieldsTests {
    @Test func contentRangeParsing() {
        #expect(HTTPFields.contentRange("bytes 0-99/1000") == .range(ByteRange(0, 100), total: 1000))
        #expect(HTTPFields.contentRange("bytes 5-5/*") == .range(ByteRange(5, 6), total: nil))
        #expect(HTTPFields.contentRange("bytes */1000") == .unsatisfied(total: 1000))
        for bad in ["bytes 10-5/100", "bytes 0-100/100", "bytes -1-5/10", "items 0-1/2", "bytes 0-1", "bytes a-b/c", "bytes 0-1/-5", ""] {
            #expect(HTTPFields.contentRange(bad) == nil, "\(bad)")
        }
    }

    @Test func contentLengthParsing() throws {
        #expect(try HTTPFields.contentLength([]).get() == nil)
        #expect(try HTTPFields.contentLength(["42"]).get() == 42)
        #expect(try HTTPFields.contentLength(["42", "42"]).get() == 42)
        #expect(try HTTPFields.contentLength(["42, 42"]).get() == 42)
        for bad in [["-1"], ["36893488147419103232"], ["12abc"], ["1", "2"], [""], ["0x10"]] {
            #expect(throws: DownloadError.self) { try HTTPFields.contentLength(bad).get() }
        }
    }

    @Test func retryAfter() {
        #expect(HTTPFields.retryAfterValue("7", receivedAt: 0)?.delay == 7)
        #expect(HTTPFields.retryAfterValue("Thu, 01 Jan 1970 00:00:30 GMT", receivedAt: 10)?.delay == 20)
        #expect(HTTPFields.httpDate("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(HTTPFields.retryAfterValue("soon", receivedAt: 0)?.delay == nil)
        // Found by scripts/fuzz: a year of 19 digits overflowed the date arithmetic and trapped.
        #expect(HTTPFields.retryAfterValue("Wed, 21 Oct 2026888888888888888 07:28:00 GMT", receivedAt: 0)?.delay == nil)
        #expect(HTTPFields.httpDate("Fri, 31 Dec 9999 23:59:60 GMT") != nil)
        #expect(HTTPFields.httpDate("Sun, 06 Nov 1994 24:00:00 GMT") == nil)
    }

    private func head(_ status: Int, _ fields: [(String, String)]) -> ResponseHead {
        var h = ResponseHead()
        h.status = status
        h.fields = fields.map { ($0.0.lowercased(), $0.1) }
        h.isComplete = true
        return h
    }

    private func rejection(_ answer: HTTPFields.RangeAnswer) -> DownloadError? {
        if case .reject(let error) = answer { error } else { nil }
    }

    @Test func exactRangeResponseIsAccepted() {
        let ok = head(206, [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "100")])
        #expect(HTTPFields.checkRangeResponse(ok, requested: ByteRange(100, 200), total: 1000, url: "http://h/f") == .accept(through: 200))
    }

    /// A server that caps range lengths answers with the start asked for and an earlier end:
    /// that is data, and the rest is asked for next.
    @Test func aShorterRangeFromTheSameStartIsAccepted() {
        let capped = head(206, [("Content-Range", "bytes 100-149/1000"), ("Content-Length", "50")])
        #expect(HTTPFields.checkRangeResponse(capped, requested: ByteRange(100, 200), total: 1000, url: "http://h/f") == .accept(through: 150))
    }

    /// httpbin answers a range covering the whole file with `200`: for a range from byte 0 the
    /// body is the data asked for (and more, which the sink does not write).
    @Test func aWholeFile200IsAcceptedForARangeFromByteZero() {
        let whole = head(200, [("Content-Length", "1000"), ("ETag", "\"v1\"")])
        #expect(HTTPFields.checkRangeResponse(whole, requested: ByteRange(0, 1000), total: 1000, url: "http://h/f",
                                              etag: "\"v1\"") == .accept(through: 1000))
        #expect(HTTPFields.checkRangeResponse(whole, requested: ByteRange(0, 300), total: 1000, url: "http://h/f") == .accept(through: 300))
        // Not from byte 0, or of another length: not this file's bytes at this offset.
        #expect(rejection(HTTPFields.checkRangeResponse(whole, requested: ByteRange(300, 1000), total: 1000, url: "http://h/f")) != nil)
        let other = head(200, [("Content-Length", "999")])
        #expect(rejection(HTTPFields.checkRangeResponse(other, requested: ByteRange(0, 1000), total: 1000, url: "http://h/f")) != nil)
    }

    /// A `200` to `If-Range` with unchanged validators is a server mishandling `If-Range`: worth
    /// asking again without it. The same `200` without `If-Range` is a server ignoring ranges.
    @Test func aWhole200ToIfRangeWithTheSameValidatorsAsksAgainWithoutIt() throws {
        let whole = head(200, [("Content-Length", "1000"), ("ETag", "\"v1\"")])
        let error = try #require(rejection(HTTPFields.checkRangeResponse(whole, requested: ByteRange(300, 1000), total: 1000,
                                                                       url: "http://h/f", etag: "\"v1\"", sentIfRange: true)))
        #expect(error.ignoredIfRange && error.isTransient)
        let plain = try #require(rejection(HTTPFields.checkRangeResponse(whole, requested: ByteRange(300, 1000), total: 1000,
                                                                       url: "http://h/f", etag: "\"v1\"")))
        #expect(!plain.ignoredIfRange && !plain.isTransient)
        // An error page with no validators (an expired signed URL's HTML) proves nothing.
        let page = head(200, [("Content-Length", "48"), ("Content-Type", "text/html")])
        let bare = try #require(rejection(HTTPFields.checkRangeResponse(page, requested: ByteRange(300, 1000), total: 1000,
                                                                      url: "http://h/f", etag: "\"v1\"", sentIfRange: true)))
        #expect(!bare.ignoredIfRange && !bare.isTransient)
        let changed = head(200, [("Content-Length", "1000"), ("ETag", "\"v2\"")])
        let news = try #require(rejection(HTTPFields.checkRangeResponse(changed, requested: ByteRange(300, 1000), total: 1000,
                                                                      url: "http://h/f", etag: "\"v1\"", sentIfRange: true)))
        #expect(news.code == .remoteChanged)
    }

    @Test("anything but a 206 for the range's start is rejected before a byte is written", arguments: [
        (200, [("Content-Length", "1000")]),
        (206, [("Content-Range", "bytes 101-200/1000")]),
        (206, [("Content-Range", "bytes 100-199/999")]),
        (206, [("Content-Range", "bytes 100-299/1000")]),
        (206, []),
        (206, [("Content-Range", "bytes 100-199/1000"), ("Content-Encoding", "gzip")]),
        (206, [("Content-Range", "bytes 100-199/1000"), ("Content-Type", "multipart/byteranges; boundary=x")]),
        (206, [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "150")]),
        (206, [("Content-Range", "bytes 100-199/1000"), ("Content-Range", "bytes 100-199/1000")]),
        (503, []),
        (404, []),
    ] as [(Int, [(String, String)])])
    func wrongResponsesAreRejected(status: Int, fields: [(String, String)]) {
        let error = rejection(HTTPFields.checkRangeResponse(head(status, fields), requested: ByteRange(100, 200), total: 1000,
                                                            url: "http://u:p@h/f"))
        #expect(error != nil)
        #expect(error?.message.contains("u:p") == false, "credentials leaked into the message")
    }

    /// Answers that cannot change on a retry end the download at once, not after five retries.
    @Test("deterministic faults are not transient", arguments: [
        [("Content-Range", "bytes 100-199/1000"), ("Content-Encoding", "gzip")],
        [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "150")],
    ])
    func deterministicFaultsAreNotRetried(fields: [(String, String)]) throws {
        let error = try #require(rejection(HTTPFields.checkRangeResponse(head(206, fields), requested: ByteRange(100, 200), total: 1000,
                                                                       url: "http://h/f")))
        #expect(!error.isTransient, "\(error.message)")
    }

    @Test func anotherTotalInA206OrA416IsReportedAsTheObservedSize() {
        let range = ByteRange(100, 200)
        func observed(_ h: ResponseHead) -> Int64? {
            rejection(HTTPFields.checkRangeResponse(h, requested: range, total: 1000, url: "http://h/f"))?.observedTotal
        }
        #expect(observed(head(206, [("Content-Range", "bytes 100-199/500")])) == 500)
        // A range past the real end gets a 416 naming the size; whichever arrives first, the
        // download learns the same thing.
        let past416 = head(416, [("Content-Range", "bytes */50")])
        #expect(rejection(HTTPFields.checkRangeResponse(past416, requested: range, total: 1000, url: "http://h/f"))?.httpStatus == 416)
        #expect(observed(past416) == 50)
        #expect(observed(head(416, [("Content-Range", "bytes */1000")])) == nil)
        #expect(observed(head(416, [])) == nil)
    }

    /// Apache's weak ETag for a just-modified file: compared weakly to tell a change, and never
    /// sent in `If-Range`; nor is a `Last-Modified` that is not a second older than `Date`.
    @Test func weakValidatorsCompareWeaklyAndStayOutOfIfRange() {
        #expect(HTTPFields.sameEntityTag("W/\"5-abc\"", "\"5-abc\""))
        #expect(HTTPFields.sameEntityTag("W/\"5-abc\"", "W/\"5-abc\""))
        #expect(!HTTPFields.sameEntityTag("W/\"5-abc\"", "\"5-abd\""))
        let weak = head(206, [("Content-Range", "bytes 100-199/1000"), ("ETag", "\"x\"")])
        #expect(HTTPFields.checkRangeResponse(weak, requested: ByteRange(100, 200), total: 1000, url: "http://h/f",
                                              etag: "W/\"x\"") == .accept(through: 200))
        let modified = "Mon, 23 Nov 2026 03:00:00 GMT"
        #expect(HTTPFields.ifRangeValue(etag: "\"x\"", lastModified: modified, date: nil) == "\"x\"")
        #expect(HTTPFields.ifRangeValue(etag: "W/\"x\"", lastModified: modified, date: "Mon, 23 Nov 2026 04:00:00 GMT") == nil)
        #expect(HTTPFields.ifRangeValue(etag: nil, lastModified: modified, date: "Mon, 23 Nov 2026 03:00:01 GMT") == modified)
        #expect(HTTPFields.ifRangeValue(etag: nil, lastModified: modified, date: "Mon, 23 Nov 2026 03:00:00 GMT") == nil)
        #expect(HTTPFields.ifRangeValue(etag: nil, lastModified: modified, date: nil) == nil)
    }

    @Test func responseHeadKeepsOnlyTheFinalResponse() {
        var h = ResponseHead()
        for line in ["HTTP/1.1 302 Found\r\n", "Location: /x\r\n", "\r\n", "HTTP/1.1 206 Partial Content\r\n",
                     "Content-Range: bytes 0-0/5\r\n", "ETag:  \"abc\" \r\n", "\r\n"] {
            Array(line.utf8).withUnsafeBytes { h.feed(line: $0) }
        }
        #expect(h.status == 206)
        #expect(h.version == "1.1")
        #expect(h.first("location") == nil)
        #expect(h.first("ETAG") == "\"abc\"")
        #expect(h.isComplete)
    }

    /// The head is read as bytes: names lowercased, values trimmed of blanks (spaces and tabs)
    /// at both ends only, UTF-8 kept, lines without a colon left out.
    @Test func responseHeadFieldsAreTrimmedAndNamesLowercased() {
        var h = ResponseHead()
        for line in ["HTTP/1.1  304 Not Modified\r\n", "X-Mixed-CASE:\tone  two \t\r\n", "Empty:\r\n", "no colon here\r\n",
                     "Title: caf\u{E9} \u{2603}\r\n", "x-mixed-case: again\n", "\r\n"] {
            Array(line.utf8).withUnsafeBytes { h.feed(line: $0) }
        }
        #expect(h.status == 304 && h.version == "1.1" && h.isComplete)
        #expect(h.fields.map(\.name) == ["x-mixed-case", "empty", "title", "x-mixed-case"])
        #expect(h.all("X-MIXED-CASE") == ["one  two", "again"])
        #expect(h.first("empty") == "")
        #expect(h.first("title") == "caf\u{E9} \u{2603}")
    }

    /// A status line is the version up to its first space and the status as the next word, of
    /// digits only: anything else is no status (0), and the next line's fields still count.
    @Test(arguments: [
        ("HTTP/1.0 404 Not Found", 404, "1.0"), ("HTTP/1.1 abc", 0, "1.1"), ("HTTP/1.1", 0, "1.1"),
        ("HTTP/1.1 20x OK", 0, "1.1"), ("HTTP/1.1 99999999999999999999 OK", 0, "1.1"), ("HTTP/1.1 -1", 0, "1.1"),
        ("HTTP/1.1\t200", 0, "1.1\t200"), ("HTTP/ 200", 200, ""),
    ] as [(String, Int, String)])
    func responseHeadStatusLines(_ c: (line: String, status: Int, version: String)) {
        var h = ResponseHead()
        for line in [c.line + "\r\n", "ETag: \"a\"\r\n"] {
            Array(line.utf8).withUnsafeBytes { h.feed(line: $0) }
        }
        #expect(h.status == c.status && h.version == Substring(c.version))
        #expect(h.first("etag") == "\"a\"")
    }

    /// libcurl writes an HTTP/2 response's status line as `HTTP/2 200`: the version says so.
    @Test func responseHeadKnowsAnHTTP2Response() {
        var h = ResponseHead()
        for line in ["HTTP/2 200\r\n", "content-length: 5\r\n", "\r\n"] {
            Array(line.utf8).withUnsafeBytes { h.feed(line: $0) }
        }
        #expect(h.status == 200 && h.version == "2" && h.first("Content-Length") == "5")
    }

    /// libcurl's "unsupported protocol" is the URL's fault only before a request went out. After,
    /// it is the reply (libcurl's "Received HTTP/0.9"): worth a new connection when the request
    /// went out on a reused one, whose earlier response may have left bytes behind.
    @Test(arguments: [
        (sent: false, reused: false, code: DownloadError.Code.usage, transient: false),
        (sent: true, reused: true, code: .protocolViolation, transient: true),
        (sent: true, reused: false, code: .protocolViolation, transient: false),
    ])
    func unsupportedProtocolIsTheURLOnlyBeforeTheRequestWentOut(sent: Bool, reused: Bool, code: DownloadError.Code,
                                                               transient: Bool) {
        var result = TransferResult()
        result.curlCode = CurlErrors.unsupportedProtocol
        result.curlMessage = "Received HTTP/0.9 when not allowed"
        result.requestSent = sent
        result.reusedConnection = reused
        let error = CurlErrors.error(for: result, url: "http://127.0.0.1:1/f")
        #expect(error.code == code)
        #expect(error.isTransient == transient)
        #expect(error.message.contains("HTTP/0.9") && error.message.contains("127.0.0.1"))
        if sent { #expect(error.message.contains("malformed response")) }
    }

    /// A `206` whose Content-Length counts other bytes than its Content-Range names is refused,
    /// not transient; one that agrees, or has no Content-Length, passes.
    @Test func lengthThatDisagreesWithTheRangeIsRefused() {
        func head(_ length: String?) -> ResponseHead {
            var head = ResponseHead()
            head.status = 206
            head.fields = [("content-range", "bytes 0-99/1000")] + (length.map { [("content-length", $0)] } ?? [])
            return head
        }
        func disagreement(_ length: String?) -> DownloadError? {
            HTTPFields.lengthDisagreement(head(length), range: ByteRange(0, 100), contentRange: "bytes 0-99/1000", url: "u")
        }
        #expect(disagreement("100") == nil)
        #expect(disagreement(nil) == nil)
        let short = disagreement("99")
        #expect(short?.code == .protocolViolation && short?.isTransient == false)
        #expect(short?.message == "u: Content-Length 99 does not match Content-Range bytes 0-99/1000")
        #expect(disagreement("x")?.code == .protocolViolation)
    }
}

@Suite("URL text helpers")
struct URLTextTests {
    @Test func redaction() {
        #expect(redactedURL("https://user:secret@example.org:8443/a?b=c") == "https://example.org:8443/a?b=c")
        #expect(redactedURL("http://example.org/a@b") == "http://example.org/a@b")
    }

    @Test(arguments: [
        // S3 presigned: the signature, the credential and a session token go; the rest stays.
        ("https://b.s3.amazonaws.com/k.iso?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20261123%2Fus&X-Amz-Date=20261123T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Security-Token=tok&X-Amz-Signature=abcdef",
         "https://b.s3.amazonaws.com/k.iso?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED&X-Amz-Date=20261123T000000Z&X-Amz-Expires=60&X-Amz-SignedHeaders=host&X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED"),
        ("https://s.blob.core.windows.net/c/f?sv=2024&se=2026&sp=r&sig=c2VjcmV0", "https://s.blob.core.windows.net/c/f?sv=2024&se=2026&sp=r&sig=REDACTED"),
        ("https://h/f?access_token=t&name=x&X-Goog-Signature=s", "https://h/f?access_token=REDACTED&name=x&X-Goog-Signature=REDACTED"),
        ("https://u:p@h/f?x-amz-signature=s", "https://h/f?x-amz-signature=REDACTED"),
        ("https://h/f?page=2&sort=name", "https://h/f?page=2&sort=name"),
        ("https://h/f?flag&token", "https://h/f?flag&token"),
        // Found by scripts/fuzz: a URL libcurl refuses (here a newline) kept its signature.
        ("https://u:p@h/k?X-Amz-Signature=s&\n#x", "https://h/k?X-Amz-Signature=REDACTED&\n#x"),
    ])
    func credentialsInTheQueryAreRedacted(url: String, expected: String) {
        #expect(redactedURL(url) == expected)
    }

    @Test func defaultNames() {
        #expect(defaultFileName(forURL: "https://h/dir/debian-12.iso?token=x#frag") == "debian-12.iso")
        #expect(defaultFileName(forURL: "https://h/dir/my%20file.tar.gz") == "my file.tar.gz")
        #expect(defaultFileName(forURL: "https://h/") == "index.html")
        #expect(defaultFileName(forURL: "https://h") == "index.html")
        #expect(defaultFileName(forURL: "https://h/a/..%2F..%2Fetc%2Fpasswd") == "passwd")
        #expect(defaultFileName(forURL: "https://h/%2e%2e") == "index.html")
        #expect(defaultFileName(forURL: "https://h/dir/caf\u{e9}.txt#x?y") == "caf\u{e9}.txt")
        #expect(defaultFileName(forURL: "h/a/b.bin") == "b.bin")
        #expect(defaultFileName(forURL: "https://h/a/\u{301}b?/c") == "\u{301}b")
        #expect(defaultFileName(forURL: "https://h/a/?q/x") == "index.html")
    }

    @Test func safeNames() {
        #expect(safeFileName("../../evil") == "evil")
        #expect(safeFileName("/etc/passwd") == "passwd")
        #expect(safeFileName("a\\b") == "b")
        #expect(safeFileName("..") == nil)
        #expect(safeFileName("") == nil)
        #expect(safeFileName("x\u{1}y\n") == "xy")
        #expect(safeFileName(".hidden") == "hidden")
        // Found by scripts/fuzz: dots behind a space survived as a hidden name.
        #expect(safeFileName("\u{0} . nli") == "nli")
        #expect(safeFileName(" .. .x") == "x")
        #expect(ContentDisposition.fileName("inlinie; filename=\"./\u{0} . nli\"").flatMap(safeFileName) == "nli")
        #expect((safeFileName(String(repeating: "é", count: 300))?.utf8.count ?? 0) <= 255)
        // A separator, dot or space that a combining mark joins into one character is still one.
        #expect(safeFileName("a/\u{301}b") == "\u{301}b")
        #expect(safeFileName(".\u{301}x")?.utf8.first != UInt8(ascii: "."))
        #expect(safeFileName("x \u{301}") == "x \u{301}")
        #expect(safeFileName("\u{e9}t\u{e9} ") == "\u{e9}t\u{e9}")
    }
}
