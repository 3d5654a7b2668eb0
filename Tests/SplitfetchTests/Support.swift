@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under the system temp directory, removed afterwards.
func withTemporaryDirectory<R>(_ body: (String) async throws -> R) async throws -> R {
    var template = Array("/tmp/splitfetch-test-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    guard let made else { throw TestFailure("mkdtemp failed") }
    let path = String(cString: made)
    defer { removeTree(path) }
    return try await body(path)
}

/// Removes a directory of plain files (the tests create nothing deeper).
func removeTree(_ path: String) {
    for name in directoryEntries(path) { unlink(path + "/" + name) }
    rmdir(path)
}

/// Runs `body` with a test server that is shut down afterwards.
func withServer<R>(_ configuration: TestServer.Configuration = .init(), _ body: (TestServer) async throws -> R) async throws -> R {
    let server = try await TestServer(configuration: configuration)
    do {
        let result = try await body(server)
        await server.shutdown()
        return result
    } catch {
        await server.shutdown()
        throw error
    }
}

/// The names in a directory, sorted, without `.` and `..`.
func directoryEntries(_ path: String) -> [String] {
    guard let dir = opendir(path) else { return [] }
    defer { closedir(dir) }
    var names: [String] = []
    while let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names.sorted()
}

func fileExists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}

func fileSize(_ path: String) -> Int64? {
    var info = stat()
    return stat(path, &info) == 0 ? Int64(info.st_size) : nil
}

/// Whether the suites run under ThreadSanitizer (`SPLITFETCH_UNDER_TSAN`, set by scripts/test).
let underThreadSanitizer = getenv("SPLITFETCH_UNDER_TSAN") != nil

/// A probe or stall timeout for a test that is not about timeouts: under ThreadSanitizer every
/// suite runs at once several times slower, and a probe answered after a few seconds is slow,
/// not lost; a retry would break the tests that count requests.
func patientTimeout(_ normal: Duration) -> Duration {
    sanitizerTimeout(normal, atLeast: .seconds(30))
}

/// `normal`, or under ThreadSanitizer at least `floor`.
func sanitizerTimeout(_ normal: Duration, atLeast floor: Duration) -> Duration {
    underThreadSanitizer ? max(normal, floor) : normal
}

/// A stall timeout a test wants short, to give up on scripted stalls quickly: under
/// ThreadSanitizer at least 5 s, so that a healthy transfer starved for a second is not taken for
/// stalled (a full run on a loaded machine once gave up on one after six 1 s "stalls").
func briskTimeout(_ normal: Duration) -> Duration {
    sanitizerTimeout(normal, atLeast: .seconds(5))
}

/// Options that keep tests quick: short timeouts and retry delays.
func testOptions(connections: Int = 8, minimumSegmentSize: Int64 = 256 << 10) -> DownloadOptions {
    var options = DownloadOptions()
    options.connections = connections
    options.minimumSegmentSize = minimumSegmentSize
    options.minimumSplitSize = 16 << 10
    options.retry.baseDelay = .milliseconds(10)
    options.retry.maximumDelay = .milliseconds(200)
    options.timeouts.probe = patientTimeout(.seconds(5))
    options.timeouts.connect = .seconds(5)
    options.timeouts.stall = patientTimeout(.seconds(10))
    options.progressInterval = .milliseconds(50)
    options.durability.syncBeforeRename = false
    return options
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Expects that the download fetched only the `needed` bytes it lacked: every byte it received
/// was written, except, once per split, the end of the piece that crossed the range's new end
/// (at most one receive buffer). Counted where the bytes arrive: a server's count of bytes sent
/// also holds what sat in loopback socket buffers when a split or a reset closed a connection,
/// megabytes (under ThreadSanitizer in CI, 6.8 MB sent for a 3 MB file).
func expectOnlyMissingBytesFetched(_ stats: DownloadStatistics, needed: Int64,
                                   sourceLocation: SourceLocation = #_sourceLocation) {
    let overshoot = Int64(stats.splits) * Int64(CurlTransfer.receiveBufferSize)
    #expect(stats.bytesReceived >= needed && stats.bytesReceived - needed <= overshoot,
            "\(stats.bytesReceived) received for \(needed) needed, \(stats.retries) retries, \(stats.splits) splits",
            sourceLocation: sourceLocation)
}

/// Downloads `url` to `path` and returns the statistics and the file's SHA-256.
/// Downloads `size` bytes of the server's synthetic content (with `query`) into a fresh
/// directory and expects the right SHA-256 and no partial file left.
func expectCorrectDownload(_ server: TestServer, size: Int64, query: [String: String], options: DownloadOptions,
                           sourceLocation: SourceLocation = #_sourceLocation) async throws -> DownloadStatistics {
    try await withTemporaryDirectory { dir in
        let (stats, digest) = try await download(server.url(size: size, query: query), to: dir + "/f", options: options)
        #expect(digest == SyntheticContent(size: size).sha256Hex(), sourceLocation: sourceLocation)
        #expect(!fileExists(dir + "/f.part"), sourceLocation: sourceLocation)
        return stats
    }
}

func download(_ url: String, to path: String, options: DownloadOptions) async throws -> (DownloadStatistics, String) {
    let statistics = try await Download(url, to: FilePath(path), options: options).run()
    return (statistics, try sha256HexOfFile(atPath: path))
}

func write(_ text: String, to path: String) {
    let f = fopen(path, "w")!
    fputs(text, f)
    fclose(f)
}

func read(_ path: String) -> String? {
    guard let f = fopen(path, "r") else { return nil }
    defer { fclose(f) }
    var out = ""
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = fread(&buffer, 1, buffer.count, f)
        if n <= 0 { break }
        out += String(decoding: buffer[0..<n], as: UTF8.self)
    }
    return out
}

/// Runs a download that must fail and returns its error (recording an issue if it succeeds).
func failure(_ url: String, to path: String, options: DownloadOptions,
             sourceLocation: SourceLocation = #_sourceLocation) async -> DownloadError? {
    do {
        _ = try await Download(url, to: FilePath(path), options: options).run()
        Issue.record("download of \(url) succeeded but should have failed", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}
