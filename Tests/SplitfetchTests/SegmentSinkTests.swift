@testable import Splitfetch
import DownloadCore
import SystemPackage
import Testing

/// A range's sink: what it writes, and when it asks the kernel to start writing a finished
/// segment back: only when a sync will follow, and not for the segment that completes the file
/// (the final `fdatasync` follows at once, on an I/O thread, not on the transport's).
@Suite("Segment sink")
struct SegmentSinkTests {
    static let size: Int64 = 16 << 10

    /// The transfers a fresh machine starts for a file of ``size`` bytes in `segments` segments.
    func startedTransfers(segments: Int) throws -> (SharedMachine, [DownloadMachine.TransferStart]) {
        var configuration = DownloadMachine.Configuration()
        configuration.connections = segments
        configuration.minimumSegmentSize = segments == 1 ? Self.size : 4096
        var machine = DownloadMachine(configuration: configuration)
        _ = machine.probed(DownloadMachine.ProbeAnswer(size: Self.size, acceptsRanges: true), now: 0)
        let starts = machine.prepared(now: 0).compactMap { action -> DownloadMachine.TransferStart? in
            if case .start(let start) = action { return start }
            return nil
        }
        let covered = starts.compactMap(\.range).reduce(Int64(0)) { $0 + $1.count }
        guard starts.count == segments, covered == Self.size else {
            throw TestFailure("expected \(segments) transfers covering the file, got \(starts)")
        }
        return (SharedMachine(machine), starts)
    }

    /// Feeds each transfer its `206`, in two pieces, one transfer after the other; returns how
    /// many write-backs the file had seen after each piece, and the bytes on disk.
    func feed(segments: Int, startsWriteback: Bool, in directory: String) throws -> (writebacks: [Int], onDisk: [UInt8], input: [UInt8]) {
        let input = (0..<Int(Self.size)).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        let (machine, starts) = try startedTransfers(segments: segments)
        let path = directory + "/file"
        let file = try OutputFile.create(path: path, replace: false)
        defer { file.close() }
        var writebacks: [Int] = []
        for start in starts {
            let range = start.range!
            let target = SinkTarget(machine: machine, transfer: start.id, file: file, counters: ConnectionCounters(id: start.connection))
            let sink = SegmentSink(target, requested: range, total: Self.size, url: "http://127.0.0.1/file", etag: nil,
                                   lastModified: nil, sentIfRange: false, startsWriteback: startsWriteback)
            var head = ResponseHead()
            head.status = 206
            head.fields = [("content-range", "bytes \(range.lowerBound)-\(range.upperBound - 1)/\(Self.size)"),
                           ("content-length", "\(range.count)")]
            head.isComplete = true
            let (low, middle, high) = (Int(range.lowerBound), Int(range.lowerBound + range.count / 2), Int(range.upperBound))
            for piece in [input[low..<middle], input[middle..<high]] {
                let verdict = piece.withUnsafeBytes { sink.receive($0, head: head) }
                guard verdict == .proceed else { throw TestFailure("the sink answered \(verdict)") }
                writebacks.append(file.writebacksStarted)
            }
        }
        let fd = try FileDescriptor.open(FilePath(path), .readOnly)
        defer { try? fd.close() }
        var onDisk = [UInt8](repeating: 0, count: Int(Self.size) + 1)
        let read = try onDisk.withUnsafeMutableBytes { try fd.read(fromAbsoluteOffset: 0, into: $0) }
        return (writebacks, Array(onDisk[0..<read]), input)
    }

    @Test func aFinishedSegmentStartsWritebackUnlessItCompletesTheFile() async throws {
        try await withTemporaryDirectory { directory in
            let fed = try feed(segments: 2, startsWriteback: true, in: directory)
            #expect(fed.onDisk == fed.input)
            #expect(fed.writebacks == [0, 1, 1, 1])  // at the first segment's end, not mid-segment, not at the last
        }
    }

    @Test func aFileOfOneSegmentStartsNoWriteback() async throws {
        try await withTemporaryDirectory { directory in
            let fed = try feed(segments: 1, startsWriteback: true, in: directory)
            #expect(fed.onDisk == fed.input)
            #expect(fed.writebacks == [0, 0])
        }
    }

    @Test func withoutASyncNoWritebackIsStarted() async throws {
        try await withTemporaryDirectory { directory in
            let fed = try feed(segments: 2, startsWriteback: false, in: directory)
            #expect(fed.onDisk == fed.input)
            #expect(fed.writebacks == [0, 0, 0, 0])
        }
    }
}
