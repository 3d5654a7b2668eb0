@testable import Splitfetch
import DownloadCore
import SystemPackage
import Testing

/// FTP, FTPS and SFTP without a server: which URLs are taken, how replies read, how failures
/// are named and classed. The servers themselves (vsftpd, pure-ftpd, sshd) are in
/// scripts/e2e-ftp.
@Suite("FTP and SFTP")
struct FileTransferTests {
    @Test("the schemes downloaded from", arguments: [
        ("http://h/x", true), ("https://h/x", true), ("ftp://h/x", true), ("ftps://h:990/x", true), ("sftp://u@h/x", true),
        ("FTP://H/x", true), ("file:///etc/passwd", false), ("scp://h/x", false), ("gopher://h/x", false), ("ftp://", false),
        ("not a url", false),
    ])
    func schemes(url: String, supported: Bool) {
        #expect(RemoteScheme.isSupported(url) == supported)
    }

    @Test func fileTransferURLsAreToldApart() {
        #expect(RemoteScheme.isFileTransfer("sftp://h/x"))
        #expect(RemoteScheme.isFileTransfer("ftps://h/x"))
        #expect(!RemoteScheme.isFileTransfer("https://h/x"))
    }

    @Test("server reply lines", arguments: [
        ("213 4096\r\n", FileTransferReply?.some(.init(code: 213, text: "4096"))),
        ("421 There are too many connections from your internet address.\r\n",
         .some(.init(code: 421, text: "There are too many connections from your internet address."))),
        ("230-Welcome\r\n", .some(.init(code: 230, text: "Welcome"))),
        ("226\r\n", .some(.init(code: 226, text: ""))),
        ("Content-Length: 4096\r\n", nil), ("Accept-ranges: bytes\r\n", nil), ("21 short\r\n", nil), ("2134 x\r\n", nil),
        ("\r\n", nil),
    ])
    func replies(line: String, expected: FileTransferReply?) {
        #expect(FileTransferReply(line: Substring(line)) == expected)
    }

    @Test("file times as HTTP dates, and back", arguments: [
        (Int64(0), "Thu, 01 Jan 1970 00:00:00 GMT"), (784_111_777, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"), (1_795_724_978, "Thu, 26 Nov 2026 20:29:38 GMT"),
        (-1, "Wed, 31 Dec 1969 23:59:59 GMT"),
    ])
    func httpDates(seconds: Int64, text: String) {
        #expect(HTTPFields.httpDate(seconds: seconds) == text)
        #expect(HTTPFields.httpDate(text) == seconds)
    }

    @Test func theHTTPDateOfEveryWeekOfEightHundredYearsReadsBack() {
        for day in stride(from: Int64(-3650), through: 146_097 * 2, by: 7) {
            let seconds = day * 86400 + 45_296
            #expect(HTTPFields.httpDate(HTTPFields.httpDate(seconds: seconds)) == seconds)
        }
    }

    static func result(code: Int32, reply: FileTransferReply? = nil, key: RefusedHostKey? = nil, message: String = "text") -> TransferResult {
        var result = TransferResult()
        result.curlCode = code
        result.curlMessage = message
        result.serverReply = reply
        result.refusedHostKey = key
        return result
    }

    @Test func aRefusedConnectionIsServerPolicy() {
        let error = CurlErrors.error(for: Self.result(code: 28, reply: .init(code: 421, text: "Too many connections (8) from this IP")),
                                     url: "ftp://u:secret@127.0.0.1:2121/f")
        #expect(error.failure.kind == .network(.serverFull))
        #expect(error.failure.isServerBusy && error.failure.isTransient)
        #expect(error.message == "ftp://127.0.0.1:2121/f: the server refused another connection: 421 Too many connections (8) from this IP")
    }

    @Test("refusals that no retry changes", arguments: [
        (Int32(67), FailureKind.loginRefused, "login refused: 530 Login incorrect."),
        (78, .fatal, "no such file: 530 Login incorrect."),
        (19, .fatal, "no such file: 530 Login incorrect."),
        (9, .fatal, "access denied: 530 Login incorrect."),
    ])
    func refusals(code: Int32, kind: FailureKind, message: String) {
        let error = CurlErrors.error(for: Self.result(code: code, reply: .init(code: 530, text: "Login incorrect.")), url: "ftp://h/f")
        #expect(error.code == .http)
        #expect(error.failure.kind == kind)
        #expect(!error.isTransient)
        #expect(error.message == "ftp://h/f: " + message)
    }

    @Test func tlsRequiredAndRefusedIsNotRetried() {
        let error = CurlErrors.error(for: Self.result(code: 64, reply: .init(code: 530, text: "Please login with USER and PASS.")), url: "ftp://h/f")
        #expect(error.code == .network && !error.isTransient)
        #expect(error.message.contains("TLS is required"))
    }

    @Test func anUnknownHostKeyIsRefusedWithItsFingerprint() {
        let key = RefusedHostKey(type: "ED25519", fingerprint: "SHA256:uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0", mismatch: false)
        let error = CurlErrors.error(for: Self.result(code: 60, key: key), url: "sftp://u:pw@127.0.0.1:2222/f")
        #expect(error.message == "sftp://127.0.0.1:2222/f: the host key of 127.0.0.1:2222 is not in known_hosts: "
            + "ED25519 SHA256:uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0; refused")
        #expect(error.remedy == .trustHostKey)
        #expect(!error.isTransient)
        var changed = key
        changed.mismatch = true
        let mismatch = CurlErrors.error(for: Self.result(code: 60, key: changed), url: "sftp://127.0.0.1:2222/f")
        #expect(mismatch.message.contains("is not the one known_hosts has for it") && mismatch.remedy == nil)
    }

