@testable import Splitfetch
import NIOConcurrencyHelpers
import SystemPackage
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The file-system layer: what each call does at the edges, the one errno mapping, and the I/O
/// queues' ordering on the shared executor.
@Suite("File system") struct FileSystemTests {
    @Test(arguments: [
        (Errno.fileExists, FileOperation.create, DownloadError.Code.outputExists, "/d/f already exists"),
        (Errno.fileExists, FileOperation.link(to: "/d/f"), .outputExists, "/d/f appeared during the download; the data is kept in /d/f.part"),
        (Errno.tooManySymbolicLinkLevels, FileOperation.open, .fileIO, "is a symbolic link; refusing to follow it"),
        (Errno.wouldBlock, FileOperation.lock, .resumeConflict, "another splitfetch process is downloading to"),
        (Errno.fileTooLarge, FileOperation.read, .badManifest, "too large to be a manifest"),
        (Errno.noSpace, FileOperation.preallocate(99), .fileIO, "no space to preallocate 99 bytes"),
        (Errno.noSpace, FileOperation.write(bytes: 5, offset: 7), .fileIO, "cannot write 5 bytes at offset 7 of /d/f.part: No space left"),
        (Errno.permissionDenied, FileOperation.rename(to: "/d/f"), .fileIO, "cannot rename /d/f.part to /d/f: Permission denied"),
        (Errno.ioError, FileOperation.sync, .fileIO, "cannot sync /d/f.part to disk: Input/output error"),
    ])
    func errnoMapsToOneError(errno: Errno, operation: FileOperation, code: DownloadError.Code, text: String) {
        let path = operation == .create ? "/d/f" : "/d/f.part"
        let error = DownloadError.fileSystem(errno, operation, path: path)
        #expect(error.code == code)
        #expect(error.message.contains(text), "\(error.message)")
        #expect(error.message.contains("/d/f"))
    }

    @Test(arguments: [
        (0..<0, 32, [Range<Int>]()),
        (10..<20, 32, [10..<20]),
        (0..<64, 32, [0..<32, 32..<64]),
        (0..<100, 32, [0..<32, 32..<64, 64..<96, 96..<100]),
        (5..<69, 32, [5..<37, 37..<69]),
    ])
    func writesAreCutIntoPiecesOfAtMostTheLargestWrite(range: Range<Int>, largest: Int, expected: [Range<Int>]) {
        #expect(Array(OutputFile.pieces(of: range, largest: largest)) == expected)
    }

    /// Where two byte arrays first differ (a short failure message for large arrays).
    private func firstDifference(_ a: [UInt8], _ b: [UInt8]) -> Int? {
        a.count == b.count ? a.indices.first { a[$0] != b[$0] } : min(a.count, b.count)
    }

    /// A write of several pieces lands whole at its offset, in a plain file and across a ring's
    /// end, where the second part's pieces start at the ring's start.
    @Test func aWriteOfManyPiecesReadsBackWhole() async throws {
        let size = 3 * OutputFile.largestWrite + 7
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
        try await withTemporaryDirectory { dir throws in
            let file = try OutputFile.create(path: dir + "/f", replace: false)
            defer { file.close() }
            try bytes.withUnsafeBytes { try file.write($0, at: 5) }
            var back = [UInt8](repeating: 0, count: size)
            try back.withUnsafeMutableBytes { try file.read(into: $0, at: 5) }
            #expect(firstDifference(back, bytes) == nil)
            #expect(try file.currentSize() == Int64(size + 5))
        }
        // 40 000 bytes before the ring's end and the rest after its start: two pieces each.
        let capacity = Int64(size + 50_000)
        let ring = try OutputFile.createRing(capacity: capacity, inDirectory: FileSystem.temporaryDirectory)
        defer { ring.close() }
        try bytes.withUnsafeBytes { try ring.write($0, at: capacity - 40_000) }
        var wrapped = [UInt8](repeating: 0, count: size)
        try wrapped.withUnsafeMutableBytes { try ring.read(into: $0, at: capacity - 40_000) }
        #expect(firstDifference(wrapped, bytes) == nil)
    }

