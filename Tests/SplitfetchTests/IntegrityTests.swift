import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing
import PercentEncoding

/// Downloads checked against digests, end to end through the library and the test server.
@Suite("Integrity")
struct IntegrityTests {
    static let size: Int64 = 3 << 20 + 12345
    static var content: SyntheticContent { SyntheticContent(size: size) }
    static var sha256: String { content.sha256Hex() }

    /// Downloads with `query` and `options` into a fresh directory; returns the outcome, the
    /// SHA-256 of the final file (when there is one), the directory's entries afterwards and the
    /// warnings emitted.
    static func run(_ server: TestServer, query: [String: String], options: DownloadOptions = testOptions(connections: 4),
                    name: String = "f.bin") async throws
        -> (result: Result<DownloadStatistics, DownloadError>, sha256: String?, entries: [String], warnings: [String]) {
        try await withTemporaryDirectory { dir in
            let download = Download(server.url(size: size, name: name, query: query), to: FilePath(dir + "/" + name), options: options)
            let warnings = Task {
                var found: [String] = []
                for await event in download.events { if let warning = event.warning { found.append(warning.message) } }
                return found
            }
            let result: Result<DownloadStatistics, DownloadError>
            do throws(DownloadError) { result = .success(try await download.run()) } catch { result = .failure(error) }
            let path = dir + "/" + name
            let digest = fileExists(path) ? try sha256HexOfFile(atPath: path) : nil
            return (result, digest, directoryEntries(dir), await warnings.value)
        }
    }

    static func addheader(_ lines: String...) -> String { percentEncode(lines.joined(separator: "|")) }

    // MARK: - Every source, matched

    static let sources: [(String, [String: String], DigestSource, DigestAlgorithm)] = [
        ("Repr-Digest, padded base64", ["digest": "repr"], .reprDigest, .sha256),
        ("Repr-Digest without padding", ["addheader": addheader("Repr-Digest: sha-256=:{sha256b64nopad}:")], .reprDigest, .sha256),
        ("Repr-Digest with parameters", ["addheader": addheader("Repr-Digest: sha-256=:{sha256b64}:;x=1;y=\"z\"")], .reprDigest, .sha256),
        ("several algorithms, unknown ignored",
         ["addheader": addheader("Repr-Digest: unixsum=:AAAA:, sha-512=:{sha512b64}:, sha-256=:{sha256b64}:")], .reprDigest, .sha512),
        ("Content-Digest of a whole 200", ["digest": "content", "norange": "1"], .contentDigest, .sha256),
        ("RFC 3230 Digest", ["digest": "legacy"], .digestField, .sha256),
        ("S3 x-amz-checksum-sha256", ["digest": "amz"], .amazonChecksum, .sha256),
        ("GCS x-goog-hash", ["digest": "goog"], .googleHash, .md5),
        ("Repr-Digest ranks over Digest", ["digest": "legacy,goog,repr"], .reprDigest, .sha256),
    ]

    @Test(arguments: sources)
    func theServersDigestIsChecked(label: String, query: [String: String], source: DigestSource, algorithm: DigestAlgorithm) async throws {
        try await withServer { server in
            let outcome = try await Self.run(server, query: query)
            let statistics = try outcome.result.get()
            #expect(outcome.sha256 == Self.sha256, "\(label)")
            #expect(statistics.verified.map(\.source) == [source], "\(label)")
            #expect(statistics.verified.map(\.digest.algorithm) == [algorithm], "\(label)")
            #expect(statistics.digests.map(\.algorithm) == [algorithm], "\(label)")
            #expect(outcome.entries == ["f.bin"], "\(label)")
        }
    }

    @Test func aRangesContentDigestIsNotTakenForTheFiles() async throws {
        // A 206's Content-Digest covers the range only: checking the file against it would fail.
        try await withServer { server in
            let outcome = try await Self.run(server, query: ["digest": "content"])
            let statistics = try outcome.result.get()
            #expect(outcome.sha256 == Self.sha256)
            #expect(statistics.verified.isEmpty && statistics.digests.isEmpty)
        }
    }

    @Test(arguments: ["hex", "HEX", "base64", "base64-unpadded"])
    func givenDigestsInEveryForm(form: String) async throws {
        let hex = Self.sha256
        let base64 = Digest(.sha256, text: hex)!.base64
        let text = switch form {
        case "hex": hex
        case "HEX": hex.uppercased()
        case "base64": base64
        default: String(base64.prefix { $0 != "=" })
        }
        var options = testOptions(connections: 4)
        options.integrity.expectedDigests = [try ExpectedDigest(parsing: "sha-256=" + text)]
        try await withServer { server in
            let outcome = try await Self.run(server, query: [:], options: options)
            #expect(outcome.sha256 == hex)
            #expect(try outcome.result.get().verified.map(\.source) == [.given])
        }
    }

    // MARK: - Mismatch

