import DownloadSimulation
import DownloadCore
import Testing

/// The lowest unwritten byte, which the hasher follows, and the in-order plan that keeps it
/// close behind the download.
@Suite("Contiguous prefix")
struct ContiguousPrefixTests {
    typealias M = DownloadMachine
    static let MiB: Int64 = 1 << 20

    @Test func thePrefixMovesOnlyOverBytesWithoutAGap() {
        var table = SegmentTable(size: 300, ranges: [ByteRange(0, 100), ByteRange(100, 200), ByteRange(200, 300)])
        for id in 0..<3 { _ = table.assign(transfer: id, now: 0) }
        // The second and third segments complete first: nothing before them is written.
        for (segment, start) in [(1, Int64(100)), (2, 200)] {
            #expect(table.claim(segment: segment, offset: start, count: 100) == 100)
            table.commit(segment: segment, through: start + 100)
        }
        #expect(table.contiguousPrefix == 0)
        #expect(table.claim(segment: 0, offset: 0, count: 60) == 60)
        table.commit(segment: 0, through: 40)
        #expect(table.contiguousPrefix == 40)
        table.commit(segment: 0, through: 60)
        #expect(table.contiguousPrefix == 60)
        #expect(table.claim(segment: 0, offset: 60, count: 40) == 40)
        table.commit(segment: 0, through: 100)
        #expect(table.contiguousPrefix == 300)  // over both completed segments at once
    }

    @Test func aSplitSegmentIsFollowedThroughItsNewPieces() {
        let policy = SegmentTable.SplitPolicy(minimumPiece: 10, alignment: 1, requestOverhead: 0, rateWarmup: 1, minimumBlindPiece: 10)
        var table = SegmentTable(size: 1000, ranges: [ByteRange(0, 1000)], policy: policy)
        _ = table.assign(transfer: 0, now: 0)
        #expect(table.claim(segment: 0, offset: 0, count: 200) == 200)
        table.commit(segment: 0, through: 200)
        let split = table.assign(transfer: 1, now: 0.1)!
        #expect(split.range == ByteRange(600, 1000))
        #expect(table.claim(segment: 1, offset: 600, count: 400) == 400)
        table.commit(segment: 1, through: 1000)
        #expect(table.contiguousPrefix == 200)
        #expect(table.claim(segment: 0, offset: 200, count: 400) == 400)
        table.commit(segment: 0, through: 600)
        #expect(table.contiguousPrefix == 1000)
    }

    @Test func aStalledOwnerTakenOverWholeHandsThePrefixToTheNewSegment() {
        // Found by the simulator: the victim, cut at its written offset, is complete at once, and
        // the prefix must move to the new segment (appended after the cut) and follow its writes.
        let policy = SegmentTable.SplitPolicy(minimumPiece: 100, alignment: 1, requestOverhead: 0, rateWarmup: 0.5, stallAfter: 1)
        var table = SegmentTable(size: 150, ranges: [ByteRange(0, 150)], policy: policy)
        _ = table.assign(transfer: 0, now: 0)
        #expect(table.claim(segment: 0, offset: 0, count: 20) == 20)
        table.commit(segment: 0, through: 20, now: 0.1)
        let steal = table.assign(transfer: 1, now: 1.2)
        #expect(steal?.range == ByteRange(20, 150))
        #expect(table.contiguousPrefix == 20)
        #expect(table.claim(segment: 1, offset: 20, count: 30) == 30)
        table.commit(segment: 1, through: 50)
        #expect(table.contiguousPrefix == 50)  // not stuck at 20 until the new segment completes
    }

    @Test func aResumedTableStartsAtItsWrittenPrefix() {
        let table = SegmentTable(size: 300, progress: [(ByteRange(0, 100), 100), (ByteRange(100, 200), 150), (ByteRange(200, 300), 300)])
        #expect(table.contiguousPrefix == 150)
        let done = SegmentTable(size: 200, progress: [(ByteRange(0, 100), 100), (ByteRange(100, 200), 200)])
        #expect(done.contiguousPrefix == 200)
        #expect(SegmentTable(size: 0, ranges: []).contiguousPrefix == 0)
    }

    @Test(arguments: [
        // (size, connections, minimum segment, expected piece)
        (1 << 30, 8, 1 << 20, 16 << 20),  // capped at 16 MiB
        (256 << 20, 16, 1 << 20, 2 << 20),  // an eighth of a 16 MiB share
        (20_000_000, 8, 1 << 20, 1 << 20),  // at least the minimum segment
        (10_000, 8, 1 << 20, 10_000),  // a small file is one piece
    ] as [(Int64, Int, Int64, Int64)])
    func inOrderPlansArePiecesInOrder(size: Int64, connections: Int, minimum: Int64, piece: Int64) {
        let plan = Planner.plan(inOrderFrom: 0, size: size, connections: connections, minimumSegmentSize: minimum)
        #expect(plan.first?.lowerBound == 0 && plan.last?.upperBound == size)
        #expect(zip(plan, plan.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
        #expect(plan.dropLast().allSatisfy { $0.count == piece })
        #expect(plan.allSatisfy { $0.count >= min(minimum, size) })
        #expect(Planner.plan(inOrderFrom: size, size: size, connections: connections, minimumSegmentSize: minimum).isEmpty)
    }

    @Test func aHashedDownloadIsPlannedInOrderAfterTheProbesRange() {
        var c = M.Configuration()
        c.connections = 4
        c.minimumSegmentSize = Self.MiB
        var m = M(configuration: c)
        let size = 64 * Self.MiB
        let actions = m.probed(M.ProbeAnswer(size: size, acceptsRanges: true, openBody: .range(ByteRange(0, Self.MiB)), inOrder: true),
                               now: 0)
        guard case .prepare(let preparation)? = actions.last, let segments = preparation.manifest?.segments else {
            Issue.record("no preparation: \(actions)")
            return
        }
        #expect(segments.first.map { ByteRange($0.start, $0.end) } == ByteRange(0, Self.MiB))
        // 64 MiB / (4 × 8) = 2 MiB pieces after the probe's first MiB.
        #expect(segments.dropFirst().dropLast().allSatisfy { $0.end - $0.start == 2 * Self.MiB })
        #expect(segments.count == 33)
        // Idle connections take the lowest pieces.
        let starts = m.prepared(now: 0).compactMap { if case .start(let s) = $0 { s.range } else { nil } }
        #expect(starts == [ByteRange(Self.MiB, 3 * Self.MiB), ByteRange(3 * Self.MiB, 5 * Self.MiB), ByteRange(5 * Self.MiB, 7 * Self.MiB)])
    }
}