    @Test func missingFilesAreNilOrFalseNotErrors() async throws {
        try await withTemporaryDirectory { dir throws in
            #expect(try FileSystem.readAll(dir + "/none", limit: 10) == nil)
            #expect(try FileSystem.status(dir + "/none") == nil)
            #expect(try FileSystem.remove(dir + "/none") == false)
            #expect(FileSystem.sizeIfRegular(dir + "/none") == nil)
            #expect(FileSystem.isDirectory(dir))
            #expect(!FileSystem.isDirectory(dir + "/none"))
        }
    }

    @Test func createReadLinkRenameAndRemove() async throws {
        try await withTemporaryDirectory { dir throws in
            let a = dir + "/a", b = dir + "/b", c = dir + "/c"
            try FileSystem.createFile(a, containing: Array("hello".utf8), durable: true)
            #expect(throws: Errno.fileExists) { try FileSystem.createFile(a, containing: [1], durable: false) }
            #expect(try FileSystem.readAll(a, limit: 100) == Array("hello".utf8))
            #expect(throws: Errno.fileTooLarge) { try FileSystem.readAll(a, limit: 4) }
            #expect(FileSystem.sizeIfRegular(a) == 5)
            try FileSystem.link(a, to: b)
            #expect(throws: Errno.fileExists) { try FileSystem.link(a, to: b) }
            try FileSystem.rename(b, to: c)
            #expect(!FileSystem.exists(b) && FileSystem.sizeIfRegular(c) == 5)
            #expect(try FileSystem.remove(c))
            try FileSystem.syncDirectory(dir)
            #expect(FileSystem.parentDirectory(of: c) == dir)
            #expect(FileSystem.parentDirectory(of: "name") == ".")
            #expect(FileSystem.parentDirectory(of: "/name") == "/")
        }
    }

    @Test func symbolicLinksAreNeitherReadNorOpenedForWriting() async throws {
        try await withTemporaryDirectory { dir throws in
            try FileSystem.createFile(dir + "/target", containing: [1, 2, 3], durable: false)
            #expect(symlink(dir + "/target", dir + "/link") == 0)
            #expect(throws: Errno.tooManySymbolicLinkLevels) { try FileSystem.readAll(dir + "/link", limit: 10) }
            #expect(try FileSystem.status(dir + "/link")?.type == .symbolicLink)
            #expect(FileSystem.sizeIfRegular(dir + "/link") == nil)
            let error = #expect(throws: DownloadError.self) { try OutputFile.openExisting(path: dir + "/link") }
            #expect(error?.message == "\(dir)/link is a symbolic link; refusing to follow it")
            let exists = #expect(throws: DownloadError.self) { try OutputFile.create(path: dir + "/target", replace: false) }
            #expect(exists?.code == .outputExists)
        }
    }

    @Test func aSecondLockOnTheSameFileIsRefused() async throws {
        try await withTemporaryDirectory { dir throws in
            let first = try OutputFile.create(path: dir + "/f", replace: false)
            defer { first.close() }
            try first.lockExclusively()
            let second = try OutputFile.openExisting(path: dir + "/f")
            defer { second.close() }
            let error = #expect(throws: DownloadError.self) { try second.lockExclusively() }
            #expect(error?.code == .resumeConflict)
        }
    }

    @Test func renameWithoutReplacingNeverReplaces() async throws {
        try await withTemporaryDirectory { dir throws in
            let a = dir + "/a", b = dir + "/b"
            try FileSystem.createFile(a, containing: [1], durable: false)
            try FileSystem.createFile(b, containing: [2, 2], durable: false)
            #expect(throws: Errno.fileExists) { try FileSystem.renameWithoutReplacing(a, to: b) }
            #expect(FileSystem.sizeIfRegular(b) == 2)
            try FileSystem.remove(b)
            try FileSystem.renameWithoutReplacing(a, to: b)
            #expect(!FileSystem.exists(a) && FileSystem.sizeIfRegular(b) == 1)
        }
    }

