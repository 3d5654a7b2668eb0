@testable import Splitfetch
import Testing

/// The parsers of expected digests: values, header fields, checksum lists, and the precedence.
@Suite("Digest parsing")
struct DigestParsingTests {
    // SHA-256 of "hello\n" (`printf 'hello\n' | sha256sum`), and its forms.
    static let helloHex = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
    static let helloBase64 = "WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM="
    static var hello: Digest { Digest(.sha256, bytes: Digest.hexBytes(helloHex)!) }

    @Test func theDigestOfHelloIsComputedByLibcrypto() {
        #expect(MessageDigest.of(Array("hello\n".utf8), .sha256).hex == Self.helloHex)
        #expect(MessageDigest.of(Array("hello\n".utf8), .md5).hex == "b1946ac92492d2347c6235b4d2611184")
        #expect(MessageDigest.of(Array("hello\n".utf8), .sha1).hex == "f572d396fae9206628714fb2ce00f72e94f2258f")
        #expect(MessageDigest.of([], .sha512).hex.hasPrefix("cf83e1357eefb8bdf1542850d66d8007"))
    }

    static let values: [(String, Bool)] = [
        (helloHex, true),
        (helloHex.uppercased(), true),
        (helloBase64, true),
        (String(helloBase64.dropLast()), true),  // base64 without its padding
        ("WJG1tSLV3whtD_CxEPvZ0hu0_HFjrzTQgoai6Eb2vgM", true),  // URL alphabet
        (" " + helloHex + " ", true),
        (String(helloHex.dropLast()), false),  // 63 digits
        (helloHex + "00", false),  // 33 bytes
        ("zz" + helloHex.dropFirst(2), false),
        ("", false),
        ("WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2", false),  // base64 of 30 bytes
    ]

