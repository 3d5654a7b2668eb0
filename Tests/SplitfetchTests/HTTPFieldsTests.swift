@testable import Splitfetch
import SegmentPlanning
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

    @Test func exactRangeResponseIsAccepted() {
        let ok = head(206, [("Content-Range", "bytes 100-199/1000"), ("Content-Length", "100")])
        #expect(HTTPFields.validateRangeResponse(ok, requested: ByteRange(100, 200), total: 1000, url: "http://h/f") == nil)
    }

    @Test("anything but the exact 206 is rejected before a byte is written", arguments: [
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
        let error = HTTPFields.validateRangeResponse(head(status, fields), requested: ByteRange(100, 200), total: 1000, url: "http://u:p@h/f")
        #expect(error != nil)
        #expect(error?.message.contains("u:p") == false, "credentials leaked into the message")
    }

    @Test func anotherTotalInA206OrA416IsReportedAsTheObservedSize() {
        let range = ByteRange(100, 200)
        let shorter206 = head(206, [("Content-Range", "bytes 100-199/500")])
        #expect(HTTPFields.validateRangeResponse(shorter206, requested: range, total: 1000, url: "http://h/f")?.observedTotal == 500)
        // A range past the real end gets a 416 naming the size; whichever arrives first, the
        // download learns the same thing.
        let past416 = head(416, [("Content-Range", "bytes */50")])
        let error = HTTPFields.validateRangeResponse(past416, requested: range, total: 1000, url: "http://h/f")
        #expect(error?.httpStatus == 416 && error?.observedTotal == 50)
        let same416 = head(416, [("Content-Range", "bytes */1000")])
        #expect(HTTPFields.validateRangeResponse(same416, requested: range, total: 1000, url: "http://h/f")?.observedTotal == nil)
        #expect(HTTPFields.validateRangeResponse(head(416, []), requested: range, total: 1000, url: "http://h/f")?.observedTotal == nil)
    }

    @Test func responseHeadKeepsOnlyTheFinalResponse() {
        var h = ResponseHead()
        for line in ["HTTP/1.1 302 Found\r\n", "Location: /x\r\n", "\r\n", "HTTP/1.1 206 Partial Content\r\n",
                     "Content-Range: bytes 0-0/5\r\n", "ETag:  \"abc\" \r\n", "\r\n"] {
            Array(line.utf8).withUnsafeBytes { h.feed(line: $0) }
        }
        #expect(h.status == 206)
        #expect(h.first("location") == nil)
        #expect(h.first("ETAG") == "\"abc\"")
        #expect(h.isComplete)
    }
}

@Suite("URL text helpers")
struct URLTextTests {
    @Test func redaction() {
        #expect(redactedURL("https://user:secret@example.org:8443/a?b=c") == "https://example.org:8443/a?b=c")
        #expect(redactedURL("http://example.org/a@b") == "http://example.org/a@b")
    }

    @Test func defaultNames() {
        #expect(defaultFileName(forURL: "https://h/dir/debian-12.iso?token=x#frag") == "debian-12.iso")
        #expect(defaultFileName(forURL: "https://h/dir/my%20file.tar.gz") == "my file.tar.gz")
        #expect(defaultFileName(forURL: "https://h/") == "index.html")
        #expect(defaultFileName(forURL: "https://h") == "index.html")
        #expect(defaultFileName(forURL: "https://h/a/..%2F..%2Fetc%2Fpasswd") == "passwd")
        #expect(defaultFileName(forURL: "https://h/%2e%2e") == "index.html")
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
    }
}
