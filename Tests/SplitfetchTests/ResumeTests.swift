import CShims
import DownloadCore
import FoundationEssentials
@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Writes bytes to a file, replacing it.
func writeBytes(_ bytes: [UInt8], to path: String) {
    let f = fopen(path, "wb")!
    _ = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
    fclose(f)
}

func readBytes(_ path: String) -> [UInt8]? {
    guard let f = fopen(path, "rb") else { return nil }
    defer { fclose(f) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = fread(&buffer, 1, buffer.count, f)
        if n <= 0 { break }
        out += buffer[0..<n]
    }
    return out
}

/// Starts a download and cancels it once `bytes` are written; returns the error it ended with.
func interrupt(_ url: String, to path: String, options: DownloadOptions, after bytes: Int64) async -> DownloadError? {
    let download = Download(url, to: FilePath(path), options: options)
    let task = Task { try await download.run() }
    for await event in download.events {
        if let p = event.progress, p.bytesWritten >= bytes { break }
    }
    task.cancel()
    do {
        _ = try await task.value
        return nil
    } catch let error as DownloadError {
        return error
    } catch {
        return DownloadError(.fileIO, "\(error)")
    }
}

@Suite("Resume")
struct ResumeTests {
    static let fixtures: String = {
        let file = #filePath
        return String(file[..<file.lastIndex(of: "/")!]) + "/Fixtures"
    }()

    /// A manifest as the previous release wrote it (version 1): `JSONEncoder`'s pretty, sorted
    /// JSON with the checksum inside, over the compact form.
    static func versionOneBytes(_ manifest: Manifest) throws -> [UInt8] {
        var old = manifest
        old.version = 1
        old.checksum = ManifestCodec.versionOneChecksum(of: old)
        let pretty = JSONEncoder()
        pretty.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return Array(try pretty.encode(old)) + [UInt8(ascii: "\n")]
    }

    @Test func versionOneFixtureFromThePreviousReleaseStillDecodes() throws {
        let bytes = try #require(readBytes(Self.fixtures + "/manifest-v1.json"))
        let manifest = try ManifestCodec.decode(bytes, path: "manifest-v1.json")
        #expect(manifest.version == 1)
        #expect(manifest.url == "https://example.org/debian-12.iso")
        #expect(manifest.size == 1_000_000)
        #expect(manifest.etag == "\"abc123\"")
        #expect(manifest.segments.count == 3)
        #expect(manifest.storedBytes(currentBootID: nil) == 250_000 + 100_000 + 0)
        #expect(manifest.storedBytes(currentBootID: "7f3c5e1a-0000-4000-8000-000000000001") == 250_000 + 200_000 + 0)
        // The helper below writes exactly what the previous release wrote.
        #expect(try Self.versionOneBytes(manifest) == bytes)
        // Saved again, it becomes version 2 with the same content.
        var again = try ManifestCodec.decode(ManifestCodec.encode(manifest), path: "m")
        #expect(again.version == 2 && again.checksum == nil)
        again.version = 1
        again.checksum = manifest.checksum
        #expect(again == manifest)
    }

    /// Version 2: awkward strings round-trip, the trailer holds the CRC-32 of the stored bytes
    /// before it, and any byte flipped anywhere is caught.
    @Test func versionTwoChecksumCoversTheStoredBytes() throws {
        var awkward = "q\"b\\s/ é€😀 \u{7f}\u{2028}\u{feff}"
        for c in 0..<0x20 { awkward.unicodeScalars.append(Unicode.Scalar(UInt8(c))) }
        let all = Manifest(url: "https://example.org/a b?x=1&y=\"2\"", finalURL: awkward, size: Int64.max,
                           etag: awkward, lastModified: "Mon, 02 Nov 2026 10:00:00 GMT", minimumSegmentSize: 1 << 20,
                           bootID: "7f3c5e1a-0000-4000-8000-000000000001",
                           segments: [.init(start: 0, end: 5, written: 0, cached: 3), .init(start: 5, end: Int64.max, written: 9)])
        let bytes = ManifestCodec.encode(all)
        #expect(try ManifestCodec.decode(bytes, path: "m") == all)
        let text = String(decoding: bytes, as: UTF8.self)
        let lines = text.split(separator: "\n")
        let body = Array(bytes[..<(bytes.count - lines.last!.utf8.count - 1)])
        let crc = String(CRC32.checksum(body), radix: 16)
        #expect(lines.last! == "{\"crc32\" : \"\(String(repeating: "0", count: 8 - crc.count) + crc)\"}")
        #expect(!text.contains("\"checksum\""))
        var rng = SplitMix64(seed: 11)
        for _ in 0..<200 {
            var damaged = bytes
            let at = Int(rng.next() % UInt64(damaged.count - 1))
            damaged[at] ^= UInt8(1 << (rng.next() % 8))
            #expect(throws: DownloadError.self, "byte \(at) flipped") { _ = try ManifestCodec.decode(damaged, path: "m") }
        }
    }