    @Test(arguments: [0, 1 << 20, size / 2, size - 1] as [Int64])
    func aCorruptedByteIsNeverAccepted(offset: Int64) async throws {
        for query in [["digest": "repr"], ["digest": "repr", "norange": "1"]] {
            var q = query
            q["corrupt"] = String(offset)
            try await withServer { server in
                let outcome = try await Self.run(server, query: q)
                guard case .failure(let error) = outcome.result else {
                    Issue.record("a corrupted byte at \(offset) was accepted (\(query))")
                    return
                }
                #expect(error.code == .integrity)
                #expect(error.message.contains(Self.sha256) && error.message.contains("Repr-Digest"))
                // Nothing under the final name, and no partial data kept.
                #expect(outcome.entries.isEmpty, "\(outcome.entries)")
            }
        }
    }

    @Test func theUsersDigestWinsOverTheServersAndTheDisagreementIsReported() async throws {
        let wrong = Digest(.sha256, bytes: [UInt8](repeating: 7, count: 32))
        var options = testOptions(connections: 4)
        options.integrity.expectedDigests = [try ExpectedDigest(parsing: "sha-256=" + Self.sha256)]
        try await withServer { server in
            let query = ["addheader": Self.addheader("Repr-Digest: sha-256=:\(wrong.base64):")]
            let outcome = try await Self.run(server, query: query, options: options)
            #expect(outcome.sha256 == Self.sha256)
            #expect(try outcome.result.get().verified.map(\.source) == [.given])
            #expect(outcome.warnings.count == 1)
            #expect(outcome.warnings.first.map { $0.contains(wrong.hex) && $0.contains(Self.sha256) } == true)

            // The other way round: the user's wrong digest fails a right file.
            options.integrity.expectedDigests = [ExpectedDigest(wrong, source: .checksumFile("SHA256SUMS"))]
            let failed = try await Self.run(server, query: ["digest": "repr"], options: options)
            guard case .failure(let error) = failed.result else {
                Issue.record("a wrong given digest passed")
                return
            }
            #expect(error.code == .integrity && error.message.contains("SHA256SUMS"))
            #expect(failed.entries.isEmpty)
        }
    }

    @Test func digestsAreReportedWithoutACheck() async throws {
        var options = testOptions(connections: 4)
        options.integrity.reportedDigests = [.md5, .sha256, .sha1]
        try await withServer { server in
            let outcome = try await Self.run(server, query: [:], options: options)
            let statistics = try outcome.result.get()
            #expect(statistics.verified.isEmpty)
            #expect(statistics.digests.map(\.algorithm) == [.sha256, .sha1, .md5])
            #expect(statistics.digests.first?.hex == outcome.sha256)
            #expect(outcome.sha256 == Self.sha256)
        }
    }

    @Test func serverDigestsCanBeIgnored() async throws {
        var options = testOptions(connections: 4)
        options.integrity.useServerDigests = false
        try await withServer { server in
            let outcome = try await Self.run(server, query: ["digest": "repr", "corrupt": "5"], options: options)
            #expect(try outcome.result.get().digests.isEmpty)
            #expect(outcome.sha256 != Self.sha256)  // the corruption went unnoticed, as asked
            #expect(server.recordedRequests.allSatisfy { $0.header("Want-Repr-Digest") == nil })
        }
    }

    @Test func theProbeAsksForARepresentationDigest() async throws {
        try await withServer { server in
            _ = try await Self.run(server, query: [:])
            #expect(server.recordedRequests.first?.header("Want-Repr-Digest")?.contains("sha-256") == true)
        }
    }

    // MARK: - Resume

    @Test func aResumedDownloadHashesThePrefixOnDiskAgain() async throws {
        let size: Int64 = 8 << 20
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/r.bin"
                // 4 connections × 2 MiB/s: about a second, interrupted once 3 MiB are written.
                let url = server.url(size: size, name: "r.bin", query: ["digest": "repr", "rate": String(2 << 20)])
                let error = await interrupt(url, to: path, options: testOptions(connections: 4), after: 3 << 20)
                #expect(error?.code == .interrupted)
                #expect(fileExists(path + ".part"))
                let statistics = try await Download(url, to: FilePath(path), options: testOptions(connections: 4)).run()
                #expect(statistics.resumedBytes > 0)
                #expect(statistics.verified.map(\.source) == [.reprDigest])
                #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: size).sha256Hex())
            }
        }
    }

    @Test func aServerDigestThatChangedBetweenRunsIsARemoteChange() async throws {
        let size: Int64 = 8 << 20
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/c.bin"
                let url = server.url(size: size, name: "c.bin", query: ["digest": "repr", "rate": String(2 << 20)])
                let error = await interrupt(url, to: path, options: testOptions(connections: 4), after: 2 << 20)
                #expect(error?.code == .interrupted)
                // Same size and ETag, other bytes: only the digest tells.
                server.changeContent(path: "/size/\(size)/c.bin", seed: 99, etag: "sf-\(size)-0")
                do {
                    _ = try await Download(url, to: FilePath(path), options: testOptions(connections: 4)).run()
                    Issue.record("a changed file was resumed")
                } catch let error as DownloadError {
                    #expect(error.code == .remoteChanged)
                    #expect(error.message.contains("sha-256"))
                }
                #expect(!fileExists(path))
            }
        }
    }
}
