@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// The partial downloads a directory holds, found from their manifests, and resumed from them.
@Suite("Partial downloads")
struct PartialDownloadTests {
    @Test func interruptedDownloadsAreListedAndResumeFromTheList() async throws {
        try await withServer(.init(rateLimit: 1 << 20)) { server in
            try await withTemporaryDirectory { dir in
                let sizes: [Int64] = [(3 << 20) + 7, (2 << 20) + 11, 5 << 20]
                var options = testOptions(connections: 4, minimumSegmentSize: 256 << 10)
                options.durability.checkpointInterval = .milliseconds(50)
                for (index, size) in sizes.enumerated() {
                    let error = await interrupt(server.url(size: size, name: "f\(index).bin", seed: UInt64(index + 1)),
                                                to: dir + "/f\(index).bin", options: options, after: 512 << 10)
                    #expect(error?.code == .interrupted, "\(error?.message ?? "finished")")
                    // The library's words: what was kept, and that running it again resumes.
                    #expect(error?.remedy == .resume)
                    #expect(error?.message.contains(dir + "/f\(index).bin.part") == true && error?.message.contains("command") == false,
                            "\(error?.message ?? "")")
                }
                // Not downloads: a manifest without its partial file, one that is not a manifest, a
                // finished file, and a partial in a subdirectory.
                writeBytes(Array("{}".utf8), to: dir + "/orphan.bin.part.json")
                writeBytes(Array("not json".utf8), to: dir + "/junk.bin.part")
                writeBytes(Array("not json".utf8), to: dir + "/junk.bin.part.json")
                writeBytes([1, 2, 3], to: dir + "/done.bin")

                let found = try await PartialDownload.list(in: FilePath(dir))
                #expect(found.map(\.destination) == (0..<3).map { FilePath(dir + "/f\($0).bin") })
                for (index, partial) in found.enumerated() {
                    #expect(partial.size == sizes[index])
                    // Some bytes, as many as the manifest vouches for: a run slowed down (ThreadSanitizer)
                    // may have had all of them when it was stopped.
                    #expect(partial.bytesOnDisk > 0 && partial.bytesOnDisk <= sizes[index], "\(partial.bytesOnDisk)")
                    #expect(partial.url == server.url(size: sizes[index], name: "f\(index).bin", seed: UInt64(index + 1)))
                    #expect(partial.etag == "\"sf-\(sizes[index])-\(index + 1)\"")
                }

                // A restarted program resumes each from the list alone.
                for partial in found {
                    let statistics = try await Download(partial.url, to: partial.destination, options: options).run()
                    #expect(statistics.resumedBytes > 0)
                }
                for (index, size) in sizes.enumerated() {
                    #expect(try sha256HexOfFile(atPath: dir + "/f\(index).bin") == SyntheticContent(size: size, seed: UInt64(index + 1)).sha256Hex())
                }
                #expect(try await PartialDownload.list(in: FilePath(dir)).isEmpty)
            }
        }
    }

    @Test func aDirectoryThatCannotBeReadIsAFileError() async {
        await #expect(throws: DownloadError.self) { _ = try await PartialDownload.list(in: "/nonexistent/splitfetch-partials") }
    }
}
