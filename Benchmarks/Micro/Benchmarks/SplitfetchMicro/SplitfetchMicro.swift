import Benchmark
import DownloadCore
import Splitfetch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .throughput],
                                           maxDuration: .seconds(2), maxIterations: 100_000)

    Benchmark("Planner.plan 1 TiB over 64 connections") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(Planner.plan(size: 1 << 40, connections: 64, minimumSegmentSize: 1 << 20))
        }
    }

    // The write path's bookkeeping per libcurl buffer: claim, then commit.
    Benchmark("SegmentTable claim+commit (256 KiB pieces, 16 segments)") { benchmark in
        var table = SegmentTable(size: 16 << 30, ranges: Planner.plan(size: 16 << 30, connections: 16, minimumSegmentSize: 1 << 20))
        for w in 0..<16 { _ = table.assign(transfer: w, now: 0) }
        var offsets = table.segments.map(\.start)
        benchmark.startMeasurement()
        for i in benchmark.scaledIterations {
            let s = i % 16
            let n = table.claim(segment: s, offset: offsets[s], count: 256 << 10)
            offsets[s] += n
            table.commit(segment: s, through: offsets[s], now: Double(i))
        }
    }

    // An idle connection splitting the slowest in-flight range, with 64 segments active.
    Benchmark("SegmentTable split with 64 active segments") { benchmark in
        for _ in benchmark.scaledIterations {
            benchmark.stopMeasurement()
            var table = SegmentTable(size: 64 << 30, ranges: Planner.plan(size: 64 << 30, connections: 64, minimumSegmentSize: 1 << 20))
            for w in 0..<64 { _ = table.assign(transfer: w, now: 0) }
            benchmark.startMeasurement()
            blackHole(table.assign(transfer: 64, now: 1, rate: 1e6))
        }
    }

    // pwrite (swift-system writeAll(toAbsoluteOffset:)) of 256 KiB pieces into a preallocated file,
    // the same call the write callback makes.
    Benchmark("pwrite 256 KiB pieces into a preallocated 256 MiB file",
              configuration: .init(metrics: [.wallClock, .throughput, .cpuTotal], maxDuration: .seconds(3), maxIterations: 20_000)) { benchmark in
        let path = "/tmp/splitfetch-micro-\(getpid()).bin"
        let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .truncate], permissions: [.ownerReadWrite])
        defer { try? fd.close(); unlink(path) }
        let size: Int64 = 256 << 20
        _ = posix_fallocate(fd.rawValue, 0, off_t(size))
        let piece = [UInt8](repeating: 0xA5, count: 256 << 10)
        var offset: Int64 = 0
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            try piece.withUnsafeBytes { _ = try fd.writeAll(toAbsoluteOffset: offset, $0) }
            offset = (offset + Int64(piece.count)) % size
        }
    }

    // A manifest of 64 segments: encode (with its checksum) and decode (with every check).
    var segments: [Manifest.Segment] = []
    for i in 0..<64 {
        let start = Int64(i) << 30
        segments.append(Manifest.Segment(start: start, end: start + (1 << 30), written: start + 12_345, cached: start + 99_999))
    }
    let manifest = Manifest(url: "https://example.org/big.iso", finalURL: "https://cdn.example.org/big.iso", size: 64 << 30,
                            etag: "\"abc\"", lastModified: "Mon, 02 Nov 2026 10:00:00 GMT", minimumSegmentSize: 1 << 20,
                            bootID: "0f6b5a52-0000-4000-8000-000000000000", segments: segments)
    Benchmark("Manifest encode, 64 segments") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(manifest.jsonBytes()) }
    }
    let bytes = manifest.jsonBytes()
    Benchmark("Manifest decode and check, 64 segments") { benchmark in
        for _ in benchmark.scaledIterations { blackHole(try Manifest(jsonBytes: bytes, path: "m.json")) }
    }
}
