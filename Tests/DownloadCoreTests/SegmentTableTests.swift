import DownloadCore
import Testing

@Suite("SegmentTable")
struct SegmentTableTests {
    @Test func freshTableHandsOutPlannedRangesInOrder() {
        var table = SegmentTable(size: 300, ranges: [ByteRange(0, 100), ByteRange(100, 200), ByteRange(200, 300)])
        #expect(table.assign(transfer: 0, now: 0)?.range == ByteRange(0, 100))
        #expect(table.assign(transfer: 1, now: 0)?.range == ByteRange(100, 200))
        #expect(table.assign(transfer: 2, now: 0)?.range == ByteRange(200, 300))
    }

    @Test func idleWorkerSplitsTheLargestRemainderBeyondTheWriteOffset() {
        let policy = SegmentTable.SplitPolicy(minimumPiece: 10, alignment: 1, requestOverhead: 0, rateWarmup: 1, minimumBlindPiece: 10)
        var table = SegmentTable(size: 1000, ranges: [ByteRange(0, 1000)], policy: policy)
        let first = table.assign(transfer: 0, now: 0)!
        #expect(first.range == ByteRange(0, 1000))
        #expect(table.claim(segment: 0, offset: 0, count: 200) == 200)
        table.commit(segment: 0, through: 200)
        let split = table.assign(transfer: 1, now: 0.1)!
        #expect(split.isSplit)
        #expect(split.range == ByteRange(600, 1000))  // half of the 800 left after offset 200
        #expect(table.segments[0].end == 600)
        // The owner is stopped at its new end: of 500 bytes offered, 400 may be written.
        #expect(table.claim(segment: 0, offset: 200, count: 500) == 400)
        table.commit(segment: 0, through: 600)
        #expect(table.claim(segment: 0, offset: 600, count: 10) == 0)
        #expect(table.invariantViolation() == nil)
    }

    @Test func splitNeverCutsBytesAlreadyClaimed() throws {
        let policy = SegmentTable.SplitPolicy(minimumPiece: 10, alignment: 64, requestOverhead: 0, rateWarmup: 1, minimumBlindPiece: 10)
        var table = SegmentTable(size: 1000, ranges: [ByteRange(0, 1000)], policy: policy)
        _ = table.assign(transfer: 0, now: 0)
        #expect(table.claim(segment: 0, offset: 0, count: 900) == 900)  // in pwrite, not committed yet
        // 100 bytes unclaimed: halved blind at 950, aligned up to 960.
        let assigned = table.assign(transfer: 1, now: 0)
        let split = try #require(assigned)
        #expect(split.range == ByteRange(960, 1000))
        #expect(table.invariantViolation() == nil)
    }

    @Test func speedAwareSplitGivesTheFastWorkerMore() {
        let policy = SegmentTable.SplitPolicy(minimumPiece: 1, alignment: 1, requestOverhead: 0, rateWarmup: 0.5)
        var table = SegmentTable(size: 17_000, ranges: [ByteRange(0, 17_000)], policy: policy)
        _ = table.assign(transfer: 0, now: 0)
        // The owner has done 1000 bytes in 10 s: 100 B/s. The idle worker does 1600 B/s.
        #expect(table.claim(segment: 0, offset: 0, count: 1000) == 1000)
        table.commit(segment: 0, through: 1000, now: 9.9)
        let split = table.assign(transfer: 1, now: 10, rate: 1600)!
        // 16_000 left; owner share 100/1700 -> about 941 bytes stay with the slow owner.
        #expect(split.range.lowerBound == 1000 + 941)
    }

    @Test func displacedOwnerLosesItsWholeRemainder() {
        let policy = SegmentTable.SplitPolicy(minimumPiece: 100, alignment: 1, requestOverhead: 0, rateWarmup: 0.5, stallAfter: 1)
        var table = SegmentTable(size: 150, ranges: [ByteRange(0, 150)], policy: policy)
        _ = table.assign(transfer: 0, now: 0)
        #expect(table.claim(segment: 0, offset: 0, count: 20) == 20)
        table.commit(segment: 0, through: 20, now: 0.1)
        #expect(table.assign(transfer: 1, now: 0.5) == nil)  // too small to split, not stalled yet
        let steal = table.assign(transfer: 1, now: 1.2)
        #expect(steal?.range == ByteRange(20, 150))
        #expect(table.claim(segment: 0, offset: 20, count: 10) == 0)  // the stalled owner stops
    }