    @Test("damaged or foreign manifests are named clear errors", arguments: [
        ("manifest-v9-future.json", "format version 9"),
        ("manifest-overlap.json", "overlaps"),
        ("manifest-written-past-end.json", "checksum"),
    ])
    func badFixtures(name: String, expected: String) throws {
        let bytes = try #require(readBytes(Self.fixtures + "/" + name))
        #expect(throws: DownloadError.self) { _ = try ManifestCodec.decode(bytes, path: name) }
        do {
            _ = try ManifestCodec.decode(bytes, path: name)
        } catch {
            #expect(error.code == .badManifest)
            #expect(error.message.contains(name))
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    @Test func inconsistentNumbersAreRejectedEvenWithAValidChecksum() {
        let base = Manifest(url: "http://h/f", finalURL: "http://h/f", size: 100, etag: nil, lastModified: nil,
                            minimumSegmentSize: 1, bootID: nil, segments: [.init(start: 0, end: 100, written: 0)])
        var cases: [(Manifest, String)] = []
        var m = base; m.segments = [.init(start: 0, end: 100, written: 101)]; cases.append((m, "outside"))
        m = base; m.segments = [.init(start: 0, end: 60, written: 0), .init(start: 50, end: 100, written: 50)]; cases.append((m, "overlaps"))
        m = base; m.segments = [.init(start: 0, end: 120, written: 0)]; cases.append((m, "past the size"))
        m = base; m.segments = [.init(start: -5, end: 100, written: 0)]; cases.append((m, "negative"))
        m = base; m.segments = [.init(start: 0, end: 50, written: 0)]; cases.append((m, "end at 50"))
        m = base; m.size = -1; cases.append((m, "negative size"))
        m = base; m.segments = [.init(start: 0, end: 100, written: 10, cached: 200)]; cases.append((m, "cached"))
        for (manifest, expected) in cases {
            do {
                _ = try ManifestCodec.decode(ManifestCodec.encode(manifest), path: "m.json")
                Issue.record("accepted: \(expected)")
            } catch {
                #expect(error.message.contains(expected), "\(error.message)")
            }
        }
    }

    @Test func interruptedDownloadResumesWithAnotherConnectionCount() async throws {
        try await withServer(.init(rateLimit: 2 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 12 << 20
                let path = dir + "/r.bin"
                // The first twelve range responses stop after 1 MiB and stay silent, so the first
                // run cannot end before its interrupt however late the progress event is read
                // (it finished first once, under ThreadSanitizer on a loaded machine).
                let url = server.url(size: size, seed: 3, query: ["fault": "stall", "faultbytes": String(1 << 20), "faultuntil": "12"])
                var first = testOptions(connections: 4)
                first.timeouts.stall = .seconds(60)
                let error = await interrupt(url, to: path, options: first, after: 3 << 20)
                #expect(error?.code == .interrupted)
                #expect(error?.message.contains("paused at") == true)
                #expect(fileExists(path + ".part") && fileExists(path + ".part.json"))
                #expect(!fileExists(path))
                let manifest = try ManifestCodec.decode(try #require(readBytes(path + ".part.json")), path: "m")
                #expect(manifest.storedBytes(currentBootID: currentBootID) >= 3 << 20)

                // Stalls the first run left unused are given up on at once.
                var second = testOptions(connections: 7)
                second.timeouts.stall = briskTimeout(.seconds(1))
                let (stats, digest) = try await download(url, to: path, options: second)
                #expect(digest == SyntheticContent(size: size, seed: 3).sha256Hex())
                #expect(stats.resumedBytes >= 3 << 20)
                expectOnlyMissingBytesFetched(stats, needed: size - stats.resumedBytes)
                #expect(!fileExists(path + ".part") && !fileExists(path + ".part.json"))
            }
        }
    }

    /// A download that is one response has no manifest and no name on disk until its first
    /// checkpoint; interrupted after it, it is `NAME.part` with a manifest and resumes.
    @Test func aOneResponseDownloadIsNamedWithItsFirstManifestAndResumes() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3 << 20
                let path = dir + "/one.bin"
                // The first response stops after 1.5 MiB and stays silent, so the interrupt comes
                // before the end however late its progress event is read (ThreadSanitizer); the
                // rerun's request is served whole.
                let stalling = ["fault": "stall", "faultbytes": String(3 << 19), "faultuntil": "1"]
                let url = server.url(size: size, seed: 5, query: stalling)
                var options = testOptions(connections: 1, minimumSegmentSize: 64 << 20)
                options.timeouts.stall = .seconds(60)
                let error = await interrupt(url, to: path, options: options, after: 1 << 20)
                #expect(error?.code == .interrupted)
                #expect(error?.message.contains("paused at") == true)
                #expect(fileExists(path + ".part") && fileExists(path + ".part.json"))
                let (stats, digest) = try await download(url, to: path, options: options)
                #expect(digest == SyntheticContent(size: size, seed: 5).sha256Hex())
                #expect(stats.resumedBytes >= 1 << 20)
                #expect(directoryEntries(dir) == ["one.bin"])
            }
        }
    }

