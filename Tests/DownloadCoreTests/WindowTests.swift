import DownloadCore
import Testing

/// A download read in order (a pipe): ranges only inside the reader's window, pieces that fit
/// it, stragglers kept to splits, and paused connections never taken for stalled ones.
@Suite("Window")
struct WindowTests {
    typealias M = DownloadMachine
    static let MiB: Int64 = 1 << 20

    static func machine(size: Int64 = 64 << 20, connections: Int = 4, window: Int64 = 8 << 20) -> (M, [M.Action]) {
        var c = M.Configuration()
        c.connections = connections
        c.minimumSegmentSize = MiB
        c.quickCheckpointInterval = 0
        c.durableCheckpointInterval = 0
        c.window = window
        var m = M(configuration: c)
        _ = m.probed(M.ProbeAnswer(size: size, acceptsRanges: true), now: 0)
        let actions = m.prepared(now: 0)
        return (m, actions)
    }

    static func ranges(_ actions: [M.Action]) -> [ByteRange] {
        actions.compactMap { if case .start(let s) = $0 { s.range } else { nil } }
    }

    static func starts(_ actions: [M.Action]) -> [M.TransferStart] {
        actions.compactMap { if case .start(let s) = $0 { s } else { nil } }
    }

    @Test func piecesFitTwicePerConnectionAndStartInsideTheWindow() {
        // 8 MiB window, 4 connections: 1 MiB pieces, below the 1 MiB minimum segment it would
        // otherwise be, and the four first ones are handed out at once.
        let (m, actions) = Self.machine()
        #expect(Self.ranges(actions) == (0..<4).map { ByteRange(Int64($0) * Self.MiB, Int64($0 + 1) * Self.MiB) })
        #expect(m.table?.segments.dropLast().allSatisfy { $0.end - $0.start == Self.MiB } == true)
        let small = Planner.plan(inOrderFrom: 0, size: 64 << 20, connections: 16, minimumSegmentSize: Self.MiB, window: 8 << 20)
        #expect(small.first?.count == 256 << 10)
    }

    @Test func nothingPastTheWindowUntilTheReaderTakesMore() {
        var (m, actions) = Self.machine(connections: 2, window: 4 << 20)
        var running = Self.starts(actions)
        #expect(running.map(\.range!.upperBound).max() == 2 * Self.MiB)  // 1 MiB pieces, two connections
        // Every piece in the window arrives; the reader has taken nothing: no new range.
        for start in running {
            let range = start.range!
            #expect(m.claim(start.id, offset: range.lowerBound, count: range.count) == range.count)
            m.commit(start.id, through: range.upperBound, now: 0.5)
        }
        var next: [M.Action] = []
        for start in running { next += m.transferEnded(start.id, .completed, now: 0.5) }
        running = Self.starts(next)
        #expect(running.map { $0.range! } == [ByteRange(2 * Self.MiB, 3 * Self.MiB), ByteRange(3 * Self.MiB, 4 * Self.MiB)])
        for start in running {
            let range = start.range!
            #expect(m.claim(start.id, offset: range.lowerBound, count: range.count) == range.count)
            m.commit(start.id, through: range.upperBound, now: 0.9)
        }
        next = []
        for start in running { next += m.transferEnded(start.id, .completed, now: 0.9) }
        #expect(Self.ranges(next).isEmpty)  // the window [0, 4 MiB) is full, the reader took nothing
        #expect(m.contiguousPrefix == 4 * Self.MiB)
        // The reader takes 2 MiB: the window moves by as much, and two pieces go out.
        actions = m.delivered(through: 2 * Self.MiB, now: 1.0)
        running = Self.starts(actions)
        #expect(running.map { $0.range! } == [ByteRange(4 * Self.MiB, 5 * Self.MiB), ByteRange(5 * Self.MiB, 6 * Self.MiB)])
        // Old news changes nothing.
        #expect(m.delivered(through: Self.MiB, now: 1.1).isEmpty)
    }

    @Test func aStragglerTakesNoFreshPieceButHelpsWithSplits() {
        // 2 MiB pieces. Connections 0-2 fetch a piece in 0.4 s (5 MiB/s); connection 3 takes
        // 2 s for its first (1 MiB/s, under a quarter of the median).
        var (m, actions) = Self.machine(size: 64 << 20, connections: 4, window: 64 << 20)
        var running = Self.starts(actions)
        let slow = running.first { $0.connection == 3 }!
        var slowOffset = slow.range!.lowerBound
        func writeSlow(_ count: Int64, at now: Double) {
            #expect(m.claim(slow.id, offset: slowOffset, count: count) == count)
            slowOffset += count
            m.commit(slow.id, through: slowOffset, now: now)
        }
        for round in 1...4 {
            let now = Double(round) * 0.4
            var next: [M.Action] = []
            for start in running where start.connection != 3 {
                let range = start.range!
                #expect(m.claim(start.id, offset: range.lowerBound, count: range.count) == range.count)
                m.commit(start.id, through: range.upperBound, now: now)
                next += m.transferEnded(start.id, .completed, now: now)
            }
            writeSlow(256 << 10, at: now)
            running = Self.starts(next).filter { !$0.isSplit }
            #expect(running.count == 3)
        }
        writeSlow(slow.range!.upperBound - slowOffset, at: 2.0)
        let after = Self.starts(m.transferEnded(slow.id, .completed, now: 2.0))
        // Its next range is a share of a fast owner's piece, never the next fresh piece.
        #expect(after.allSatisfy { $0.isSplit }, "\(after)")
    }

    @Test func aPausedTransferIsNotStalled() {
        var c = M.Configuration()
        c.connections = 1
        c.stallTimeout = 5
        c.window = 4 << 20
        c.quickCheckpointInterval = 0
        c.durableCheckpointInterval = 0
        var m = M(configuration: c)
        _ = m.probed(M.ProbeAnswer(size: 64 << 20, acceptsRanges: true, openBody: .range(ByteRange(0, 64 << 20))), now: 0)
        let adopted = m.prepared(now: 0).compactMap { if case .adopt(let s) = $0 { s } else { nil } }.first!
        #expect(m.claim(adopted.id, offset: 0, count: 4 * Self.MiB) == 4 * Self.MiB)
        m.commit(adopted.id, through: 4 * Self.MiB, now: 1)
        m.paused(adopted.id, true, now: 1)
        let late = m.tick(now: 30)
        #expect(!late.contains { if case .abort = $0 { true } else { false } }, "\(late)")
        m.paused(adopted.id, false, now: 30)
        let stalled = m.tick(now: 36)
        #expect(stalled.contains { if case .abort(adopted.id, .stalled) = $0 { true } else { false } }, "\(stalled)")
    }
}
