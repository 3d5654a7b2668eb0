import DownloadSimulation
import DownloadCore
import Testing

/// Under a per-host cap: work not yet started comes before a healthy range is cut short, a
/// request waiting for a slot is neither slow nor stalled, and a split needs room for the new
/// piece and for the connection it closes.
@Suite("Host cap")
struct HostCapTests {
    typealias M = DownloadMachine
    static let MiB: Int64 = 1 << 20

    // MARK: - The host's room

    @Test("room: the free slots only while nothing waits and nothing is still to begin", arguments: [
        // (slots taken, requests waiting, files pending, room)
        (0, 0, 0, 4), (3, 0, 0, 1), (4, 0, 0, 0), (2, 0, 1, 0), (4, 1, 0, 0),
    ] as [(Int, Int, Int, Int)])
    func room(taken: Int, waiting: Int, pending: Int, expected: Int) {
        var shares = HostShares(cap: 4)
        for _ in 0..<taken { #expect(shares.request(for: 0) == .granted) }
        for _ in 0..<waiting { _ = shares.request(for: 1) }
        #expect(shares.room(pending: pending) == expected)
    }

    @Test func aFreedSlotLeavesRoomOnlyOnceNobodyWaits() {
        var shares = HostShares(cap: 2)
        _ = shares.request(for: 0)
        _ = shares.request(for: 0)
        _ = shares.request(for: 1)
        #expect(shares.room() == 0)
        _ = shares.release(by: 0)  // to download 1's waiting request: still full
        #expect(shares.room() == 0)
        _ = shares.release(by: 0)
        #expect(shares.room() == 1)
    }

    // MARK: - The segment table

    static let policy = SegmentTable.SplitPolicy(minimumPiece: 10, alignment: 1, requestOverhead: 0, rateWarmup: 0.5,
                                                  stallAfter: 1.5, minimumBlindPiece: 10)

    /// Two ranges: the first running with bytes, the second owned by a request still waiting
    /// for a slot since `queuedAt`.
    static func tableWithAQueuedRange(queuedAt: Double) -> SegmentTable {
        var table = SegmentTable(size: 2000, ranges: [ByteRange(0, 1000), ByteRange(1000, 2000)], policy: policy)
        _ = table.assign(transfer: 1, now: 0)
        _ = table.assign(transfer: 2, now: 0)
        table.setQueued(segment: 1, true, now: queuedAt)
        #expect(table.claim(segment: 0, offset: 0, count: 900) == 900)
        table.commit(segment: 0, through: 900, now: 10)
        return table
    }

    /// Long after it was queued, the waiting range is still not stalled, nor split, nor taken:
    /// only the running range's remainder can be.
    @Test func aQueuedRangeIsNeitherStalledNorSplitNorTaken() {
        var table = Self.tableWithAQueuedRange(queuedAt: 0)
        #expect(table.activeSegments.filter(\.isQueued).map(\.id) == [1])
        let assignment = table.assign(transfer: 3, now: 10, rate: 100)
        #expect(assignment.map { $0.segment == 1 || $0.range.lowerBound >= 1000 } != true, "\(String(describing: assignment))")
        #expect(table.segments[1].end == 2000 && table.segments[1].owner == 2)
        #expect(table.invariantViolation() == nil)
    }

    /// Once its request starts, its rate is measured from then: not 0 bytes over the wait.
    @Test func aRangeStartedAfterAWaitIsJudgedFromItsStart() {
        var table = Self.tableWithAQueuedRange(queuedAt: 0)
        table.setQueued(segment: 1, false, now: 9)
        #expect(table.claim(segment: 1, offset: 1000, count: 100) == 100)
        table.commit(segment: 1, through: 1100, now: 10)
        // 100 bytes in 1 s since it started, with 900 left: a blind-free, rate-based halving
        // by an idle connection as fast; after the wait it would have looked like 10 B/s.
        let split = table.assign(transfer: 3, now: 10, rate: 100)
        #expect(split?.isSplit == true && split?.displacedOwner == nil)
        #expect(split.map { $0.range.lowerBound > 1100 && $0.range.upperBound == 2000 } == true, "\(String(describing: split))")
    }

    /// Without leave to cut, a healthy owner keeps its range; a stalled one's is still taken.
    @Test func withoutLeaveToCutOnlyAStalledRangeIsTaken() {
        var table = SegmentTable(size: 2000, ranges: [ByteRange(0, 2000)], policy: Self.policy)
        _ = table.assign(transfer: 1, now: 0)
        #expect(table.claim(segment: 0, offset: 0, count: 100) == 100)
        table.commit(segment: 0, through: 100, now: 1)
        #expect(table.assign(transfer: 2, now: 1, rate: 100, mayCut: false) == nil)
        #expect(table.assign(transfer: 2, now: 1, rate: 100, mayCut: true)?.isSplit == true)
        var stalled = SegmentTable(size: 2000, ranges: [ByteRange(0, 2000)], policy: Self.policy)
        _ = stalled.assign(transfer: 1, now: 0)
        let taken = stalled.assign(transfer: 2, now: 5, rate: 100, mayCut: false)
        #expect(taken?.range == ByteRange(0, 2000) && taken?.displacedOwner == 1)
    }

    // MARK: - The machine

    static func configuration() -> M.Configuration {
        var c = M.Configuration()
        c.connections = 4
        c.minimumSegmentSize = MiB
        c.split = SegmentTable.SplitPolicy(minimumPiece: 64 << 10, alignment: 4096, requestOverhead: 0.05,
                                           rateWarmup: 0.5, stallAfter: 1.5, minimumBlindPiece: MiB)
        return c
    }

    /// Two ranges of 4 MiB on two of four connections; the first completes at 1 s, and the
    /// second has run at 4 MiB/s (half done): one idle connection each wants a split.
    static func machineWithAnIdleConnection(room: Int?) -> (M, [M.Action]) {
        var m = M(configuration: configuration())
        m.hostRoom = room
        _ = m.probed(M.ProbeAnswer(size: 8 * MiB, acceptsRanges: true), now: 0)
        let starts = DownloadMachineTests.starts(m.prepared(now: 0))
        #expect(starts.map(\.range) == [ByteRange(0, 2 * MiB), ByteRange(2 * MiB, 4 * MiB), ByteRange(4 * MiB, 6 * MiB),
                                        ByteRange(6 * MiB, 8 * MiB)])
        for (index, start) in starts.enumerated() {
            let bytes = index == 0 ? 2 * MiB : MiB
            _ = DownloadMachineTests.write(&m, start.id, from: start.range!.lowerBound, bytes, now: 1)
        }
        return (m, m.transferEnded(starts[0].id, .completed, now: 1))
    }

    @Test("a split of a healthy range needs two free slots and nothing waiting", arguments: [
        (nil, true), (2, true), (3, true), (1, false), (0, false),
    ] as [(Int?, Bool)])
    func aSplitNeedsRoom(room: Int?, splits: Bool) {
        let (_, actions) = Self.machineWithAnIdleConnection(room: room)
        let starts = DownloadMachineTests.starts(actions)
        #expect(starts.contains { $0.isSplit } == splits, "\(actions)")
        #expect(DownloadMachineTests.aborts(actions).isEmpty)
    }

    /// Each new request takes a slot: with room for one split, two idle connections make one.
    @Test func eachSplitTakesASlotOfTheRoom() {
        var m = M(configuration: Self.configuration())
        m.hostRoom = 0
        _ = m.probed(M.ProbeAnswer(size: 8 * Self.MiB, acceptsRanges: true), now: 0)
        let starts = DownloadMachineTests.starts(m.prepared(now: 0))
        for (index, start) in starts.enumerated() {
            _ = DownloadMachineTests.write(&m, start.id, from: start.range!.lowerBound, index < 2 ? 2 * Self.MiB : Self.MiB / 2, now: 1)
        }
        _ = m.transferEnded(starts[0].id, .completed, now: 1)
        _ = m.transferEnded(starts[1].id, .completed, now: 1)
        #expect(m.splitCount == 0)
        m.hostRoom = 2
        let actions = m.tick(now: 1.1)
        #expect(DownloadMachineTests.starts(actions).filter(\.isSplit).count == 1, "\(actions)")
        #expect(m.splitCount == 1)
    }

    /// A transfer waiting for a slot is not stalled by the machine's own timeout either.
    @Test func aQueuedTransferOutlivesTheStallTimeout() {
        var c = Self.configuration()
        c.stallTimeout = 2
        var m = M(configuration: c)
        m.hostRoom = 0
        _ = m.probed(M.ProbeAnswer(size: 2 * Self.MiB, acceptsRanges: true), now: 0)
        let starts = DownloadMachineTests.starts(m.prepared(now: 0))
        m.queued(starts[1].id, true, now: 0)
        _ = DownloadMachineTests.write(&m, starts[0].id, from: 0, Self.MiB / 2, now: 5)
        let actions = m.tick(now: 5)
        #expect(DownloadMachineTests.aborts(actions)[starts[1].id] == nil, "\(actions)")
    }
}