    /// Until its first checkpoint, a one-response download has nothing on disk under any name,
    /// so a run killed then leaves nothing that could stop the next.
    @Test func aOneResponseDownloadHasNoNameBeforeItsFirstCheckpoint() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3 << 19
                var options = testOptions(connections: 1, minimumSegmentSize: 64 << 20)
                options.durability.checkpointInterval = .zero
                options.durability.quickCheckpointInterval = .zero
                // The first response stops after 64 KiB until the client gives up on it (3 s; 30 s
                // under ThreadSanitizer, where a loaded machine once delayed the event past the
                // retry); the retry brings the rest. So the look at the directory, however late
                // the event that prompts it, comes while the file cannot be complete.
                options.timeouts.stall = underThreadSanitizer ? .seconds(30) : .seconds(3)
                let stalling = ["fault": "stall", "faultbytes": "65536", "faultuntil": "1"]
                let download = Download(server.url(size: size, seed: 6, query: stalling), to: FilePath(dir + "/quiet.bin"), options: options)
                let task = Task { try await download.run() }
                var seen: [String]?
                for await event in download.events {
                    if let p = event.progress, p.bytesWritten > 0 {
                        seen = directoryEntries(dir)
                        break
                    }
                }
                _ = try await task.value
                #expect(seen == [])
                #expect(try sha256HexOfFile(atPath: dir + "/quiet.bin") == SyntheticContent(size: size, seed: 6).sha256Hex())
                #expect(directoryEntries(dir) == ["quiet.bin"])
            }
        }
    }

    /// Every prefix of a valid manifest, and random byte flips, as the manifest of a partial file
    /// whose unwritten bytes are garbage: each run must end in a clear error or a correct file.
    @Test func everyPrefixAndRandomFlipsEndInAClearErrorOrACorrectFile() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 96 << 10
                let url = server.url(size: size, seed: 11)
                let content = SyntheticContent(size: size, seed: 11).bytes(0..<size)
                let expected = SyntheticContent(size: size, seed: 11).sha256Hex()
                let segments: [Manifest.Segment] = [.init(start: 0, end: 32 << 10, written: 20 << 10),
                                                    .init(start: 32 << 10, end: 64 << 10, written: 32 << 10),
                                                    .init(start: 64 << 10, end: size, written: 70 << 10)]
                var partial = [UInt8](repeating: 0xAA, count: Int(size))
                for s in segments { partial.replaceSubrange(Int(s.start)..<Int(s.written), with: content[Int(s.start)..<Int(s.written)]) }
                let manifest = Manifest(url: url, finalURL: url, size: size, etag: "\"sf-\(size)-11\"",
                                        lastModified: "Mon, 02 Nov 2026 10:00:00 GMT", minimumSegmentSize: 1 << 20,
                                        bootID: nil, segments: segments)
                let valid = ManifestCodec.encode(manifest)
                var variants: [[UInt8]] = (0...valid.count).map { Array(valid[0..<$0]) }
                var rng = SplitMix64(seed: 2026)
                for _ in 0..<300 {
                    var flipped = valid
                    let i = Int(rng.next() % UInt64(flipped.count))
                    flipped[i] ^= UInt8(1 << (rng.next() % 8))
                    variants.append(flipped)
                }
                variants.append([UInt8](repeating: 0, count: valid.count))
                var options = testOptions(connections: 3, minimumSegmentSize: 16 << 10)
                options.minimumSplitSize = 8 << 10
                var completed = 0
                for (index, variant) in variants.enumerated() {
                    let path = dir + "/v\(index).bin"
                    writeBytes(partial, to: path + ".part")
                    writeBytes(variant, to: path + ".part.json")
                    var succeeded = false
                    do throws(DownloadError) {
                        _ = try await Download(url, to: FilePath(path), options: options).run()
                        succeeded = true
                    } catch {
                        #expect([.badManifest, .resumeConflict].contains(error.code), "variant \(index): \(error.message)")
                        #expect(error.message.contains(path), "variant \(index): message does not name the file")
                        #expect(!fileExists(path), "variant \(index) left a final file after an error")
                    }
                    if succeeded {
                        completed += 1
                        let digest = try? sha256HexOfFile(atPath: path)
                        #expect(digest == expected, "variant \(index) produced a wrong file")
                    }
                    unlink(path); unlink(path + ".part"); unlink(path + ".part.json")
                }
                #expect(completed >= 1)  // the full, undamaged manifest resumes
            }
        }
    }

    @Test func remoteChangeIsReportedAndRestartFetchesTheNewFile() async throws {
        try await withServer(.init(rateLimit: 2 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 8 << 20
                let path = dir + "/c.bin"
                // The first four range requests stall after 512 KiB, so the interruption always
                // lands before the end, however slow the machine; later requests are healthy.
                let url = server.url(size: size, name: "c.bin", query: ["fault": "stall", "faultbytes": "524288", "faultuntil": "4"])
                let first = await interrupt(url, to: path, options: testOptions(connections: 4), after: 1 << 20)
                #expect(first?.code == .interrupted)
                server.changeContent(path: "/size/\(size)/c.bin", seed: 99, etag: "v2")

                let partBefore = readBytes(path + ".part")
                let changed = await failure(url, to: path, options: testOptions())
                #expect(changed?.code == .remoteChanged)
                #expect(changed?.remedy == .restart)
                #expect(readBytes(path + ".part") == partBefore)
                #expect(!fileExists(path))

                var options = testOptions()
                options.restart = true
                let (_, digest) = try await download(url, to: path, options: options)
                #expect(digest == SyntheticContent(size: size, seed: 99).sha256Hex())
            }
        }
    }

    @Test func changeDuringTheDownloadIsNeverMixedIn() async throws {
        // Slow connections force splits, so new requests go out after the file changes.
        try await withServer(.init(rateLimit: 1 << 20, slowEvery: 2, slowFactor: 8)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 8 << 20
                let path = dir + "/m.bin"
                let download = Download(server.url(size: size, name: "m.bin"), to: FilePath(path), options: testOptions(connections: 4))
                let task = Task { try await download.run() }
                for await event in download.events {
                    if let p = event.progress, p.bytesWritten > 512 << 10 { break }
                }
                server.changeContent(path: "/size/\(size)/m.bin", seed: 5, etag: "v2")
                let requestsAtTheChange = server.statistics.requests
                do {
                    _ = try await task.value
                    // Only acceptable if every byte is from the old file.
                    #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: size).sha256Hex())
                } catch let error as DownloadError {
                    #expect(error.code == .remoteChanged, "\(error.message)")
                    #expect(error.message.contains("changed"))
                    #expect(!fileExists(path))
                }
                // Requests after the change did happen; under a loaded ThreadSanitizer run the
                // change can come after the last request went out (the bytes are checked above).
                #expect(server.statistics.requests > requestsAtTheChange || underThreadSanitizer)
            }
        }
    }

    @Test func partialFileWithoutManifestIsNotTouched() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/p.bin"
                writeBytes([1, 2, 3], to: path + ".part")
                let error = await failure(server.url(size: 1000), to: path, options: testOptions())
                #expect(error?.code == .resumeConflict)
                #expect(error?.remedy == .restart)
                #expect(readBytes(path + ".part") == [1, 2, 3])
                var options = testOptions()
                options.restart = true
                let (_, digest) = try await download(server.url(size: 1000), to: path, options: options)
                #expect(digest == SyntheticContent(size: 1000).sha256Hex())
            }
        }
    }

    /// What `kill -9` leaves during a stream (a server without ranges keeps no manifest), and in
    /// the moment between naming a segmented download's file and saving its first manifest: a
    /// marked `NAME.part` alone. The same URL starts over; another URL is refused, as for any
    /// partial file without a manifest.
    @Test func aPartialFileLeftBeforeItsFirstManifestStartsOverForItsURL() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 3 << 20
                let path = dir + "/s.bin"
                // No ranges; the first request stalls after 64 KiB, the next is healthy.
                let url = server.url(size: size, name: "s.bin", query: ["norange": "1", "fault": "stall", "faultuntil": "1"])
                let first = Download(url, to: FilePath(path), options: testOptions())
                let task = Task { try await first.run() }
                for await event in first.events {
                    if let p = event.progress, p.bytesWritten > 0 { break }
                }
                // A second name for the file keeps it as it is when the run is stopped (a stopped
                // stream removes its file; a killed one cannot).
                #expect(link(path + ".part", dir + "/kept") == 0)
                task.cancel()
                _ = try? await task.value
                #expect(!fileExists(path + ".part"))
                #expect(rename(dir + "/kept", path + ".part") == 0)
                #expect(!fileExists(path + ".part.json"))
                #expect(OwnerMark.names(url, on: path + ".part"))
                let left = readBytes(path + ".part")

                let other = server.url(size: size, name: "s.bin", query: ["norange": "1"])
                let refused = await failure(other, to: path, options: testOptions())
                #expect(refused?.code == .resumeConflict)
                #expect(readBytes(path + ".part") == left)

                let (_, digest) = try await download(url, to: path, options: testOptions())
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                #expect(!fileExists(path + ".part"))
            }
        }
    }

    /// Every `NAME.part` carries its run's mark from the moment it has its name, and the finished
    /// file does not.
    @Test(arguments: [1, 4])
    func partialFilesAreMarkedAndFinishedFilesAreNot(connections: Int) async throws {
        try await withServer(.init(rateLimit: 2 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 6 << 20
                let path = dir + "/m.bin"
                let url = server.url(size: size, query: ["fault": "stall", "faultbytes": String(1 << 20), "faultuntil": String(connections)])
                var options = testOptions(connections: connections)
                options.timeouts.stall = .seconds(60)
                let error = await interrupt(url, to: path, options: options, after: 512 << 10)
                #expect(error?.code == .interrupted)
                #expect(fileExists(path + ".part.json"))
                #expect(OwnerMark.names(url, on: path + ".part"))
                #expect(!OwnerMark.names(url + "&other", on: path + ".part"))
                let (stats, digest) = try await download(url, to: path, options: testOptions(connections: connections))
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                #expect(stats.resumedBytes > 0)
                var byte: UInt8 = 0
                #expect(sf_get_attribute(path, OwnerMark.attributeName, &byte, 1) == -1 && errno == ENODATA)
            }
        }
    }

    @Test func manifestForAnotherURLIsRefused() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/u.bin"
                let stalling = ["fault": "stall", "faultbytes": "65536", "faultuntil": "2"]
                let first = await interrupt(server.url(size: 4 << 20, name: "a.bin", query: stalling), to: path,
                                            options: testOptions(connections: 2), after: 64 << 10)
                #expect(first?.code == .interrupted)
                let error = await failure(server.url(size: 4 << 20, name: "b.bin"), to: path, options: testOptions())
                #expect(error?.code == .resumeConflict)
                #expect(error?.message.contains("a.bin") == true)
            }
        }
    }

    @Test func secondDownloadToTheSameFileIsRefused() async throws {
        try await withServer(.init(rateLimit: 256 << 10)) { server in
            try await withTemporaryDirectory { dir in
                let path = dir + "/l.bin"
                let url = server.url(size: 8 << 20)
                let first = Download(url, to: FilePath(path), options: testOptions(connections: 2))
                let task = Task { try await first.run() }
                for await event in first.events {
                    if let p = event.progress, p.bytesWritten > 0 { break }
                }
                let second = await failure(url, to: path, options: testOptions())
                #expect(second?.code == .resumeConflict)
                #expect(second?.message.contains("another splitfetch") == true)
                task.cancel()
                _ = try? await task.value
            }
        }
    }

    /// A partial file and manifest left by the previous release (manifest version 1) resume.
    @Test func aDownloadPausedByThePreviousReleaseResumes() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = (3 << 20) + 123
                let url = server.url(size: size, seed: 9)
                let path = dir + "/old.bin"
                let content = SyntheticContent(size: size, seed: 9)
                // The first 1 MiB of each half is on disk; the rest of the file is zeros.
                var partial = [UInt8](repeating: 0, count: Int(size))
                let half = size / 2
                for range in [0..<Int64(1 << 20), half..<(half + (1 << 20))] {
                    partial.replaceSubrange(Int(range.lowerBound)..<Int(range.upperBound), with: content.bytes(range))
                }
                writeBytes(partial, to: path + ".part")
                let manifest = Manifest(url: url, finalURL: url, size: size, etag: nil, lastModified: nil,
                                        minimumSegmentSize: 1 << 20, bootID: nil,
                                        segments: [.init(start: 0, end: half, written: 1 << 20),
                                                   .init(start: half, end: size, written: half + (1 << 20))])
                writeBytes(try Self.versionOneBytes(manifest), to: path + ".part.json")
                let (stats, digest) = try await download(url, to: path, options: testOptions(connections: 2))
                #expect(digest == content.sha256Hex())
                #expect(stats.resumedBytes == 2 << 20)
                expectOnlyMissingBytesFetched(stats, needed: size - (2 << 20))
                #expect(!fileExists(path + ".part") && !fileExists(path + ".part.json"))
            }
        }
    }

    /// The quick slot's encoder writes the segments by hand into the rest encoded once: what it
    /// writes decodes to the same manifest, awkward strings and absent `cached` included, and
    /// any byte flipped is caught; a manifest that differs elsewhere does not fit it.
    @Test func theSplicedEncodingReadsBackAsTheManifest() throws {
        var awkward = "q\"segments\":[]b\\s/ é€😀 \u{7f}\u{2028}"
        for c in 0..<0x20 { awkward.unicodeScalars.append(Unicode.Scalar(UInt8(c))) }
        var manifest = Manifest(url: "https://example.org/a?\"segments\":[]", finalURL: awkward, size: Int64.max,
                                etag: awkward, lastModified: nil, minimumSegmentSize: 1 << 20, bootID: "b",
                                segments: [], serverDigest: nil)
        manifest.instance = "i"
        manifest.mirrors = ["http://m/\"x\""]
        let splicer = try #require(ManifestCodec.SegmentSplicer(manifest))
        for segments in [[Manifest.Segment.init(start: 0, end: Int64.max, written: 0, cached: 3)],
                         [.init(start: 0, end: 5, written: 2), .init(start: 5, end: Int64.max, written: 9, cached: Int64.max - 1)]] {
            var m = manifest
            m.segments = segments
            #expect(splicer.fits(m))
            let bytes = splicer.encode(m, paddedTo: 2000)
            #expect(bytes.count == 2000)
            #expect(try ManifestCodec.decode(bytes, path: "q") == m)
            var rng = SplitMix64(seed: UInt64(segments.count))
            for _ in 0..<50 {
                var damaged = bytes
                let at = Int(rng.next() % UInt64(damaged.count - 1))
                damaged[at] ^= UInt8(1 << (rng.next() % 8))
                #expect(throws: DownloadError.self) { _ = try ManifestCodec.decode(damaged, path: "q") }
            }
        }
        var other = manifest
        other.bootID = "c"
        #expect(!splicer.fits(other))
    }

    /// The quick slot: the run's first save goes to `NAME.part.json`, later ones overwrite the
    /// slot in place (never shrinking it, its checksum line at its end); it stands in for the
    /// durable manifest only with the same instance, on this boot, whole, and when it records more.
    @Test func theQuickSlotIsOverwrittenInPlaceAndTrustedOnlyWhenItMayBe() async throws {
        try await withTemporaryDirectory { dir in
            let store = ManifestStore(path: dir + "/f.part.json")
            let slot = QuickManifestSlot(path: store.quickPath)
            #expect(store.quickPath == dir + "/f.part.quick.json")
            let boot = "7f3c5e1a-0000-4000-8000-000000000001"
            var base = Manifest(url: "http://h/f", finalURL: "http://h/f", size: 1000, etag: "\"e\"", lastModified: nil,
                                minimumSegmentSize: 1, bootID: boot, segments: [.init(start: 0, end: 1000, written: 100)])
            base.instance = "abc"
            func with(_ cached: Int64, segments count: Int = 1) -> Manifest {
                var m = base
                let step = 1000 / Int64(count)
                m.segments = (0..<Int64(count)).map { i in
                    .init(start: i * step, end: i == Int64(count) - 1 ? 1000 : (i + 1) * step, written: i * step,
                          cached: i == 0 ? cached : i * step)
                }
                return m
            }
            try slot.save(with(200), base: store)
            #expect(readBytes(store.path) != nil && readBytes(store.quickPath) == nil)
            // Longer, then shorter: the file keeps the longer length and decodes to the shorter.
            try slot.save(with(300, segments: 4), base: store)
            let long = readBytes(store.quickPath)!.count
            try slot.save(with(400), base: store)
            let bytes = readBytes(store.quickPath)!
            #expect(bytes.count == long && long > ManifestCodec.encode(with(400)).count)
            #expect(try ManifestCodec.decode(bytes, path: "q") == with(400))
            let durable = try ManifestCodec.decode(readBytes(store.path)!, path: "m")
            #expect(durable == with(200))
            #expect(QuickManifestSlot.newer(at: store.quickPath, than: durable, currentBootID: boot) == with(400))
            // Another boot, another instance, fewer bytes, a torn write: the durable one holds.
            #expect(QuickManifestSlot.newer(at: store.quickPath, than: durable, currentBootID: "other") == nil)
            var foreign = durable
            foreign.instance = "xyz"
            #expect(QuickManifestSlot.newer(at: store.quickPath, than: foreign, currentBootID: boot) == nil)
            #expect(QuickManifestSlot.newer(at: store.quickPath, than: with(500), currentBootID: boot) == nil)
            var older = durable
            older.instance = nil
            #expect(QuickManifestSlot.newer(at: store.quickPath, than: older, currentBootID: boot) == nil)
            writeBytes(Array(bytes.prefix(bytes.count - 40)) + Array(repeating: UInt8(ascii: " "), count: 40), to: store.quickPath)
            #expect(QuickManifestSlot.newer(at: store.quickPath, than: durable, currentBootID: boot) == nil)
            store.remove()
            #expect(readBytes(store.quickPath) == nil && readBytes(store.path) == nil)
            slot.close()
        }
    }

    /// A killed run whose newest progress is only in the quick slot resumes from it.
    @Test func aRunResumesFromTheQuickSlotWhenItIsNewer() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = (2 << 20) + 77
                let url = server.url(size: size, seed: 12)
                let path = dir + "/q.bin"
                let content = SyntheticContent(size: size, seed: 12)
                var partial = [UInt8](repeating: 0, count: Int(size))
                partial.replaceSubrange(0..<(1 << 20), with: content.bytes(0..<(1 << 20)))
                writeBytes(partial, to: path + ".part")
                var durable = Manifest(url: url, finalURL: url, size: size, etag: "\"sf-\(size)-12\"",
                                       lastModified: nil, minimumSegmentSize: 1 << 20, bootID: currentBootID,
                                       segments: [.init(start: 0, end: size, written: 0, cached: 4096)])
                durable.instance = "run1"
                writeBytes(ManifestCodec.encode(durable), to: path + ".part.json")
                var quick = durable
                quick.segments = [.init(start: 0, end: size, written: 0, cached: 1 << 20)]
                writeBytes(ManifestCodec.encode(quick, paddedTo: 4096), to: path + ".part.quick.json")
                let (stats, digest) = try await download(url, to: path, options: testOptions(connections: 2))
                #expect(digest == content.sha256Hex())
                #expect(stats.resumedBytes == 1 << 20)
                #expect(!fileExists(path + ".part.quick.json") && !fileExists(path + ".part.json"))
            }
        }
    }

    @Test func runKilledBetweenRenameAndManifestRemovalCountsAsComplete() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let size: Int64 = 5000
                let url = server.url(size: size)
                let path = dir + "/k.bin"
                writeBytes(SyntheticContent(size: size).bytes(0..<size), to: path)
                let manifest = Manifest(url: url, finalURL: url, size: size, etag: nil, lastModified: nil, minimumSegmentSize: 1,
                                        bootID: nil, segments: [.init(start: 0, end: size, written: size)])
                writeBytes(ManifestCodec.encode(manifest), to: path + ".part.json")
                let (stats, digest) = try await download(url, to: path, options: testOptions())
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                #expect(stats.resumedBytes == size)
                #expect(!fileExists(path + ".part.json"))
            }
        }
    }
}