    /// A download's partial file may start without a name: nothing of it is on disk until it is
    /// named, for resuming (`NAME.part`, locked) or finished (the destination, never replaced).
    @Test func anUnnamedPartialFileIsNamedOnlyWhenResumableOrFinished() async throws {
        try await withTemporaryDirectory { dir throws in
            let partial = PartialFile(url: "http://example.org/f", destination: dir + "/f", options: DownloadOptions())
            let bytes: [UInt8] = [1, 2, 3, 4, 5]
            let file = try #require(try partial.createUnnamed(size: 5))
            #expect(!file.isNamed)
            try bytes.withUnsafeBytes { try file.write($0, at: 0) }
            #expect(directoryEntries(dir).isEmpty)
            try partial.putInPlace(file, removingManifest: true)
            #expect(directoryEntries(dir) == ["f"] && readBytes(dir + "/f") == bytes)

            // A file that appeared meanwhile is kept, and the new one leaves nothing behind.
            let late = try #require(try partial.createUnnamed(size: 1))
            let error = #expect(throws: DownloadError.self) { try partial.putInPlace(late, removingManifest: true) }
            #expect(error?.code == .outputExists)
            #expect(directoryEntries(dir) == ["f"] && readBytes(dir + "/f") == bytes)

            // Named for resuming: `NAME.part`, locked against a second run.
            let resumable = try #require(try partial.createUnnamed(size: 1))
            defer { resumable.close() }
            try partial.nameForResuming(resumable)
            #expect(resumable.isNamed && directoryEntries(dir) == ["f", "f.part"])
            let other = try OutputFile.openExisting(path: dir + "/f.part")
            defer { other.close() }
            #expect(throws: DownloadError.self) { try other.lockExclusively() }
            partial.removeOwnData(of: resumable)
            #expect(directoryEntries(dir) == ["f"])
        }
    }

    /// Removing a run's own data never touches a `NAME.part` its unnamed file does not own.
    @Test func anUnnamedFileOwnsNoNameOnDisk() async throws {
        try await withTemporaryDirectory { dir throws in
            let partial = PartialFile(url: "http://example.org/g", destination: dir + "/g", options: DownloadOptions())
            writeBytes([9], to: dir + "/g.part")
            let file = try #require(try partial.createUnnamed(size: 1))
            defer { file.close() }
            partial.removeOwnData(of: file)
            #expect(readBytes(dir + "/g.part") == [9])
        }
    }

    @Test func aQueueRunsItsJobsInOrder() async {
        let queue = IOQueue()
        let log = JobLog()
        await withTaskGroup(of: Void.self) { group in
            for index in 0..<200 {
                queue.submit { log.append(index) }
                if index % 50 == 0 { group.addTask { _ = await queue.run { log.count } } }
            }
        }
        let last = await queue.run { log.values }
        #expect(last == Array(0..<200))
    }

