@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing
import PercentEncoding

#if canImport(Glibc)
import Glibc
#endif

/// Names in a directory, sorted.
func listDirectory(_ path: String) -> [String] {
    guard let dir = opendir(path) else { return [] }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if name != "." && name != ".." { names.append(name) }
    }
    return names.sorted()
}

@Suite("Safe by default")
struct SecurityTests {
    @Test func redirectToAFileURLIsRefused() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let url = server.url(size: 100, query: ["redirect": percentEncode("file:///etc/passwd")])
                let error = await failure(url, to: dir + "/x", options: testOptions())
                #expect(error?.code == .network)
                #expect(error?.message.contains("only http and https") == true)
                #expect(listDirectory(dir).isEmpty)
            }
        }
    }

    @Test func redirectLoopsAndLongChainsAreClearErrors() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let loop = await failure(server.baseURL + "/loop/x", to: dir + "/a", options: testOptions())
                #expect(loop?.message.contains("redirect loop") == true)
                let long = await failure(server.baseURL + "/hops/11/size/100/f", to: dir + "/b", options: testOptions())
                #expect(long?.message.contains("more than 10 redirects") == true)
                let (_, digest) = try await download(server.baseURL + "/hops/10/size/100/f", to: dir + "/c", options: testOptions())
                #expect(digest == SyntheticContent(size: 100).sha256Hex())
            }
        }
    }

    @Test func credentialsAndSecretHeadersStayWithTheirOrigin() async throws {
        let second = try await TestServer(configuration: .init(host: "127.0.0.2"))
        defer { Task { await second.shutdown() } }
        try await withServer { first in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3 << 20
                let target = second.url(size: size)
                // URL credentials plus Authorization and Cookie headers, redirected to another origin.
                let url = first.url(size: size, query: ["redirect": percentEncode(target)])
                    .replacingFirst("http://", with: "http://alice:s3cret@")
                var options = testOptions(connections: 4)
                options.headers = [HTTPHeader("Authorization", "Bearer t0ken"), HTTPHeader("Cookie", "session=c00kie"), HTTPHeader("X-Trace", "1")]
                let (stats, digest) = try await download(url, to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())

                let firstRequests = first.recordedRequests
                #expect(!firstRequests.isEmpty)
                #expect(firstRequests.allSatisfy { $0.header("authorization") != nil })
                for request in second.recordedRequests {
                    #expect(request.header("authorization") == nil, "Authorization leaked to another origin")
                    #expect(request.header("cookie") == nil, "Cookie leaked to another origin")
                    #expect(request.header("x-trace") == "1")
                }
                #expect(second.recordedRequests.count >= 4)
                #expect(!stats.url.contains("s3cret") && !stats.url.contains("alice"))
            }
        }
    }

    @Test func urlCredentialsReachTheSameOrigin() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let url = server.url(size: 2 << 20).replacingFirst("http://", with: "http://bob:pa%3Ass@")
                _ = try await download(url, to: dir + "/f", options: testOptions())
                let expected = "Basic " + base64("bob:pa:ss")
                #expect(server.recordedRequests.allSatisfy { $0.header("authorization") == expected })
            }
        }
    }

    @Test func secretsNeverReachTheManifest() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/m.bin"
                let url = server.url(size: 8 << 20).replacingFirst("http://", with: "http://carol:hunter2@")
                let error = await interrupt(url, to: path, options: testOptions(connections: 2), after: 256 << 10)
                #expect(error?.code == .interrupted)
                let manifest = String(decoding: readBytes(path + ".part.json") ?? [], as: UTF8.self)
                #expect(!manifest.isEmpty)
                #expect(!manifest.contains("hunter2") && !manifest.contains("carol"))
                #expect(error?.message.contains("hunter2") == false)
            }
        }
    }

    @Test("Content-Disposition names land inside the directory with a safe name", arguments: [
        ("attachment; filename=\"../../evil\"", "evil"),
        ("attachment; filename=\"/etc/passwd\"", "passwd"),
        ("attachment; filename=\"a\\\\b\"", "b"),
        ("attachment; filename=\"..\"", "fallback.bin"),
        ("attachment; filename=\"\"", "fallback.bin"),
        ("attachment; filename=\"x\u{1}y\u{7F}z\"", "xyz"),
        ("attachment; filename*=UTF-8''%E2%82%AC%2F..%2Frates.txt", "rates.txt"),
        ("attachment; filename=\".bashrc\"", "bashrc"),
    ])
    func contentDispositionNames(header: String, expected: String) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { parent in
                let dir = parent + "/inside"
                mkdir(dir, 0o755)
                let url = server.url(size: 1000, name: "fallback.bin", query: ["cd": percentEncode(header)])
                var options = testOptions()
                options.useContentDisposition = true
                let stats = try await Download(url, to: FilePath(dir + "/fallback.bin"), options: options).run()
                #expect(stats.path == FilePath(dir + "/" + expected))
                #expect(listDirectory(dir) == [expected])
                #expect(listDirectory(parent) == ["inside"])
                #expect(try sha256HexOfFile(atPath: dir + "/" + expected) == SyntheticContent(size: 1000).sha256Hex())
                unlink(dir + "/" + expected)
                rmdir(dir)
            }
        }
    }

    @Test("a symlink at the output, partial or manifest path is refused and its target untouched",
          arguments: ["", ".part", ".part.json"])
    func symlinksAreRefused(suffix: String) async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let target = dir + "/target.txt"
                write("keep me\n", to: target)
                let path = dir + "/out.bin"
                symlink(target, path + suffix)
                for force in [false, true] {
                    var options = testOptions()
                    options.allowOverwrite = force
                    let error = await failure(server.url(size: 5000), to: path, options: options)
                    #expect(error != nil)
                    #expect(read(target) == "keep me\n")
                    var info = stat()
                    #expect(lstat(path + suffix, &info) == 0 && (info.st_mode & S_IFMT) == S_IFLNK)
                }
            }
        }
    }

    /// A link planted at the quick checkpoints' slot (symbolic or hard) is replaced, never
    /// written through: its target keeps its bytes, and the download completes.
    @Test("a link at the quick slot's path is replaced, its target untouched", arguments: [true, false])
    func aLinkAtTheQuickSlotIsNotFollowed(symbolic: Bool) async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let target = dir + "/target.txt"
                write("keep me\n", to: target)
                let path = dir + "/slot.bin"
                if symbolic { symlink(target, path + ".part.quick.json") } else { link(target, path + ".part.quick.json") }
                var options = testOptions(connections: 2)
                options.durability.quickCheckpointInterval = .milliseconds(50)
                let size: Int64 = 1 << 20
                let (_, digest) = try await download(server.url(size: size, seed: 4), to: path, options: options)
                #expect(digest == SyntheticContent(size: size, seed: 4).sha256Hex())
                #expect(read(target) == "keep me\n")
                #expect(!fileExists(path + ".part.quick.json"))
            }
        }
    }

    // File modes under umask 0 are checked by scripts/e2e-cli, in a process of their own: a test
    // here would have to change this process's umask while other tests run.

    /// The file is finished (and synced, off the cooperative pool) but a file appeared under its
    /// name meanwhile: that file is left alone and the data stays in the partial file, complete
    /// and resumable.
    @Test func aFileThatAppearsDuringTheDownloadIsNotReplaced() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/late.bin"
                let size: Int64 = 2 << 20
                var options = testOptions(connections: 2)
                options.durability.syncBeforeRename = true
                let download = Download(server.url(size: size), to: FilePath(path), options: options)
                let task = Task { try await download.run() }
                for await event in download.events {
                    if let p = event.progress, p.bytesWritten > 0 { break }
                }
                let squatter = Array("not yours".utf8)
                writeBytes(squatter, to: path)
                let error = await #expect(throws: DownloadError.self) { _ = try await task.value }
                #expect(error?.code == .outputExists)
                #expect(error?.message.contains(path + ".part") == true)
                let untouched = readBytes(path) == squatter  // a Bool: a failure must not print 2 MiB
                #expect(untouched, "the file that appeared was replaced")
                #expect(fileExists(path + ".part.json"))
                let digest = try sha256HexOfFile(atPath: path + ".part")
                #expect(digest == SyntheticContent(size: size).sha256Hex())
            }
        }
    }

    @Test func maximumSizeRefusesBeforeAllocating() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                var options = testOptions()
                options.maximumSize = 1 << 20
                let error = await failure(server.url(size: (1 << 20) + 1), to: dir + "/big", options: options)
                #expect(error?.code == .sizeLimit)
                #expect(listDirectory(dir).isEmpty)
                // No length known in advance: the stream stops at the limit.
                let streamed = await failure(server.url(size: 3 << 20, query: ["norange": "1", "nolength": "chunked"]),
                                             to: dir + "/stream", options: options)
                #expect(streamed?.code == .sizeLimit)
                #expect(listDirectory(dir).isEmpty)
            }
        }
    }

    @Test func httpsToHTTPRedirectsNeedPermission() {
        var options = DownloadOptions()
        let policy = RequestPolicy(url: "https://a.example/x", options: options)
        #expect(policy.checkRedirect(from: "https://a.example/x", to: "http://a.example/x")?.message.contains("https to http") == true)
        #expect(policy.checkRedirect(from: "https://a.example/x", to: "https://b.example/y") == nil)
        #expect(policy.checkRedirect(from: "http://a.example/x", to: "ftp://a.example/y") != nil)
        options.allowHTTPSDowngrade = true
        #expect(RequestPolicy(url: "https://a.example/x", options: options)
            .checkRedirect(from: "https://a.example/x", to: "http://a.example/x") == nil)
    }

    @Test func originsCompareSchemeHostAndPort() {
        #expect(CurlURL("http://Example.org/a")?.origin == "http://example.org:80")
        #expect(CurlURL("https://u:p@example.org:443/")?.origin == "https://example.org:443")
        #expect(CurlURL("http://example.org:8080/")?.origin != CurlURL("http://example.org/")?.origin)
        #expect(CurlURL("https://example.org/")?.origin != CurlURL("http://example.org/")?.origin)
        #expect(CurlURL("http://a%40b:p%3Aw@h/")?.credentials == Credentials(user: "a@b", password: "p:w"))
        #expect(CurlURL("http://[::1]:8080/x")?.origin == "http://[::1]:8080")
    }

    /// Texts for the memo of parses and the redaction shortcut: plain, cased, IPv6, percent-encoded,
    /// FTP, hostless, refused, and ones carrying credentials or a query.
    static let parseTexts = [
        "http://127.0.0.1:8080/a/b.bin", "HTTP://Example.ORG/A", "http://[::1]:8080/x", "https://h.example/a%2Fb c",
        "ftp://h.example/pub/f", "file:///etc/hosts", "not a url", "http://a:b@127.0.0.1\\x/", "http://h.example#frag",
        "http://u:p@h.example/x", "https://h.example/f?X-Amz-Signature=abc&part=1", "http://127.0.0.1%2F@127.0.0.2/x",
    ]

    /// Each answer, asked twice (a parse, then perhaps the memo), is libcurl's own; redacting a
    /// text without `@` or `?`, which skips libcurl, gives what libcurl's rewrite gives.
    @Test("the memo of parses and the redaction shortcut answer as libcurl does", arguments: parseTexts)
    func parsesAnswerAsLibcurl(text: String) {
        for _ in 0..<2 {
            #expect(CurlURL(text) == CurlURL.parse(text))
            #expect(CurlURL.scheme(of: text) == CurlURL.parseScheme(text))
            #expect(CurlURL.redacting(text) == CurlURL.rewrite(text, redactingQuery: true))
            #expect(CurlURL.removingUserinfo(text) == CurlURL.rewrite(text, redactingQuery: false))
        }
    }

    @Test func aURLThatMayCarryASecretIsNeverKept() {
        for text in ["http://u:p@h.example/x", "https://h.example/f?sig=abc", "http://h.example/f?"] {
            _ = CurlURL(text)
            _ = CurlURL.scheme(of: text)
            #expect(CurlURL.mayCarrySecret(text))
            #expect(!CurlURL.isRemembered(text))
        }
        #expect(!CurlURL.mayCarrySecret("http://h.example/f#x"))
    }

    @Test func aPlainURLIsKept() {
        let text = "http://kept.example/f.bin"
        // Another test may make the memo forget everything between the parse and the look (it
        // keeps 256 texts), but not at each of 20 tries.
        let kept = (0..<20).contains { _ in
            _ = CurlURL(text)
            return CurlURL.isRemembered(text)
        }
        #expect(kept)
    }

    /// More texts than the memo keeps: it forgets them all at once and still answers right.
    @Test func theMemoAnswersRightAcrossForgetting() {
        let texts = (0..<600).map { "http://h\($0).example:\(1000 + $0)/f\($0).bin" }
        for _ in 0..<2 {
            for (index, text) in texts.enumerated() {
                let parsed = CurlURL(text)
                #expect(parsed?.host == "h\(index).example" && parsed?.port == 1000 + index && parsed?.path == "/f\(index).bin")
            }
        }
    }

    /// URLs on which the string scanning used before and libcurl read the authority differently.
    /// Every decision now follows libcurl: what it refuses carries no credentials and is no
    /// redirect target, and what it accepts is judged by the host it connects to.
    @Test("credential and origin decisions follow libcurl's parser", arguments: [
        // (URL, libcurl's origin or nil when it refuses the URL, what the scanner said)
        ("http://a@b@127.0.0.1:8080/x", nil, "origin http://127.0.0.1:8080, user a@b"),
        ("http://u:p@127.0.0.1:8080\\@127.0.0.2/x", nil, "origin http://127.0.0.2:80, user u"),
        ("http://a:b@127.0.0.1\\x/", nil, "origin http://127.0.0.1\\x:80"),
        ("http://127.0.0.1%2F@127.0.0.2/x", "http://127.0.0.2:80", "the same"),
        ("http://u:p@[::ffff:127.0.0.1]:8080/", "http://[::ffff:127.0.0.1]:8080", "the same"),
    ] as [(String, String?, String)])
    func decisionsFollowLibcurl(url: String, curlOrigin: String?, scanner: String) {
        #expect(CurlURL(url)?.origin == curlOrigin, "the scanner said \(scanner)")
        let original = "http://alice:s3cret@127.0.0.1:8080/start"
        var options = DownloadOptions()
        options.headers = [HTTPHeader("Authorization", "Bearer t0ken")]
        let policy = RequestPolicy(url: original, options: options)
        let request = policy.request(url)
        let carriesSecrets = request.credentials != nil || request.headers.contains { $0.lowercased().hasPrefix("authorization") }
        #expect(carriesSecrets == (curlOrigin == "http://127.0.0.1:8080"))
        if curlOrigin == nil {
            #expect(policy.checkRedirect(from: original, to: url)?.message.contains("refused") == true)
        }
        #expect(!redactedURL(url).contains("s3cret") && !redactedURL(url).contains("u:p@"))
    }
}

extension String {
    func replacingFirst(_ target: String, with replacement: String) -> String {
        guard let r = firstRange(of: target) else { return self }
        return String(self[..<r.lowerBound]) + replacement + String(self[r.upperBound...])
    }
}

/// Standard base64 (for checking Basic authorization headers).
func base64(_ text: String) -> String {
    let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    let bytes = Array(text.utf8)
    var out = ""
    var i = 0
    while i < bytes.count {
        let b0 = UInt32(bytes[i])
        let b1 = i + 1 < bytes.count ? UInt32(bytes[i + 1]) : 0
        let b2 = i + 2 < bytes.count ? UInt32(bytes[i + 2]) : 0
        let n = b0 << 16 | b1 << 8 | b2
        out.append(table[Int(n >> 18 & 63)])
        out.append(table[Int(n >> 12 & 63)])
        out.append(i + 1 < bytes.count ? table[Int(n >> 6 & 63)] : "=")
        out.append(i + 2 < bytes.count ? table[Int(n & 63)] : "=")
        i += 3
    }
    return out
}
