import CShims
import DownloadCore
@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Conditional refresh (`DownloadOptions.refresh`) against the test server: each way a file kept
/// can compare with the server's, the requests sent, and what is left on disk.
@Suite("Conditional refresh")
struct RefreshTests {
    /// A file's inode and modification time: unchanged when the file was not rewritten.
    static func identity(_ path: String) -> [Int64] {
        var info = stat()
        guard lstat(path, &info) == 0 else { return [] }
        return [Int64(info.st_ino), Int64(info.st_mtim.tv_sec), Int64(info.st_mtim.tv_nsec), Int64(info.st_size)]
    }

    static func refreshing(connections: Int = 4) -> DownloadOptions {
        var options = testOptions(connections: connections)
        options.refresh = true
        return options
    }

    enum Expect { case unchanged, downloaded }

    /// One case: a first download, what happens between, then a refresh. Returns the refresh's
    /// statistics and the requests it sent.
    static func run(query: [String: String], size: Int64 = 700_000, connections: Int = 4, between: (TestServer, String) throws -> Void = { _, _ in },
                    expect: Expect, content seed: UInt64 = 0) async throws -> (DownloadStatistics, [TestServer.RecordedRequest]) {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/f.bin"
                let url = server.url(size: size, query: query)
                _ = try await Download(url, to: FilePath(path), options: refreshing(connections: connections)).run()
                try between(server, path)
                let before = identity(path)
                let sent = server.recordedRequests.count
                let (bodyBefore, requestsBefore) = (server.statistics.bodyBytes, server.statistics.requests)
                let stats = try await Download(url, to: FilePath(path), options: refreshing(connections: connections)).run()
                let requests = Array(server.recordedRequests.dropFirst(sent))
                switch expect {
                case .unchanged:
                    #expect(stats.unchanged)
                    #expect(identity(path) == before, "the file kept was not rewritten")
                    #expect(server.statistics.requests - requestsBefore == 1, "one request")
                    #expect(server.statistics.bodyBytes - bodyBefore < 1 << 20, "no body beyond what a probe is sent before it is cut")
                case .downloaded:
                    #expect(!stats.unchanged)
                    #expect(stats.size == size)
                }
                #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: size, seed: seed).sha256Hex())
                #expect(!fileExists(path + ".part") && !fileExists(path + ".part.json"))
                return (stats, requests)
            }
        }
    }

    @Test func unchangedByETag() async throws {
        let (_, requests) = try await Self.run(query: [:], expect: .unchanged)
        #expect(requests.first?.header("if-none-match") == "\"sf-700000-0\"")
        #expect(requests.first?.header("if-modified-since") == "Mon, 02 Nov 2026 10:00:00 GMT")
    }

    @Test func unchangedByDateOnly() async throws {
        let (_, requests) = try await Self.run(query: ["noetag": "1"], expect: .unchanged)
        #expect(requests.first?.header("if-none-match") == nil)
        #expect(requests.first?.header("if-modified-since") == "Mon, 02 Nov 2026 10:00:00 GMT")
    }

    @Test func aWeakETagIsSentAsItCame() async throws {
        let (_, requests) = try await Self.run(query: ["weaketag": "1"], expect: .unchanged)
        #expect(requests.first?.header("if-none-match") == "W/\"sf-700000-0\"")
    }

    /// Segmented or not, the conditional request is the first, and the only one.
    @Test(arguments: [1, 4]) func unchangedWithAnyConnectionCount(connections: Int) async throws {
        let (stats, _) = try await Self.run(query: [:], size: 3 << 20, connections: connections, expect: .unchanged)
        #expect(stats.size == 3 << 20)
    }

    /// A run killed after its rename and before its manifest's removal left the manifest: the
    /// refresh removes it and asks the server as usual, with no conflict over a manifest without
    /// its partial file.
    @Test func aManifestLeftBesideTheFinishedFileIsRemovedAndTheFileRefreshed() async throws {
        let (_, requests) = try await Self.run(query: [:], between: { server, path in
            let url = server.url(size: 700_000, query: [:])
            let manifest = Manifest(url: url, finalURL: url, size: 700_000, etag: nil, lastModified: nil, minimumSegmentSize: 1,
                                    bootID: nil, segments: [.init(start: 0, end: 700_000, written: 700_000)])
            writeBytes(ManifestCodec.encode(manifest), to: path + ".part.json")
        }, expect: .unchanged)
        #expect(requests.first?.header("if-none-match") == "\"sf-700000-0\"")
    }

    @Test func aChangedFileIsDownloadedAndReplacesTheOld() async throws {
        let (_, requests) = try await Self.run(query: [:], between: { server, _ in
            server.changeContent(path: "/size/700000/file.bin", seed: 9, etag: "v2")
        }, expect: .downloaded, content: 9)
        #expect(requests.first?.header("if-none-match") == "\"sf-700000-0\"")
    }

    /// A server that ignores the conditions answers in full: the same validators and size mean
    /// the same file, which is not rewritten.
    @Test func aServerIgnoringTheConditionsLeavesTheFileAlone() async throws {
        _ = try await Self.run(query: ["ignoreconditions": "1"], expect: .unchanged)
        _ = try await Self.run(query: ["ignoreconditions": "1", "noetag": "1"], size: 2 << 20, expect: .unchanged)
    }

    /// Ignored conditions with only a weak ETag prove nothing about the bytes: downloaded again.
    @Test func ignoredConditionsWithAWeakETagAndNoDateDownloadAgain() async throws {
        _ = try await Self.run(query: ["ignoreconditions": "1", "weaketag": "1", "nolm": "1"], expect: .downloaded)
    }

    /// Changed here since: its size or time is not what was recorded. Downloaded again, without
    /// conditions.
    @Test(arguments: ["size", "time"]) func aFileChangedLocallyIsNeverTrusted(change: String) async throws {
        let (_, requests) = try await Self.run(query: [:], between: { _, path in
            let fd = open(path, O_WRONLY)
            defer { close(fd) }
            if change == "size" {
                #expect(ftruncate(fd, 699_999) == 0)
            } else {
                var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
                #expect(futimens(fd, &times) == 0)
            }
        }, expect: .downloaded)
        #expect(requests.allSatisfy { $0.header("if-none-match") == nil && $0.header("if-modified-since") == nil })
    }

    /// No validators from the server: nothing to ask with, so the file is fetched whole again.
    @Test func withoutValidatorsTheFileIsDownloadedAgain() async throws {
        let (_, requests) = try await Self.run(query: ["noetag": "1", "nolm": "1"], expect: .downloaded)
        #expect(requests.allSatisfy { $0.header("if-none-match") == nil && $0.header("if-modified-since") == nil })
    }

    /// A file that another tool put there (nothing recorded) is replaced, once complete.
    @Test func aFileWithoutARecordIsReplaced() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/f.bin"
                let fd = open(path, O_WRONLY | O_CREAT, 0o644)
                #expect(write(fd, "old", 3) == 3)
                close(fd)
                let stats = try await Download(server.url(size: 100_000), to: FilePath(path), options: Self.refreshing()).run()
                #expect(!stats.unchanged)
                #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: 100_000).sha256Hex())
                #expect(server.recordedRequests.allSatisfy { $0.header("if-none-match") == nil })
            }
        }
    }

    /// `remoteTime`: the file's time is the server's `Last-Modified`, and the record holds it, so
    /// a refresh still trusts the file.
    @Test func remoteTimeSetsTheModificationTime() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/f.bin"
                var options = Self.refreshing()
                options.remoteTime = true
                let url = server.url(size: 300_000)
                _ = try await Download(url, to: FilePath(path), options: options).run()
                #expect(Self.identity(path)[1] == 1_793_613_600)  // Mon, 02 Nov 2026 10:00:00 GMT
                #expect(try await Download(url, to: FilePath(path), options: options).run().unchanged)
            }
        }
    }

    /// A caller keeping its own records (a database): the statistics give the record, and a
    /// refresh given it back needs nothing kept with the file.
    @Test func aRecordKeptByTheCallerIsUsedInsteadOfTheFiles() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/f.bin"
                let url = server.url(size: 200_000)
                let first = try await Download(url, to: FilePath(path), options: Self.refreshing()).run()
                let record = try #require(first.validators)
                #expect(record.etag == "\"sf-200000-0\"" && record.size == 200_000)
                // The record kept with the file spoilt (setting an attribute leaves the file's time).
                let fd = open(path, O_RDONLY)
                #expect(sf_set_attribute(fd, RecordedValidators.attributeName, "x", 1) == 0)
                close(fd)
                #expect(RecordedValidators.read(path) == nil)
                var options = Self.refreshing()
                options.refreshRecord = record
                let again = try await Download(url, to: FilePath(path), options: options).run()
                #expect(again.unchanged && again.validators == record)
                // Without it, and nothing kept with the file, the file is fetched again.
                let third = try await Download(url, to: FilePath(path), options: Self.refreshing()).run()
                #expect(!third.unchanged)
            }
        }
    }

    /// Where the file system keeps no attributes, the record goes in a hidden file beside it.
    @Test func theRecordRoundTripsThroughTheHiddenFile() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/f.bin"
            #expect(RecordedValidators.sidecarPath(of: path) == dir + "/.f.bin.validators")
            let recorded = ConditionalRefresh.Recorded(etag: "W/\"x\"", lastModified: "Mon, 02 Nov 2026 10:00:00 GMT", size: 5,
                                                       modifiedNanoseconds: 1_793_613_600_000_000_123)
            try RecordedValidators.writeSidecar(recorded, for: path)
            #expect(RecordedValidators.read(path) == recorded)
            RecordedValidators.removeSidecar(for: path)
            #expect(RecordedValidators.read(path) == nil)
        }
    }
}