    /// Callers that wait together for a sync of one directory share it: five renames waiting
    /// while the I/O thread is busy cost one directory sync, and a later one its own.
    @Test func directorySyncsAreSharedByThoseWaitingTogether() async throws {
        try await withTemporaryDirectory { dir in
            let executor = IOExecutor(maximumThreads: 1, name: "sf-test-io")
            let sync = DirectorySync(executor: executor)
            let released = NIOLockedValueBox(false)
            // The I/O thread stays busy until the five wait (at most two minutes: under
            // ThreadSanitizer on a loaded machine, ten seconds were once not enough for five
            // tasks to start).
            let limit = ContinuousClock.now + .seconds(120)
            executor.enqueue {
                while !released.withLockedValue({ $0 }) && ContinuousClock.now < limit { usleep(1000) }
            }
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<5 { group.addTask { await sync.sync(dir) } }
                while sync.waiting(in: dir) < 5 && ContinuousClock.now < limit - .seconds(10) {
                    try? await Task.sleep(for: .milliseconds(1))
                }
                #expect(sync.waiting(in: dir) == 5)
                released.withLockedValue { $0 = true }
            }
            #expect(sync.syncs == 1)
            await sync.sync(dir)
            #expect(sync.syncs == 2)
        }
    }

    /// From an I/O thread with no sync of the directory running, the sync runs right there:
    /// done before `syncHere` returns, with no other thread started for it (with one thread, a
    /// sync handed to the executor could not run before this job ends).
    @Test func aDirectorySyncAskedOnAnIOThreadRunsThere() async throws {
        try await withTemporaryDirectory { dir in
            let executor = IOExecutor(maximumThreads: 1, name: "sf-test-io")
            let sync = DirectorySync(executor: executor)
            let queue = IOQueue(executor: executor)
            let doneBeforeReturn = await queue.run {
                let done = NIOLockedValueBox(false)
                sync.syncHere(dir) { done.withLockedValue { $0 = true } }
                return done.withLockedValue { $0 }
            }
            #expect(doneBeforeReturn)
            #expect(sync.syncs == 1 && sync.waiting(in: dir) == 0)
            #expect(executor.threads == 1)
        }
    }

    /// A queue whose job blocks does not hold up another queue: queue A's job gives queue B a job
    /// and waits for it to run, which can only happen on another executor thread. (With one
    /// thread it would give up after 5 s and the test fail.)
    @Test func aBlockedQueueDoesNotHoldUpAnother() async {
        let executor = IOExecutor(maximumThreads: 2, name: "sf-test-io")
        let (a, b) = (IOQueue(executor: executor), IOQueue(executor: executor))
        let log = JobLog()
        let sawB = await a.run {
            b.submit { log.append(1) }
            for _ in 0..<5_000 {
                if log.count > 0 { return true }
                usleep(1000)
            }
            return false
        }
        #expect(sawB)
    }

    /// Jobs that block together each get a thread, up to the maximum and no further: four jobs
    /// that each wait until all four have started finish only if four threads run them at once
    /// (eight syncs of eight files block together so); a fifth starts no thread beyond the
    /// maximum.
    @Test func blockedJobsStartThreadsUpToTheMaximum() async {
        let executor = IOExecutor(maximumThreads: 4, name: "sf-test-io")
        #expect(executor.threads == 0)
        let started = NIOLockedValueBox(0)
        let limit = ContinuousClock.now + .seconds(60)
        // The four are enqueued together from here, not from four tasks: on a loaded machine (every
        // suite at once under ThreadSanitizer) the cooperative pool ran the fourth task's enqueue
        // only after the other three had waited their 60 s, which said nothing of the executor.
        let finished = NIOLockedValueBox([Bool]())
        let results = await withCheckedContinuation { (continuation: CheckedContinuation<[Bool], Never>) in
            for _ in 0..<4 {
                executor.enqueue {
                    started.withLockedValue { $0 += 1 }
                    while started.withLockedValue({ $0 }) < 4 && ContinuousClock.now < limit { usleep(1000) }
                    let sawAll = started.withLockedValue { $0 } >= 4
                    let all = finished.withLockedValue { done -> [Bool]? in
                        done.append(sawAll)
                        return done.count == 4 ? done : nil
                    }
                    if let all { continuation.resume(returning: all) }
                }
            }
        }
        #expect(results == [true, true, true, true])
        #expect(executor.threads == 4)
        let fifth = await withCheckedContinuation { continuation in
            executor.enqueue { continuation.resume(returning: true) }
        }
        #expect(fifth)
        #expect(executor.threads == 4)
    }
}

/// A thread-safe list of integers for the queue tests.
private final class JobLog: Sendable {
    private let box = NIOLockedValueBox([Int]())
    func append(_ value: Int) { box.withLockedValue { $0.append(value) } }
    var count: Int { box.withLockedValue { $0.count } }
    var values: [Int] { box.withLockedValue { $0 } }
}