    @Test func noSplitBelowTwoMinimumPieces() {
        let policy = SegmentTable.SplitPolicy(minimumPiece: 100, alignment: 1, requestOverhead: 0, rateWarmup: 1)
        var table = SegmentTable(size: 150, ranges: [ByteRange(0, 150)], policy: policy)
        _ = table.assign(transfer: 0, now: 0)
        #expect(table.assign(transfer: 1, now: 0) == nil)
    }

    @Test func releaseReturnsTheRemainderFromTheFirstUnwrittenByte() {
        var table = SegmentTable(size: 100, ranges: [ByteRange(0, 100)])
        _ = table.assign(transfer: 0, now: 0)
        #expect(table.claim(segment: 0, offset: 0, count: 30) == 30)
        table.commit(segment: 0, through: 30)
        table.release(segment: 0)
        #expect(table.assign(transfer: 5, now: 1)?.range == ByteRange(30, 100))
    }

    @Test func resumedProgressIsHonoured() {
        var table = SegmentTable(size: 200, progress: [(ByteRange(0, 100), 100), (ByteRange(100, 200), 150)])
        #expect(table.writtenBytes == 150)
        #expect(table.assign(transfer: 0, now: 0)?.range == ByteRange(150, 200))
    }

    /// Simulates workers with random speeds, chunk sizes, failures and splits, checking the
    /// invariants after every step and that every byte is written exactly once.
    @Test("random simulation keeps every byte owned once and finishes", arguments: [7, 99, 2024, 31337] as [UInt64])
    func randomSimulation(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        for _ in 0..<40 {
            let size = Int64.random(in: 1...400_000, using: &rng)
            let workers = Int.random(in: 1...16, using: &rng)
            let plan = Planner.plan(size: size, connections: workers, minimumSegmentSize: Int64.random(in: 1...20_000, using: &rng))
            let policy = SegmentTable.SplitPolicy(minimumPiece: Int64.random(in: 1...5_000, using: &rng),
                                                  alignment: [1, 512, 4096].randomElement(using: &rng)!,
                                                  requestOverhead: 0.01, rateWarmup: 0.05)
            var table = SegmentTable(size: size, ranges: plan, policy: policy)
            var coverage = [UInt8](repeating: 0, count: Int(size))
            var current: [Int: (segment: Int, offset: Int64, end: Int64)] = [:]
            let speed = (0..<workers).map { _ in Int64.random(in: 100...40_000, using: &rng) }
            var now = 0.0
            var steps = 0
            while !table.isComplete {
                steps += 1
                #expect(steps < 200_000, "simulation did not finish")
                if steps >= 200_000 { return }
                now += 0.01
                for w in 0..<workers {
                    if current[w] == nil, let a = table.assign(transfer: w, now: now, rate: Double(speed[w]) * 100) {
                        current[w] = (a.segment, a.range.lowerBound, a.range.upperBound)
                    }
                    guard let job = current[w] else { continue }
                    if Int.random(in: 0..<200, using: &rng) == 0 {  // connection failure
                        table.release(segment: job.segment)
                        current[w] = nil
                        continue
                    }
                    let offered = min(speed[w], job.end - job.offset)
                    let allowed = table.claim(segment: job.segment, offset: job.offset, count: offered)
                    for i in job.offset..<(job.offset + allowed) { coverage[Int(i)] &+= 1 }
                    table.commit(segment: job.segment, through: job.offset + allowed)
                    let next = job.offset + allowed
                    if allowed < offered || next == job.end {
                        table.release(segment: job.segment)
                        current[w] = nil
                    } else {
                        current[w] = (job.segment, next, job.end)
                    }
                }
                if let problem = table.invariantViolation() {
                    Issue.record("invariant broken: \(problem)")
                    return
                }
            }
            #expect(coverage.allSatisfy { $0 == 1 }, "a byte was written twice or never")
            #expect(table.writtenBytes == size)
        }
    }
}
