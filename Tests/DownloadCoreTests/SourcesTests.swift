import DownloadCore
import Testing

/// Table tests of several sources for one file: mirrors wait for their identity check, take
/// ranges once it passed, never once it failed, and a source that keeps failing is dropped
/// while the others finish.
@Suite("DownloadMachine with several sources")
struct SourcesTests {
    typealias M = DownloadMachine
    typealias T = DownloadMachineTests
    static let MiB: Int64 = 1 << 20

    /// A running machine of 3 sources × 2 connections over 12 MiB, and its first starts.
    static func running(sources: Int = 3, failuresInARow: Int = 4) -> (M, [M.Action]) {
        var c = T.configuration(connections: 2)
        c.sources = sources
        c.sourceFailuresInARow = failuresInARow
        return T.running(size: 12 * MiB, c)
    }

    static func dropped(_ actions: [M.Action]) -> [Int] {
        actions.compactMap { if case .notify(.sourceDropped(let source, _)) = $0 { source } else { nil } }
    }

    /// Answers the final checkpoint a stopping machine asks for; returns every action.
    static func settled(_ m: inout M, _ actions: [M.Action], now: Double) -> [M.Action] {
        var all = actions
        for case .checkpoint(let c) in actions { all += settled(&m, m.checkpointEnded(c.id, succeeded: true, now: now), now: now) }
        return all
    }

    @Test func onlyTheURLProbedStartsAndMirrorsWaitForTheirCheck() {
        let (m, actions) = Self.running()
        let starts = T.starts(actions)
        #expect(starts.count == 2)
        #expect(starts.allSatisfy { $0.source == 0 && $0.useIfRange })
        #expect(m.connectionCount == 6)
        #expect(m.status(ofSource: 1) == .unchecked && m.status(ofSource: 2) == .unchecked)
    }

    @Test func aMirrorThatPassesTakesRangesWithoutIfRange() {
        var (m, _) = Self.running()
        let starts = T.starts(m.sourceChecked(2, passed: true, now: 0.1))
        #expect(starts.count == 2)
        #expect(starts.allSatisfy { $0.source == 2 && !$0.useIfRange && $0.connection >= 4 })
        #expect(m.status(ofSource: 2) == .active)
        #expect(m.sourceChecked(2, passed: true, now: 0.2).isEmpty, "a second answer changes nothing")
    }

    @Test func aMirrorThatFailsIsDroppedAndNeverAsked() {
        var (m, _) = Self.running()
        let actions = m.sourceChecked(1, passed: false, now: 0.1)
        #expect(Self.dropped(actions) == [1])
        #expect(T.starts(actions).isEmpty)
        #expect(m.status(ofSource: 1) == .dropped)
        // Later passes of time never give it a range.
        _ = m.sourceChecked(2, passed: true, now: 0.2)
        let later = m.tick(now: 5)
        #expect(!T.starts(later).contains { $0.source == 1 })
    }

    @Test func aNotFoundMirrorIsDroppedAndItsRangeGoesToTheOthers() {
        var (m, first) = Self.running()
        let mirrorStarts = T.starts(m.sourceChecked(1, passed: true, now: 0.1))
        let failing = mirrorStarts[0]
        let actions = m.transferEnded(failing.id, .failed(M.TransferFailure(httpStatus: 404)), now: 0.2)
        #expect(Self.dropped(actions) == [1])
        #expect(!actions.contains { if case .fail = $0 { true } else { false } })
        // A connection of the URL probed finishes its range and takes the one the mirror left.
        let own = T.starts(first)[0]
        _ = T.write(&m, own.id, from: own.range!.lowerBound, own.range!.count, now: 0.3)
        let next = T.starts(m.transferEnded(own.id, .completed, now: 0.3))
        #expect(next.contains { $0.source == 0 && $0.range?.lowerBound == failing.range!.lowerBound })
    }

    @Test func aMirrorNamingAnotherSizeIsDroppedNotRestarted() {
        var (m, _) = Self.running()
        let start = T.starts(m.sourceChecked(1, passed: true, now: 0.1))[0]
        let failure = M.TransferFailure(httpStatus: 206, kind: .protocolFault(.wrongRange), observedTotal: 99 * Self.MiB)
        let actions = m.transferEnded(start.id, .failed(failure), now: 0.2)
        #expect(Self.dropped(actions) == [1])
        #expect(m.phase == .running)
    }

