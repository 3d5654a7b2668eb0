@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Downloads read in order: the `AsyncSequence` of chunks, a pipe, and the ring file between
/// them. Every stream is checked by SHA-256 against the content served.
@Suite("In order")
struct InOrderTests {
    static let size: Int64 = 5 << 20 + 4321
    static var sha256: String { SyntheticContent(size: size).sha256Hex() }

    /// Reads `bytes` to its end (or its error), slowly when `pause` is given: after every chunk
    /// the consumer yields for that long, so the download runs ahead of it into the window.
    static func consume(_ bytes: DownloadBytes, pause: Duration? = nil) async -> (SHA256Stream, DownloadError?) {
        var hash = SHA256Stream()
        do throws(DownloadError) {
            for try await chunk in bytes {
                hash.update(chunk)
                if let pause { try? await Task.sleep(for: pause) }
            }
            return (hash, nil)
        } catch {
            return (hash, error)
        }
    }

    static let cases: [(String, [String: String], Int, Int64)] = [
        ("ranges, 8 connections, 1 MiB window", [:], 8, 1 << 20),
        ("ranges, 3 connections, default window", [:], 3, DownloadOptions().window),
        ("no ranges: one stream paused by the window", ["norange": "1"], 8, 1 << 20),
        ("one connection", [:], 1, 1 << 20),
        ("capped ranges", ["rangecap": "300000"], 4, 1 << 20),
    ]

    @Test(arguments: cases)
    func theFileArrivesInOrder(label: String, query: [String: String], connections: Int, window: Int64) async throws {
        try await withServer { server in
            var options = testOptions(connections: connections)
            options.window = window
            let bytes = Download.bytes(of: server.url(size: Self.size, query: query), options: options)
            let (hash, error) = await Self.consume(bytes)
            #expect(error == nil, "\(label): \(String(describing: error))")
            #expect(hash.count == Self.size, "\(label)")
            #expect(hash.finish() == Self.sha256, "\(label)")
        }
    }

    /// A consumer far slower than the server: the connections wait for it (paused, or with no
    /// range to take beyond the window). A byte written past the window would overwrite one not
    /// yet read in the ring, and the hash would show it.
    @Test(arguments: [[String: String](), ["norange": "1"]])
    func aSlowConsumerHoldsTheDownloadInsideTheWindow(query: [String: String]) async throws {
        try await withServer { server in
            var options = testOptions(connections: 4)
            options.window = 1 << 20
            let bytes = Download.bytes(of: server.url(size: 3 << 20, query: query), options: options)
            let (hash, error) = await Self.consume(bytes, pause: .milliseconds(20))
            #expect(error == nil)
            #expect(hash.finish() == SyntheticContent(size: 3 << 20).sha256Hex())
        }
    }

    @Test func aDigestIsCheckedAsTheBytesPass() async throws {
        try await withServer { server in
            let good = Download.bytes(of: server.url(size: Self.size, query: ["digest": "repr"]), options: testOptions(connections: 4))
            let verified = Task {
                for await event in good.download.events { if let s = event.statistics { return s.verified.count } }
                return 0
            }
            let (hash, error) = await Self.consume(good)
            #expect(error == nil)
            #expect(hash.finish() == Self.sha256)
            #expect(await verified.value == 1)

            let bad = Download.bytes(of: server.url(size: Self.size, query: ["digest": "repr", "corrupt": "4000000"]),
                                     options: testOptions(connections: 4))
            let (_, badError) = await Self.consume(bad)
            #expect(badError?.code == .integrity)
        }
    }

    @Test func aFailedDownloadEndsTheSequenceWithItsError() async throws {
        try await withServer { server in
            let bytes = Download.bytes(of: server.baseURL + "/missing", options: testOptions(connections: 4))
            let (hash, error) = await Self.consume(bytes)
            #expect(error?.code == .http)
            #expect(hash.count == 0)
        }
    }

    /// Leaving the loop early stops the download: its events end (``Download/run()`` returned)
    /// without a `.finished`.
    @Test func leavingTheLoopStopsTheDownload() async throws {
        try await withServer { server in
            var options = testOptions(connections: 4)
            options.window = 1 << 20
            let bytes = Download.bytes(of: server.url(size: 256 << 20), options: options)
            let finished = Task {
                var finished = false
                for await event in bytes.download.events { if event.kind == .finished { finished = true } }
                return finished
            }
            var taken: Int64 = 0
            for try await chunk in bytes {
                taken += Int64(chunk.count)
                if taken >= 1 << 20 { break }
            }
            #expect(await finished.value == false)
        }
    }

    /// A pipe whose reader has gone: the download ends with `outputClosed`, and SIGPIPE does not
    /// end the test process.
    @Test func aClosedPipeEndsTheDownload() async throws {
        try await withServer { server in
            var ends: [Int32] = [0, 0]
            #expect(pipe(&ends) == 0)
            close(ends[0])
            defer { close(ends[1]) }
            let download = Download(server.url(size: Self.size), writingTo: FileDescriptor(rawValue: ends[1]),
                                    options: testOptions(connections: 4))
            do throws(DownloadError) {
                _ = try await download.run()
                Issue.record("the download finished into a closed pipe")
            } catch {
                #expect(error.code == .outputClosed)
            }
        }
    }

    /// The ring keeps the byte at offset `o` at `o % capacity`: a write and a read across its
    /// end come back whole.
    @Test func theRingWrapsWritesAndReads() throws {
        let ring = try OutputFile.createRing(capacity: 1000, inDirectory: FileSystem.temporaryDirectory)
        defer { ring.close() }
        let first = (0..<700).map { UInt8(truncatingIfNeeded: $0) }
        let second = (0..<600).map { UInt8(truncatingIfNeeded: $0 * 7 + 3) }
        try first.withUnsafeBytes { try ring.write($0, at: 0) }
        var back = [UInt8](repeating: 0, count: 700)
        try back.withUnsafeMutableBytes { try ring.read(into: $0, at: 0) }
        #expect(back == first)
        // Offsets 700..<1300: 300 bytes at the ring's end, 300 at its start.
        try second.withUnsafeBytes { try ring.write($0, at: 700) }
        var wrapped = [UInt8](repeating: 0, count: 600)
        try wrapped.withUnsafeMutableBytes { try ring.read(into: $0, at: 700) }
        #expect(wrapped == second)
        #expect(try ring.currentSize() == 1000)
    }
}