/// Capped batches in the simulator: the workload (24 files of 4 MiB, 8 at a time, 8
/// connections each, 8 per host, every connection paced at 2 MB/s) and variations of it.
@Suite("Capped batches, simulated")
struct CappedBatchSimulationTests {
    @Test("a capped batch splits little, wastes nothing and keeps to the cap", arguments: [
        // (files, jobs, connections, cap, seed)
        (24, 8, 8, 8, 1), (24, 8, 8, 8, 2), (24, 8, 8, 8, 3), (12, 4, 8, 6, 4), (16, 8, 4, 4, 5), (8, 2, 8, 8, 6),
    ] as [(Int, Int, Int, Int, UInt64)])
    func cappedBatch(files: Int, jobs: Int, connections: Int, cap: Int, seed: UInt64) {
        var scenario = CappedBatchSimulator.Scenario()
        (scenario.files, scenario.jobs, scenario.connections, scenario.cap, scenario.seed) = (files, jobs, connections, cap, seed)
        let outcome = CappedBatchSimulator.run(scenario)
        #expect(outcome.violations.isEmpty, "\(outcome.violations.prefix(3))")
        #expect(outcome.finished == files)
        #expect(outcome.splits <= files, "\(outcome.splits) splits for \(files) files")
        #expect(outcome.bytesSentRatio <= 1.005, "\(outcome.bytesSentRatio)")
        #expect(outcome.peakConnections <= cap, "\(outcome.peakConnections) connections counted at once")
        // Within a tenth of the cap's ideal: every slot busy at the connections' rate.
        let ideal = Double(files) * Double(scenario.size) / (Double(cap) * scenario.rate)
        #expect(outcome.seconds <= ideal * 1.1, "\(outcome.seconds) s against \(ideal) s")
    }
}
