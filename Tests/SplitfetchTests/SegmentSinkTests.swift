@testable import Splitfetch
import SegmentPlanning
import SystemPackage
import Testing

/// A range's sink: what it writes, and when it asks the kernel to start writing a finished
/// segment back (only when a sync will follow; with `--no-sync` the kernel does it in its own
/// time, off the download's clock).
@Suite("Segment sink")
struct SegmentSinkTests {
    /// The one transfer a fresh one-connection machine starts for a file of `size` bytes.
    func startedTransfer(size: Int64) throws -> (SharedMachine, DownloadMachine.TransferStart) {
        var configuration = DownloadMachine.Configuration()
        configuration.connections = 1
        configuration.minimumSegmentSize = size
        var machine = DownloadMachine(configuration: configuration)
        _ = machine.probed(DownloadMachine.ProbeAnswer(size: size, acceptsRanges: true), now: 0)
        let starts = machine.prepared(now: 0).compactMap { action -> DownloadMachine.TransferStart? in
            if case .start(let start) = action { return start }
            return nil
        }
        guard starts.count == 1, starts[0].range == ByteRange(0, size) else {
            throw TestFailure("expected one transfer of the whole file, got \(starts)")
        }
        return (SharedMachine(machine), starts[0])
    }

    /// Feeds a `206` of the whole file in two pieces; returns how many write-backs the file saw
    /// after each piece, and the bytes on disk.
    func feedWholeFile(startsWriteback: Bool, in directory: String) throws -> (writebacks: [Int], onDisk: [UInt8], input: [UInt8]) {
        let size: Int64 = 1000
        let input = (0..<Int(size)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        let (machine, start) = try startedTransfer(size: size)
        let path = directory + "/file"
        let file = try OutputFile.create(path: path, replace: false)
        defer { file.close() }
        let sink = SegmentSink(machine: machine, transfer: start.id, file: file, counters: WorkerCounters(id: 0),
                               requested: start.range!, total: size, url: "http://127.0.0.1/file", etag: nil,
                               lastModified: nil, sentIfRange: false, startsWriteback: startsWriteback)
        var head = ResponseHead()
        head.status = 206
        head.fields = [("content-range", "bytes 0-\(size - 1)/\(size)"), ("content-length", "\(size)")]
        head.isComplete = true
        var writebacks: [Int] = []
        for piece in [input[0..<600], input[600...]] {
            let verdict = piece.withUnsafeBytes { sink.receive($0, head: head) }
            guard verdict == .proceed else { throw TestFailure("the sink answered \(verdict)") }
            writebacks.append(file.writebacksStarted)
        }
        let fd = try FileDescriptor.open(FilePath(path), .readOnly)
        defer { try? fd.close() }
        var onDisk = [UInt8](repeating: 0, count: Int(size) + 1)
        let read = try onDisk.withUnsafeMutableBytes { try fd.read(fromAbsoluteOffset: 0, into: $0) }
        return (writebacks, Array(onDisk[0..<read]), input)
    }

    @Test func aFinishedSegmentStartsWritebackOnceWhenASyncFollows() async throws {
        try await withTemporaryDirectory { directory in
            let fed = try feedWholeFile(startsWriteback: true, in: directory)
            #expect(fed.onDisk == fed.input)
            #expect(fed.writebacks == [0, 1])  // not mid-segment; once, at its end
        }
    }

    @Test func withoutASyncNoWritebackIsStarted() async throws {
        try await withTemporaryDirectory { directory in
            let fed = try feedWholeFile(startsWriteback: false, in: directory)
            #expect(fed.onDisk == fed.input)
            #expect(fed.writebacks == [0, 0])
        }
    }
}
