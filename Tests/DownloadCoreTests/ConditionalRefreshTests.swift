import DownloadCore
import Testing

/// The conditional refresh's decisions: which conditions, and what an answer means.
@Suite("Conditional refresh decisions")
struct ConditionalRefreshTests {
    typealias Recorded = ConditionalRefresh.Recorded
    typealias Local = ConditionalRefresh.Local

    static let date = "Mon, 02 Nov 2026 10:00:00 GMT"
    static let both = Recorded(etag: "\"a\"", lastModified: date, size: 10, modifiedNanoseconds: 7)

    @Test("which conditions the first request carries", arguments: [
        (both, Local(size: 10, modifiedNanoseconds: 7), ConditionalRefresh.Plan.conditional(ifNoneMatch: "\"a\"", ifModifiedSince: date)),
        (Recorded(etag: nil, lastModified: date, size: 10, modifiedNanoseconds: 7), Local(size: 10, modifiedNanoseconds: 7),
         .conditional(ifNoneMatch: nil, ifModifiedSince: date)),
        (Recorded(etag: "W/\"a\"", lastModified: nil, size: 10, modifiedNanoseconds: 7), Local(size: 10, modifiedNanoseconds: 7),
         .conditional(ifNoneMatch: "W/\"a\"", ifModifiedSince: nil)),
        (Recorded(etag: nil, lastModified: nil, size: 10, modifiedNanoseconds: 7), Local(size: 10, modifiedNanoseconds: 7),
         .unconditional(.noValidators)),
        (both, Local(size: 11, modifiedNanoseconds: 7), .unconditional(.changedLocally)),
        (both, Local(size: 10, modifiedNanoseconds: 8), .unconditional(.changedLocally)),
        (nil, Local(size: 10, modifiedNanoseconds: 7), .unconditional(.nothingRecorded)),
        (both, nil, .unconditional(.noFile)),
    ] as [(Recorded?, Local?, ConditionalRefresh.Plan)])
    func plan(recorded: Recorded?, local: Local?, expected: ConditionalRefresh.Plan) {
        #expect(ConditionalRefresh.plan(recorded: recorded, local: local) == expected)
    }

    @Test("what an answer means", arguments: [
        (304, nil, nil, nil, both, ConditionalRefresh.Verdict.notModified),
        (200, "\"a\"", date, 10, both, .sameFileConditionsIgnored),
        (200, "\"a\"", "Tue, 03 Nov 2026 10:00:00 GMT", 10, both, .sameFileConditionsIgnored),  // the strong ETag decides
        (200, "\"b\"", date, 10, both, .changed),
        (200, "\"a\"", date, 11, both, .changed),
        (200, "\"a\"", date, nil, both, .changed),
        (200, nil, date, 10, Recorded(etag: nil, lastModified: date, size: 10, modifiedNanoseconds: 0), .sameFileConditionsIgnored),
        (200, nil, "Tue, 03 Nov 2026 10:00:00 GMT", 10, Recorded(etag: nil, lastModified: date, size: 10, modifiedNanoseconds: 0), .changed),
        (200, "W/\"a\"", nil, 10, Recorded(etag: "W/\"a\"", lastModified: nil, size: 10, modifiedNanoseconds: 0), .changed),
        (200, "W/\"a\"", date, 10, Recorded(etag: "W/\"a\"", lastModified: date, size: 10, modifiedNanoseconds: 0), .sameFileConditionsIgnored),
        (200, "W/\"b\"", date, 10, Recorded(etag: "W/\"a\"", lastModified: date, size: 10, modifiedNanoseconds: 0), .changed),
        (200, "\"a\"", date, 10, Recorded(etag: "W/\"a\"", lastModified: date, size: 10, modifiedNanoseconds: 0), .sameFileConditionsIgnored),
    ] as [(Int, String?, String?, Int64?, Recorded, ConditionalRefresh.Verdict)])
    func judge(status: Int, etag: String?, lastModified: String?, size: Int64?, recorded: Recorded, expected: ConditionalRefresh.Verdict) {
        let answer = ConditionalRefresh.Answer(etag: etag, lastModified: lastModified, size: size)
        #expect(ConditionalRefresh.judge(status: status, answer: answer, recorded: recorded) == expected)
    }
}