    @Test(arguments: values)
    func valuesAreReadAsHexOrBase64(text: String, valid: Bool) {
        let digest = Digest(.sha256, text: text)
        #expect((digest != nil) == valid)
        if valid { #expect(digest == Self.hello) }
    }

    @Test func checksumOptionsName() throws {
        #expect(try ExpectedDigest(parsing: "sha-256=\(Self.helloHex)").digest == Self.hello)
        #expect(try ExpectedDigest(parsing: "SHA256=\(Self.helloBase64)").digest == Self.hello)
        #expect(try ExpectedDigest(parsing: "sha256=\(Self.helloHex.uppercased())").source == .given)
        for bad in ["sha-256", "crc32c=AAAAAA==", "sha-256=abc", "=\(Self.helloHex)", "md5=\(Self.helloHex)"] {
            #expect(throws: DownloadError.self) { try ExpectedDigest(parsing: bad) }
        }
        let error = #expect(throws: DownloadError.self) { try ExpectedDigest(parsing: "blake3=00") }
        #expect(error?.message.contains("blake3") == true)
    }

    @Test func digestsRoundTripThroughJSONAsHex() throws {
        #expect(Self.hello.description == "sha-256:\(Self.helloHex)")
        #expect(Self.hello.base64 == Self.helloBase64)
    }

    // MARK: - Header fields

    static let sha512Zero = ":" + String(repeating: "A", count: 86) + "==:"
    static let fields: [(String, [DigestAlgorithm])] = [
        // (field value, expected algorithms found)
        ("sha-256=:\(helloBase64):", [DigestAlgorithm.sha256]),
        ("sha-256=:\(helloBase64):;foo=1;bar=\"x\"", [.sha256]),  // parameters are allowed
        ("unixsum=30637, sha-256=:\(helloBase64):", [.sha256]),  // unknown algorithms ignored
        ("sha-512=" + sha512Zero + ", sha-256=:\(helloBase64):", [.sha512, .sha256]),
        ("sha-256=:\(String(helloBase64.dropLast())):", [.sha256]),  // no padding
        ("sha-256=\"\(helloBase64)\"", []),  // a string, not a byte sequence
        ("sha-256=:AAAA:", []),  // the wrong length
        ("sha-256=:\(helloBase64)", []),  // not a structured field
        ("", []),
    ]

    @Test(arguments: fields)
    func structuredFields(value: String, algorithms: [DigestAlgorithm]) {
        let found = DigestFields.structured(value, source: .reprDigest)
        #expect(found.map(\.digest.algorithm) == algorithms)
        if let sha256 = found.first(where: { $0.digest.algorithm == .sha256 }) { #expect(sha256.digest == Self.hello) }
    }

    @Test func legacyDigestField() {
        let found = DigestFields.legacy("SHA-256=\(Self.helloBase64), MD5=sZRqySSS0jR8YjW00mERhA==, UNIXsum=30637")
        #expect(found.map(\.digest.algorithm) == [.sha256, .md5])
        #expect(found[0].digest == Self.hello)
        #expect(found[1].digest.hex == "b1946ac92492d2347c6235b4d2611184")
        #expect(DigestFields.legacy("sha-256=nonsense").isEmpty)
    }

    static func head(_ status: Int, _ fields: [(String, String)]) -> ResponseHead {
        var head = ResponseHead()
        head.status = status
        head.fields = fields.map { (name: $0.0.lowercased(), value: $0.1) }
        return head
    }

    @Test func contentDigestCountsOnlyForAWholeBody() {
        let fields = [("Content-Digest", "sha-256=:\(Self.helloBase64):")]
        #expect(DigestFields.digests(in: Self.head(200, fields), wholeBody: true).map(\.source) == [.contentDigest])
        #expect(DigestFields.digests(in: Self.head(206, fields), wholeBody: false).isEmpty)
        #expect(Probe.isWholeBody(Self.head(200, [])))
        #expect(!Probe.isWholeBody(Self.head(206, [])))
        #expect(!Probe.isWholeBody(Self.head(200, [("Content-Encoding", "gzip")])))
    }

    @Test func objectStoreFields() {
        let found = DigestFields.digests(in: Self.head(206, [
            ("x-amz-checksum-sha256", Self.helloBase64),
            ("x-goog-hash", "crc32c=n03x6A==,md5=sZRqySSS0jR8YjW00mERhA=="),
        ]), wholeBody: false)
        #expect(found.map(\.source) == [.amazonChecksum, .googleHash])
        #expect(found[0].digest == Self.hello)
        // A multipart upload's composite checksum is not the file's digest.
        #expect(DigestFields.digests(in: Self.head(200, [("x-amz-checksum-sha256", Self.helloBase64 + "-3")]), wholeBody: true).isEmpty)
    }

    // MARK: - Checksum lists

    @Test func checksumListFormats() {
        let other = String(repeating: "a", count: 64)
        let list = ChecksumList(parsing: """
            # published checksums
            \(other)  other.iso
            \(Self.helloHex) *binary.iso
            \(Self.helloHex.uppercased())  text.iso
            SHA256 (bsd.iso) = \(Self.helloHex)
            SHA2-256(openssl.iso)= \(Self.helloHex)
            \\\(Self.helloHex)  back\\\\slash.iso
            \(Self.helloHex)  dir/sub/nested.iso
            MD5 (old.iso) = b1946ac92492d2347c6235b4d2611184
            this line is nothing
            """)
        for name in ["binary.iso", "text.iso", "bsd.iso", "openssl.iso", "back\\slash.iso", "nested.iso"] {
            #expect(list.expected(for: [name], from: "SUMS").map(\.digest) == [Self.hello], "\(name)")
        }
        #expect(list.expected(for: ["old.iso"], from: "SUMS").map(\.digest.algorithm) == [.md5])
        #expect(list.expected(for: ["other.iso"], from: "SUMS").map(\.digest.hex) == [other])
        // The output's name first, then the URL's.
        #expect(list.expected(for: ["renamed.iso", "bsd.iso"], from: "SUMS").map(\.digest) == [Self.hello])
        #expect(list.expected(for: ["missing.iso"], from: "SUMS").isEmpty)
        #expect(list.expected(for: ["bsd.iso"], from: "SUMS").first?.source == .checksumFile("SUMS"))
    }

    @Test func sidecarsApplyToAnyName() {
        let bare = ChecksumList(parsing: "\(Self.helloHex)\n")
        #expect(bare.expected(for: ["whatever.iso"], from: "x.sha256").map(\.digest) == [Self.hello])
        let named = ChecksumList(parsing: "\(Self.helloHex)  real.iso\r\n")
        #expect(named.expected(for: ["whatever.iso"], from: "real.iso.sha256").isEmpty)
        #expect(named.expected(for: ["real.iso"], from: "real.iso.sha256").count == 1)
    }

    // MARK: - Precedence

    static func expected(_ hex: String, _ source: DigestSource, _ algorithm: DigestAlgorithm = .sha256) -> ExpectedDigest {
        ExpectedDigest(Digest(algorithm, bytes: Digest.hexBytes(hex)!), source: source)
    }

    @Test func theUsersDigestWinsAndADisagreementIsNamed() throws {
        let ours = Self.expected(Self.helloHex, .given)
        let theirs = Self.expected(String(repeating: "0", count: 64), .reprDigest)
        let plan = try DigestPlan(given: [ours], server: [theirs], reported: [])
        #expect(plan.checks == [ours])
        #expect(plan.warnings.count == 1)
        #expect(plan.warnings[0].message.contains(Self.helloHex) && plan.warnings[0].message.contains(theirs.digest.hex)
                && plan.warnings[0].kind == .digestsDisagree && plan.warnings[0].fields["digest"] == theirs.digest.description)
        let agreeing = try DigestPlan(given: [ours], server: [Self.expected(Self.helloHex, .reprDigest)], reported: [])
        #expect(agreeing.warnings.isEmpty)
    }

    @Test func serverSourcesRankAndTheStrongestAlgorithmWins() throws {
        let md5 = Self.expected("b1946ac92492d2347c6235b4d2611184", .googleHash, .md5)
        let legacy = Self.expected(Self.helloHex, .digestField)
        let repr = Self.expected(Self.helloHex, .reprDigest)
        let repr512 = Self.expected(String(repeating: "1", count: 128), .reprDigest, .sha512)
        #expect(try DigestPlan(given: [], server: [legacy, md5], reported: []).checks == [md5])
        #expect(try DigestPlan(given: [], server: [legacy, repr, md5], reported: []).checks == [repr])
        #expect(try DigestPlan(given: [], server: [repr, repr512], reported: []).checks == [repr512])
        let nothing = try DigestPlan(given: [], server: [], reported: [])
        #expect(!nothing.hashes)
        let reported = try DigestPlan(given: [], server: [], reported: [.md5, .sha256])
        #expect(reported.checks.isEmpty && reported.algorithms == [.sha256, .md5])
    }

    @Test func givenDigestsThatDisagreeAreAUsageError() {
        let error = #expect(throws: DownloadError.self) {
            try DigestPlan(given: [Self.expected(Self.helloHex, .given), Self.expected(String(repeating: "0", count: 64), .checksumFile("S"))],
                           server: [], reported: [])
        }
        #expect(error?.code == .usage)
    }

    @Test func aMismatchNamesBothDigestsAndTheSource() throws {
        let plan = try DigestPlan(given: [Self.expected(Self.helloHex, .checksumFile("SHA256SUMS"))], server: [], reported: [])
        let wrong = Digest(.sha256, bytes: [UInt8](repeating: 0, count: 32))
        let error = try #require(plan.mismatch([wrong], url: "http://x/f"))
        #expect(error.code == .integrity)
        #expect(error.message.contains(Self.helloHex) && error.message.contains(wrong.hex) && error.message.contains("SHA256SUMS"))
        #expect(plan.mismatch([Self.hello], url: "http://x/f") == nil)
    }
}