    @Test func aSourceThatKeepsFailingIsDroppedAfterTheLimit() {
        var (m, _) = Self.running(failuresInARow: 3)
        var starts = T.starts(m.sourceChecked(1, passed: true, now: 0.1))
        var now = 0.2
        var drops: [Int] = []
        for _ in 0..<10 where drops.isEmpty {
            guard let start = starts.first(where: { $0.source == 1 }) else {
                now += 40
                starts = T.starts(m.tick(now: now))
                continue
            }
            starts.removeAll { $0.id == start.id }
            let actions = m.transferEnded(start.id, .failed(M.TransferFailure(kind: .network(.receive))), now: now)
            drops = Self.dropped(actions)
            starts += T.starts(actions)
        }
        #expect(drops == [1])
        #expect(m.status(ofSource: 1) == .dropped && m.phase == .running)
    }

    @Test func theLastSourceFailingEndsTheDownload() {
        var (m, first) = Self.running(sources: 2)
        _ = m.sourceChecked(1, passed: false, now: 0.1)
        let start = T.starts(first)[0]
        var actions = m.transferEnded(start.id, .failed(M.TransferFailure(httpStatus: 404)), now: 0.2)
        #expect(Self.dropped(actions).isEmpty, "the last source is not dropped: its failure is the download's")
        for other in T.starts(first).dropFirst() { actions += m.transferEnded(other.id, .aborted, now: 0.3) }
        actions = Self.settled(&m, actions, now: 0.4)
        #expect(actions.contains { if case .fail(.transfer(start.id, _), _) = $0 { true } else { false } })
    }

    @Test func theURLProbedFailingLeavesTheMirrorsToFinish() {
        var (m, first) = Self.running(sources: 2)
        _ = m.sourceChecked(1, passed: true, now: 0.1)
        let start = T.starts(first)[0]
        let actions = m.transferEnded(start.id, .failed(M.TransferFailure(httpStatus: 410)), now: 0.2)
        #expect(Self.dropped(actions) == [0])
        #expect(m.phase == .running)
    }

    @Test func everyMirrorRejectedAfterThePrimaryWasDroppedFails() {
        var (m, first) = Self.running(sources: 2)
        let start = T.starts(first)[0]
        _ = m.transferEnded(start.id, .failed(M.TransferFailure(httpStatus: 404)), now: 0.2)
        #expect(m.status(ofSource: 0) == .dropped)
        var actions = m.sourceChecked(1, passed: false, now: 0.3)
        for other in T.starts(first).dropFirst() { actions += m.transferEnded(other.id, .aborted, now: 0.4) }
        actions = Self.settled(&m, actions, now: 0.5)
        #expect(actions.contains { if case .fail(.noSourceLeft, _) = $0 { true } else { false } })
    }

    @Test func aResumedDownloadChecksItsMirrorsAgain() {
        var c = T.configuration(connections: 2)
        c.sources = 2
        let size = 8 * Self.MiB
        var m = M(configuration: c, resuming: size, progress: [(ByteRange(0, 4 * Self.MiB), 2 * Self.MiB),
                                                               (ByteRange(4 * Self.MiB, size), 4 * Self.MiB)], durable: [:])
        let first = T.starts(m.probed(M.ProbeAnswer(size: size, acceptsRanges: true), now: 0))
        #expect(!first.isEmpty && first.allSatisfy { $0.source == 0 })
        #expect(m.status(ofSource: 1) == .unchecked)
        let later = T.starts(m.sourceChecked(1, passed: true, now: 0.1))
        #expect(!later.isEmpty && later.allSatisfy { $0.source == 1 && !$0.useIfRange })
    }

    @Test func aStreamUsesOnlyTheURLProbed() {
        var c = T.configuration(connections: 2)
        c.sources = 3
        var m = M(configuration: c)
        let actions = m.probed(M.ProbeAnswer(size: nil, acceptsRanges: false), now: 0)
        #expect(Self.dropped(actions) == [1, 2])
        #expect(m.connectionCount == 1)
    }
}
