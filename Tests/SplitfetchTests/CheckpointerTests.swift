import SegmentPlanning
@testable import Splitfetch
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The end of a segmented download runs on the checkpoint thread (`stop(saving:then:)`).
@Suite("Checkpointer")
struct CheckpointerTests {
    private static func checkpointer(in dir: String, storeDirectory: String? = nil,
                                     quickInterval: Double = 0) throws -> (Checkpointer, OutputFile) {
        let file = try OutputFile.create(path: dir + "/f.part", replace: false)
        let store = ManifestStore(path: (storeDirectory ?? dir) + "/f.part.json")
        let table = SharedSegmentTable(SegmentTable(size: 100, ranges: [ByteRange(0, 100)]))
        let template = Manifest(url: "http://h/f", finalURL: "http://h/f", size: 100, etag: nil, lastModified: nil,
                                minimumSegmentSize: 1, bootID: nil, segments: [])
        let checkpointer = Checkpointer(table: table, file: file, store: store, template: template,
                                        durableInterval: 0, quickInterval: quickInterval)
        return (checkpointer, file)
    }

    /// The calling thread's name, from `/proc/thread-self/comm` (Linux).
    private static func currentThreadName() -> String? {
        readBytes("/proc/thread-self/comm").map { String(decoding: $0.filter { $0 != UInt8(ascii: "\n") }, as: UTF8.self) }
    }

    @Test func finalWorkRunsOnTheCheckpointThreadAndItsErrorIsReturned() async throws {
        try await withTemporaryDirectory { dir in
            let (checkpointer, file) = try Self.checkpointer(in: dir)
            defer { file.close() }
            checkpointer.start()
            let ranOn = Mutex<String?>(nil)
            let error = await checkpointer.stop(saving: false, then: { () throws(DownloadError) in
                ranOn.withLock { $0 = Self.currentThreadName() }
                throw DownloadError(.outputExists, "final work failed")
            })
            #expect(ranOn.withLock { $0 } == "sf-checkpoint")
            #expect(error?.code == .outputExists)
            #expect(error?.message == "final work failed")
        }
    }

    @Test func finalWorkDoesNotRunAfterAFailedCheckpoint() async throws {
        try await withTemporaryDirectory { dir in
            // The manifest's directory does not exist, so the first checkpoint fails.
            let (checkpointer, file) = try Self.checkpointer(in: dir, storeDirectory: dir + "/missing", quickInterval: 0.001)
            defer { file.close() }
            checkpointer.start()
            let failure = await checkpointer.failure()
            #expect(failure != nil)
            let ran = Atomic<Bool>(false)
            let error = await checkpointer.stop(saving: false, then: { () throws(DownloadError) in
                ran.store(true, ordering: .relaxed)
            })
            let didRun = ran.load(ordering: .relaxed)
            #expect(!didRun)
            #expect(error?.message == failure?.message)
        }
    }
}