    @Test func overHTTPTheSameCodesMeanWhatTheyAlwaysDid() {
        let error = CurlErrors.error(for: Self.result(code: 60, reply: .init(code: 421, text: "x")), url: "https://h/f")
        #expect(error.failure.kind == .network(.tls))
    }

    @Test("a pinned host key as ssh-keygen prints it, or its base64", arguments: [
        ("SHA256:uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0", "uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0"),
        ("sha256:uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0=", "uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0"),
        (" uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0 ", "uKqOBSrbsuLQVAUNZaAW+SO5jYqf/62zSgUpbPDaEv0"),
    ])
    func pinnedKeys(given: String, sent: String) throws {
        var options = DownloadOptions()
        options.fileTransfer.hostKeySHA256 = given
        #expect(options.fileTransfer.pinnedHostKey == sent)
        try options.validate()
    }

    @Test func badFileTransferSettingsAreUsageErrors() {
        var pinned = DownloadOptions()
        pinned.fileTransfer.hostKeySHA256 = "SHA256:tooshort"
        #expect(throws: DownloadError.self) { try pinned.validate() }
        var key = DownloadOptions()
        key.fileTransfer.privateKey = FilePath("/nonexistent/id_ed25519")
        #expect(throws: DownloadError.self) { try key.validate() }
        var mirror = DownloadOptions()
        mirror.mirrors.urls = ["sftp://h/x", "ftp://h/x"]
        #expect(throws: Never.self) { try mirror.validate() }
        mirror.mirrors.urls = ["scp://h/x"]
        #expect(throws: DownloadError.self) { try mirror.validate() }
    }

    @Test func requestsOverFileTransferCarryTheirSettings() {
        var options = DownloadOptions()
        options.fileTransfer.tls = .required
        let policy = RequestPolicy(url: "ftp://user:pw@h/f", options: options)
        let request = policy.request("ftp://h/f", range: ByteRange(0, 10))
        #expect(request.fileTransfer?.scheme == "ftp")
        #expect(request.fileTransfer?.options.tls == .required)
        #expect(request.credentials == Credentials(user: "user", password: "pw"))
        #expect(policy.request("https://h/f").fileTransfer == nil)
        #expect(RequestPolicy(url: "sftp://h/f", options: options).request("sftp://h/f").fileTransfer?.isSFTP == true)
    }

    @Test func aRedirectToFTPIsRefusedAsEverOtherScheme() {
        let policy = RequestPolicy(url: "https://a.example/x", options: DownloadOptions())
        for target in ["ftp://a.example/y", "sftp://a.example/y", "ftps://a.example/y"] {
            #expect(policy.checkRedirect(from: "https://a.example/x", to: target)?.message.contains("only http and https") == true)
        }
    }
}
