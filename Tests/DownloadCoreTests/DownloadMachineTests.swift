import DownloadCore
import Testing

/// Table tests: each event the machine takes, in each situation that matters, and the exact
/// actions it answers with.
@Suite("DownloadMachine")
struct DownloadMachineTests {
    typealias M = DownloadMachine
    static let MiB: Int64 = 1 << 20

    static func configuration(connections: Int = 2, retries: Int = 3, quick: Double = 0, durable: Double = 0,
                              stallTimeout: Double = 20) -> M.Configuration {
        var c = M.Configuration()
        c.connections = connections
        c.minimumSegmentSize = MiB
        c.retry = RetryPolicy(retries: retries, baseDelay: 1, maximumDelay: 30)
        c.quickCheckpointInterval = quick
        c.durableCheckpointInterval = durable
        c.stallTimeout = stallTimeout
        c.split = SegmentTable.SplitPolicy(minimumPiece: 64 << 10, alignment: 4096, requestOverhead: 0.05,
                                           rateWarmup: 0.5, stallAfter: 1.5, minimumBlindPiece: MiB)
        c.seed = 42
        return c
    }

    /// A segmented machine of `size` bytes, prepared, with its first starts returned.
    static func running(size: Int64 = 4 * MiB, _ configuration: M.Configuration = configuration()) -> (M, [M.Action]) {
        var m = M(configuration: configuration)
        _ = m.probed(M.ProbeAnswer(size: size, acceptsRanges: true), now: 0)
        let actions = m.prepared(now: 0)
        return (m, actions)
    }

    static func starts(_ actions: [M.Action]) -> [M.TransferStart] {
        actions.compactMap { if case .start(let s) = $0 { s } else { nil } }
    }

    static func aborts(_ actions: [M.Action]) -> [M.TransferID: M.AbortReason] {
        Dictionary(uniqueKeysWithValues: actions.compactMap { if case .abort(let id, let r) = $0 { (id, r) } else { nil } })
    }

    /// Writes `count` bytes of transfer `id` from `offset` (claim, then commit).
    static func write(_ m: inout M, _ id: M.TransferID, from offset: Int64, _ count: Int64, now: Double) -> Int64 {
        let allowed = m.claim(id, offset: offset, count: count)
        m.commit(id, through: offset + allowed, now: now)
        return allowed
    }

    // MARK: - Probe answered

    @Test("the probe's answer decides the mode", arguments: [
        (Int64?(4 << 20), true, M.Mode.segmented(size: 4 << 20)),
        (Int64?(4 << 20), false, M.Mode.stream(size: 4 << 20)),
        (nil, true, M.Mode.stream(size: nil)),
        (Int64?(0), true, M.Mode.stream(size: 0)),
    ])
    func probeDecidesTheMode(size: Int64?, ranges: Bool, expected: M.Mode) {
        var m = M(configuration: Self.configuration())
        let actions = m.probed(M.ProbeAnswer(size: size, acceptsRanges: ranges), now: 0)
        guard case .prepare(let preparation)? = actions.first, actions.count == 1 else {
            Issue.record("expected one prepare, got \(actions)")
            return
        }
        #expect(preparation.mode == expected)
        if case .segmented = expected {
            // The first manifest claims nothing and tiles the file.
            #expect(preparation.manifest?.segments == [.init(start: 0, end: 2 * Self.MiB, written: 0),
                                                       .init(start: 2 * Self.MiB, end: 4 * Self.MiB, written: 2 * Self.MiB)])
        } else {
            #expect(preparation.manifest == nil)
        }
    }

    @Test func preparedStartsOneTransferPerPlannedRangeWithIfRange() {
        let (_, actions) = Self.running()
        let starts = Self.starts(actions)
        #expect(starts.map(\.range) == [ByteRange(0, 2 * Self.MiB), ByteRange(2 * Self.MiB, 4 * Self.MiB)])
        #expect(starts.map(\.id) == [1, 2])
        #expect(starts.map(\.connection) == [0, 1])
        #expect(starts.allSatisfy { $0.useIfRange && !$0.isSplit && $0.source == 0 })
        // Only the stall deadlines are due: 20 s after the starts.
        #expect(actions.last == .wake(at: 20))
    }

    @Test func anEmptyFileFinishesWithoutARequest() {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 0, acceptsRanges: true), now: 0)
        #expect(m.prepared(now: 0.01) == [.finish])
    }

    @Test func aResumedDownloadStartsFromEachSegmentsWrittenOffset() {
        var m = M(configuration: Self.configuration(connections: 8), resuming: 4 * Self.MiB,
                  progress: [(ByteRange(0, 2 * Self.MiB), 2 * Self.MiB), (ByteRange(2 * Self.MiB, 4 * Self.MiB), 3 * Self.MiB)],
                  durable: [0: 2 * Self.MiB, 2 * Self.MiB: 3 * Self.MiB])
        #expect(m.writtenBytes == 3 * Self.MiB)
        let starts = Self.starts(m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0))
        // 1 MiB left: one connection is enough, whatever was asked for.
        #expect(starts.map(\.range) == [ByteRange(3 * Self.MiB, 4 * Self.MiB)])
        #expect(m.connectionCount == 1)
    }

    // MARK: - Transfers finishing

    @Test func theLastTransferToEndFinishesTheDownload() {
        var (m, _) = Self.running()
        #expect(Self.write(&m, 1, from: 0, 2 * Self.MiB, now: 1) == 2 * Self.MiB)
        #expect(Self.write(&m, 2, from: 2 * Self.MiB, 2 * Self.MiB, now: 1) == 2 * Self.MiB)
        let first = m.transferEnded(1, .completed, now: 1)
        #expect(!first.contains(.finish) && Self.starts(first).isEmpty)
        #expect(m.transferEnded(2, .completed, now: 1.1).last == .finish)
        #expect(m.phase == .done)
    }

    @Test func finishWaitsForACheckpointInFlight() {
        var (m, _) = Self.running(Self.configuration(quick: 0.1))
        _ = Self.write(&m, 1, from: 0, 2 * Self.MiB, now: 0.05)
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 2 * Self.MiB, now: 0.05)
        let tick = m.tick(now: 0.1)
        guard case .checkpoint(let checkpoint)? = tick.first else {
            Issue.record("expected a quick checkpoint, got \(tick)")
            return
        }
        #expect(!checkpoint.durable)
        // Nothing synced yet: everything written is only cached.
        #expect(checkpoint.segments.map(\.cached) == [2 * Self.MiB, 4 * Self.MiB])
        #expect(checkpoint.segments.map(\.written) == [0, 2 * Self.MiB])
        _ = m.transferEnded(1, .completed, now: 0.11)
        #expect(m.transferEnded(2, .completed, now: 0.12).contains(.finish) == false)
        #expect(m.checkpointEnded(checkpoint.id, succeeded: true, now: 0.13) == [.finish])
    }

    /// A server that caps range lengths ends the response early but cleanly: the rest of the
    /// range is asked for at once, on the same connection, with no failure counted.
    @Test func aCappedRangeIsContinuedAtOnceFromItsFirstUnwrittenByte() {
        var (m, _) = Self.running()
        _ = Self.write(&m, 1, from: 0, Self.MiB, now: 1)
        let ended = m.transferEnded(1, .completed, now: 1)  // 1 MiB short of its range
        #expect(Self.starts(ended).map(\.range) == [ByteRange(Self.MiB, 2 * Self.MiB)])
        #expect(Self.starts(ended).map(\.connection) == [0])
        #expect(!ended.contains { if case .notify = $0 { true } else { false } })
    }

    @Test func aBodyThatEndsEarlyIsRetriedFromItsFirstUnwrittenByte() {
        var (m, _) = Self.running()
        _ = Self.write(&m, 1, from: 0, Self.MiB, now: 1)
        let ended = m.transferEnded(1, .failed(M.TransferFailure(kind: .network(.receive))), now: 1)
        guard case .notify(.retrying(0, 1, 1, let delay))? = ended.first else {
            Issue.record("expected a retry notice, got \(ended)")
            return
        }
        // Backoff with jitter: base 1 s, attempt 1, into [50 %, 100 %).
        #expect(delay >= 0.5 && delay < 1)
        #expect(ended.contains(.wake(at: 1 + delay)))
        let restarted = Self.starts(m.tick(now: 1 + delay))
        #expect(restarted.map(\.range) == [ByteRange(Self.MiB, 2 * Self.MiB)])
        #expect(restarted.map(\.connection) == [0])
    }

    /// A response that ends cleanly with nothing written would loop forever if asked again at
    /// once: it counts as a failed attempt.
    @Test func aCleanEndWithNothingWrittenBacksOff() {
        var (m, _) = Self.running()
        let ended = m.transferEnded(1, .completed, now: 1)
        guard case .notify(.retrying(0, 1, 1, _))? = ended.first else {
            Issue.record("expected a retry notice, got \(ended)")
            return
        }
        #expect(Self.starts(ended).isEmpty)
    }

    /// A server that answers `If-Range` with the unchanged whole file: the range is asked again
    /// at once without `If-Range`, and so is every later request; a second such answer is an
    /// ordinary failure.
    @Test func aMishandledIfRangeIsDroppedOnce() {
        var (m, _) = Self.running()
        let ignored = M.TransferFailure(httpStatus: 200, kind: .protocolFault(.ignoredIfRange), ignoredIfRange: true)
        let ended = m.transferEnded(2, .failed(ignored), now: 1)
        #expect(ended.first == .notify(.ifRangeDropped(connection: 1, transfer: 2)))
        let again = Self.starts(ended)
        #expect(again.map(\.range) == [ByteRange(2 * Self.MiB, 4 * Self.MiB)])
        #expect(again.allSatisfy { !$0.useIfRange })
        let second = m.transferEnded(again[0].id, .failed(ignored), now: 2)
        guard case .notify(.retrying(1, _, 1, _))? = second.first else {
            Issue.record("expected a retry notice, got \(second)")
            return
        }
    }

    // MARK: - Failures

    @Test func aTransientFailureBacksOffExponentiallyThenGivesUp() {
        var (m, _) = Self.running(Self.configuration(retries: 2))
        let failure = M.TransferFailure(httpStatus: 500)
        var delays: [Double] = []
        var id = 1
        var now = 0.0
        for attempt in 1...3 {
            let actions = m.transferEnded(id, .failed(failure), now: now)
            if attempt == 3 {
                // Out of retries: the other transfer is stopped, then a final checkpoint.
                #expect(Self.aborts(actions) == [2: .stopping])
                #expect(m.phase == .stopping(.transfer(id, gaveUpAfter: 2)))
                break
            }
            guard case .notify(.retrying(0, id, attempt, let delay))? = actions.first else {
                Issue.record("attempt \(attempt): \(actions)")
                return
            }
            delays.append(delay)
            now += delay
            id = Self.starts(m.tick(now: now)).first!.id
        }
        #expect(delays.count == 2)
        #expect(delays[0] >= 0.5 && delays[0] < 1 && delays[1] >= 1 && delays[1] < 2)
        let ended = m.transferEnded(2, .aborted, now: now + 0.01)
        guard case .checkpoint(let final)? = ended.first, final.durable else {
            Issue.record("expected the final durable checkpoint, got \(ended)")
            return
        }
        #expect(m.checkpointEnded(final.id, succeeded: true, now: now + 0.02)
            == [.fail(.transfer(id, gaveUpAfter: 2), finalCheckpointFailed: false)])
    }

    @Test func aPermanentFailureEndsTheDownloadAtOnce() {
        var (m, _) = Self.running()
        let actions = m.transferEnded(1, .failed(M.TransferFailure(httpStatus: 404)), now: 1)
        #expect(actions.first == .abort(2, .stopping))
        #expect(m.phase == .stopping(.transfer(1, gaveUpAfter: nil)))
    }

    @Test("Retry-After is honoured for 429 and 503, in seconds and as a date", arguments: [
        (503, RetryAfter.seconds(7), 7.0),
        (429, RetryAfter.date(1_000_012, receivedAt: 1_000_000), 12.0),
        (503, RetryAfter.seconds(3600), 30.0),  // capped at the maximum delay
        (503, RetryAfter.date(10, receivedAt: 20), 0.0),  // a date in the past
    ])
    func retryAfterIsHonoured(status: Int, after: RetryAfter, expected: Double) {
        var m = M(configuration: Self.configuration(connections: 1))
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
        _ = m.prepared(now: 0)
        let actions = m.transferEnded(1, .failed(M.TransferFailure(httpStatus: status, retryAfter: after)), now: 5)
        #expect(actions.first == .notify(.retrying(connection: 0, transfer: 1, attempt: 1, delay: expected)))
    }

    @Test func retryAfterOnOtherStatusesIsNotHonoured() {
        var m = M(configuration: Self.configuration(connections: 1))
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
        _ = m.prepared(now: 0)
        let actions = m.transferEnded(1, .failed(M.TransferFailure(httpStatus: 500, retryAfter: .seconds(20))),
                                      now: 5)
        guard case .notify(.retrying(_, _, _, let delay))? = actions.first else {
            Issue.record("\(actions)")
            return
        }
        #expect(delay < 1)
    }

    @Test func aBusyServerGetsOneConnectionFewerWhileOthersRun() {
        var (m, _) = Self.running()
        let busy = M.TransferFailure(httpStatus: 503, retryAfter: .seconds(1))
        #expect(m.transferEnded(1, .failed(busy), now: 1).first == .notify(.connectionsReduced(remaining: 1, transfer: 2 - 1)))
        // The last connection stays and waits as asked; its range is taken by the other one meanwhile.
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 2 * Self.MiB, now: 1.5)
        let last = m.transferEnded(2, .completed, now: 1.5)
        #expect(Self.starts(last).map(\.range) == [ByteRange(0, 2 * Self.MiB)])
        #expect(Self.starts(last).map(\.connection) == [1])
        #expect(m.transferEnded(3, .failed(busy), now: 2).first
            == .notify(.retrying(connection: 1, transfer: 3, attempt: 1, delay: 1)))
    }

    @Test("FTP's 421 and a refused login are server policy while other connections run", arguments: [
        FailureKind.network(.serverFull), .loginRefused,
    ])
    func aRefusedFileTransferConnectionIsOneFewer(kind: FailureKind) {
        var (m, _) = Self.running()
        #expect(m.transferEnded(1, .failed(M.TransferFailure(kind: kind)), now: 1).first
            == .notify(.connectionsReduced(remaining: 1, transfer: 1)))
    }

    @Test func aLoginRefusedOnTheOnlyConnectionEndsTheDownload() {
        var (m, _) = Self.running(Self.configuration(connections: 1))
        _ = m.transferEnded(1, .failed(M.TransferFailure(kind: .loginRefused)), now: 1)
        #expect(m.phase == .stopping(.transfer(1, gaveUpAfter: nil)) || m.phase == .done)
    }

    @Test func aRefusalAtConnectionsTheServerServedAtOnceIsAskedAgainOnceThenOneFewer() {
        var (m, _) = Self.running()
        // Both connections received bytes at the same time: the server serves two at once.
        _ = Self.write(&m, 1, from: 0, 4096, now: 0.5)
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 4096, now: 0.5)
        let full = M.TransferFailure(kind: .network(.serverFull))
        // A closed session the server still counts: asked again, not a connection fewer.
        guard case .notify(.retrying(connection: 0, transfer: 1, attempt: 1, _))? = m.transferEnded(1, .failed(full), now: 1).first else {
            Issue.record("no retry")
            return
        }
        // Refused again on the same connection: the server means it.
        let again = Self.starts(m.tick(now: 3))
        #expect(again.map(\.connection) == [0])
        #expect(m.transferEnded(again[0].id, .failed(full), now: 3.1).first
            == .notify(.connectionsReduced(remaining: 1, transfer: again[0].id)))
    }

    @Test func aServerThatNeverServedThatManyAtOnceGetsOneFewerAtOnce() {
        var (m, _) = Self.running(Self.configuration(connections: 3))
        _ = Self.write(&m, 1, from: 0, 4096, now: 0.5)  // one at a time so far
        #expect(m.transferEnded(2, .failed(M.TransferFailure(kind: .network(.serverFull))), now: 1).first
            == .notify(.connectionsReduced(remaining: 2, transfer: 2)))
    }

    @Test func anotherTotalBeforeAnyByteRestartsFromAProbe() {
        var (m, _) = Self.running()
        let mismatch = M.TransferFailure(httpStatus: 206, kind: .protocolFault(.wrongRange), observedTotal: 3 * Self.MiB)
        #expect(m.transferEnded(1, .failed(mismatch), now: 1) == [.abort(2, .stopping)])
        #expect(m.transferEnded(2, .aborted, now: 1.01) == [.discardAndProbeAgain])
        // The ranged probe agrees with the 206: segmented at the new size, and no second restart.
        let again = m.probed(M.ProbeAnswer(size: 3 * Self.MiB, acceptsRanges: true), now: 1.1)
        guard case .prepare(let preparation)? = again.first else {
            Issue.record("\(again)")
            return
        }
        #expect(preparation.mode == .segmented(size: 3 * Self.MiB))
        let starts = Self.starts(m.prepared(now: 1.2))
        #expect(starts.map(\.id) == [3, 4])  // transfer ids are never reused
        let second = m.transferEnded(3, .failed(mismatch), now: 2)
        #expect(second.first == .notify(.retrying(connection: 0, transfer: 3, attempt: 1, delay: second.first.flatMap {
            if case .notify(.retrying(_, _, _, let d)) = $0 { d } else { nil }
        } ?? -1)))
    }

    @Test func aProbeThatStillDisagreesFallsBackToOneStream() {
        var (m, _) = Self.running()
        _ = m.transferEnded(1, .failed(M.TransferFailure(kind: .protocolFault(.wrongRange), observedTotal: 3 * Self.MiB)), now: 1)
        _ = m.transferEnded(2, .aborted, now: 1)
        let again = m.probed(M.ProbeAnswer(size: 5 * Self.MiB, acceptsRanges: true), now: 1.1)
        #expect(again == [.prepare(M.Preparation(mode: .stream(size: nil), manifest: nil))])
        let starts = Self.starts(m.prepared(now: 1.2))
        #expect(starts.map(\.range) == [nil] && starts.map(\.useIfRange) == [false])
    }

    @Test func anotherTotalAfterBytesWereWrittenIsRetriedNotRestarted() {
        var (m, _) = Self.running()
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 4096, now: 0.5)
        let actions = m.transferEnded(1, .failed(M.TransferFailure(kind: .protocolFault(.wrongRange), observedTotal: 3 * Self.MiB)), now: 1)
        #expect(!actions.contains(.discardAndProbeAgain))
        if case .notify(.retrying)? = actions.first {} else { Issue.record("\(actions)") }
    }

    /// A 416 saying the file ends before the planned size contradicts what was planned on: even
    /// with bytes written, the download starts over from a clean probe.
    @Test func a416NamingAnotherSizeRestartsEvenAfterBytes() {
        var (m, _) = Self.running()
        _ = Self.write(&m, 1, from: 0, 4096, now: 0.5)
        let ended = m.transferEnded(2, .failed(M.TransferFailure(httpStatus: 416, observedTotal: 3 * Self.MiB)), now: 1)
        #expect(ended == [.abort(1, .stopping)])
        #expect(m.transferEnded(1, .aborted, now: 1.1).contains(.discardAndProbeAgain))
        // Its ranges are not trusted again, even when the new probe agrees with the 416.
        let again = m.probed(M.ProbeAnswer(size: 3 * Self.MiB, acceptsRanges: true), now: 1.2)
        #expect(again == [.prepare(M.Preparation(mode: .stream(size: nil), manifest: nil))])
    }

    /// A redirected URL that answers 403 mid-download (an expired signature) is resolved again
    /// once for all transfers; idle connections wait for the answer, then go on.
    @Test func anExpiredRedirectTargetIsResolvedAgain() {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true, redirected: true), now: 0)
        _ = m.prepared(now: 0)
        let expired = M.TransferFailure(httpStatus: 403)
        let first = m.transferEnded(1, .failed(expired), now: 1)
        #expect(first.first == .resolveAgain && Self.starts(first).isEmpty)
        let second = m.transferEnded(2, .failed(expired), now: 1.1)  // already resolving: wait
        #expect(!second.contains(.resolveAgain) && Self.starts(second).isEmpty && !second.contains { if case .fail = $0 { true } else { false } })
        #expect(Self.starts(m.tick(now: 1.15)).isEmpty)
        let resumed = m.resolved(sameFile: true, now: 1.2)
        #expect(Self.starts(resumed).map(\.range) == [ByteRange(0, 2 * Self.MiB), ByteRange(2 * Self.MiB, 4 * Self.MiB)])
    }

    /// A 403 to a request made before the last resolution is the old target's, read late: its
    /// range is asked of the new target at once, and no resolution is spent on it. A full
    /// ThreadSanitizer run spent all three on such answers while the new targets served, and the
    /// download stopped at 58 %.
    @Test func anOldTargetsExpiryReadAfterTheResolutionSpendsNoResolution() throws {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true, redirected: true), now: 0)
        _ = m.prepared(now: 0)
        let expired = M.TransferFailure(httpStatus: 403)
        #expect(m.transferEnded(1, .failed(expired), now: 1).first == .resolveAgain)
        let resumed = Self.starts(m.resolved(sameFile: true, now: 1.2))
        #expect(resumed.map(\.range) == [ByteRange(0, 2 * Self.MiB)])
        // Transfer 2 went out at 0, to the old target.
        let late = m.transferEnded(2, .failed(expired), now: 1.3)
        #expect(!late.contains(.resolveAgain))
        #expect(!late.contains { if case .notify = $0 { true } else { false } })
        let again = Self.starts(late)
        #expect(again.map(\.range) == [ByteRange(2 * Self.MiB, 4 * Self.MiB)])
        // A request to the new target that finds it expired resolves again.
        let id = try #require(again.first).id
        #expect(m.transferEnded(id, .failed(expired), now: 1.4).first == .resolveAgain)
    }

    @Test func anExpiredRedirectTargetThatLeadsToAnotherFileStops() {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true, redirected: true), now: 0)
        _ = m.prepared(now: 0)
        _ = m.transferEnded(1, .failed(M.TransferFailure(httpStatus: 410)), now: 1)
        #expect(m.resolved(sameFile: false, now: 1.2) == [.abort(2, .stopping)])
        // Without a redirect, a 403 is an ordinary failure.
        var direct = M(configuration: Self.configuration())
        _ = direct.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
        _ = direct.prepared(now: 0)
        #expect(direct.transferEnded(1, .failed(M.TransferFailure(httpStatus: 403)), now: 1) == [.abort(2, .stopping)])
    }

    // MARK: - The probe's open body (GET-first)

    @Test func anOpen206BodyBecomesTheFirstSegmentsTransfer() {
        var m = M(configuration: Self.configuration(connections: 2))
        let probed = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true, openBody: .range(ByteRange(0, Self.MiB))), now: 0)
        guard case .prepare(let preparation)? = probed.first, probed.count == 1 else {
            Issue.record("expected one prepare, got \(probed)")
            return
        }
        // The first segment is the probe's range; the other connection gets a full share (half
        // the file), and the shorter last range waits for the probe's connection.
        #expect(preparation.manifest?.segments.map { ByteRange($0.start, $0.end) }
                == [ByteRange(0, Self.MiB), ByteRange(Self.MiB, 3 * Self.MiB), ByteRange(3 * Self.MiB, 4 * Self.MiB)])
        #expect(m.openBodyTransfer == 1)
        // Other connections will write soon: the first manifest is saved before they start.
        #expect(!preparation.manifestCanWait)
        let started = m.prepared(now: 0.01)
        guard case .adopt(let adopted)? = started.first else {
            Issue.record("expected the adoption first, got \(started)")
            return
        }
        #expect(adopted.id == 1 && adopted.connection == 0 && adopted.range == ByteRange(0, Self.MiB))
        #expect(Self.starts(started).map(\.connection) == [1])
        #expect(Self.starts(started).map(\.range) == [ByteRange(Self.MiB, 3 * Self.MiB)])
        #expect(m.openBodyTransfer == nil)
        // The adopted transfer writes like any other; then its connection takes the last range,
        // and both connections end together at equal speeds.
        #expect(Self.write(&m, 1, from: 0, Self.MiB, now: 1) == Self.MiB)
        #expect(Self.write(&m, 2, from: Self.MiB, Self.MiB, now: 1) == Self.MiB)
        let next = Self.starts(m.transferEnded(1, .completed, now: 1))
        #expect(next.map(\.connection) == [0])
        #expect(next.map(\.range) == [ByteRange(3 * Self.MiB, 4 * Self.MiB)] && next.allSatisfy { !$0.isSplit })
    }

    /// A file smaller than the probe's range is one segment: one request in all.
    @Test func aSmallFileIsTheProbesBodyAlone() {
        var m = M(configuration: Self.configuration(connections: 8))
        let probed = m.probed(M.ProbeAnswer(size: 5000, acceptsRanges: true, openBody: .range(ByteRange(0, 5000))), now: 0)
        // The whole file is the response under way: its first manifest may wait for a checkpoint.
        #expect(probed == [.prepare(M.Preparation(mode: .segmented(size: 5000), manifest: M.Checkpoint(
            id: 0, durable: false, segments: [M.Checkpoint.Segment(start: 0, end: 5000, written: 0)]), manifestCanWait: true))])
        // After a HEAD probe nothing is under way yet: the manifest comes first.
        var headFirst = M(configuration: Self.configuration(connections: 1))
        guard case .prepare(let preparation)? = headFirst.probed(M.ProbeAnswer(size: 5000, acceptsRanges: true), now: 0).first else {
            Issue.record("expected a prepare")
            return
        }
        #expect(!preparation.manifestCanWait && preparation.manifest != nil)
        let started = m.prepared(now: 0.01)
        #expect(started.first == .adopt(M.TransferStart(id: 1, connection: 0, source: 0, range: ByteRange(0, 5000), useIfRange: true,
                                                        isSplit: false)))
        #expect(Self.starts(started).isEmpty)
        #expect(Self.write(&m, 1, from: 0, 5000, now: 0.02) == 5000)
        #expect(m.transferEnded(1, .completed, now: 0.02).contains(.finish))
    }

    @Test func anOpen200BodyIsTheStream() {
        var m = M(configuration: Self.configuration())
        let probed = m.probed(M.ProbeAnswer(size: 9000, acceptsRanges: false, openBody: .whole), now: 0)
        #expect(probed == [.prepare(M.Preparation(mode: .stream(size: 9000), manifest: nil))])
        let started = m.prepared(now: 0.01)
        #expect(started.first == .adopt(M.TransferStart(id: 1, connection: 0, source: 0, range: nil, useIfRange: false, isSplit: false)))
        #expect(Self.starts(started).isEmpty)
    }

    /// An open body that does not fit the plan (a 206 without a total) is discarded; the stream
    /// starts afresh.
    @Test func anOpenBodyThatDoesNotFitIsDiscarded() {
        var m = M(configuration: Self.configuration())
        let probed = m.probed(M.ProbeAnswer(size: nil, acceptsRanges: true, openBody: .range(ByteRange(0, Self.MiB))), now: 0)
        #expect(probed.first == .discardOpenBody)
        #expect(m.openBodyTransfer == nil)
        #expect(Self.starts(m.prepared(now: 0.01)).map(\.range) == [nil])
    }

    /// Cancelled while the file is created: the open body is stopped like any transfer, and the
    /// download ends only when it has reported its end.
    @Test func cancelWhilePreparingStopsTheOpenBody() {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true, openBody: .range(ByteRange(0, Self.MiB))), now: 0)
        #expect(m.cancel(now: 0.005) == [.abort(1, .stopping)])
        #expect(m.prepared(now: 0.01).isEmpty)
        let ended = m.transferEnded(1, .aborted, now: 0.02)
        #expect(ended.contains { if case .checkpoint = $0 { true } else { false } })
    }

    @Test func aStreamRetriesFromByteZero() {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: false), now: 0)
        let first = Self.starts(m.prepared(now: 0))
        #expect(first.map(\.range) == [nil])
        m.commit(1, through: 3 * Self.MiB, now: 1)
        let failed = m.transferEnded(1, .failed(M.TransferFailure(kind: .network(.receive))), now: 1)
        guard case .notify(.retrying(0, 1, 1, let delay))? = failed.first else {
            Issue.record("\(failed)")
            return
        }
        #expect(Self.starts(m.tick(now: 1 + delay)).map(\.range) == [nil])
        #expect(m.transferEnded(2, .completed, now: 5) == [.finish])
    }

    // MARK: - Time: stalls, splits, steals, checkpoints

    @Test func aTransferSilentForTheStallTimeoutIsAbortedAndRetried() {
        var m = M(configuration: Self.configuration(connections: 1, stallTimeout: 5))
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
        #expect(m.prepared(now: 0).last == .wake(at: 5))
        _ = Self.write(&m, 1, from: 0, 4096, now: 1)
        #expect(m.tick(now: 5).isEmpty == false)  // the deadline moved: data arrived at 1 s
        #expect(Self.aborts(m.tick(now: 6)) == [1: .stalled])
        let ended = m.transferEnded(1, .aborted, now: 6.1)
        if case .notify(.retrying(0, 1, 1, _))? = ended.first {} else { Issue.record("\(ended)") }
    }

    /// A transfer found silent whose own end was already on its way (a loaded process reads its
    /// events late): judged by how it ended, not as a stall. A full ThreadSanitizer run judged a
    /// server's 200 to `If-Range` as a stall each time: If-Range was never dropped, and the
    /// download gave up where it should have gone on without it.
    @Test func aTransferEndingAsItIsAbortedForAStallIsJudgedByItsEnd() throws {
        var m = M(configuration: Self.configuration(connections: 1, stallTimeout: 5))
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
        _ = m.prepared(now: 0)
        #expect(Self.aborts(m.tick(now: 6)) == [1: .stalled])
        let ignored = M.TransferFailure(httpStatus: 200, kind: .protocolFault(.ignoredIfRange), ignoredIfRange: true)
        let ended = m.transferEnded(1, .failed(ignored), now: 6.1)
        #expect(ended.first == .notify(.ifRangeDropped(connection: 0, transfer: 1)))
        let again = Self.starts(ended)
        #expect(again.map(\.range) == [ByteRange(0, 4 * Self.MiB)])
        #expect(again.allSatisfy { !$0.useIfRange })
        // All of its range written just as it was found silent: done, not a failure.
        let id = try #require(again.first).id
        _ = Self.write(&m, id, from: 0, 4 * Self.MiB, now: 6.2)
        #expect(Self.aborts(m.tick(now: 11.3)) == [id: .stalled])
        #expect(!m.transferEnded(id, .completed, now: 11.4).contains { if case .notify(.retrying) = $0 { true } else { false } })
    }

    @Test func anIdleConnectionTakesAStalledRemainderWholeAndStopsItsOwner() {
        var (m, _) = Self.running()
        // Transfer 1 is 64 KiB short of its end: too little to split while it moves.
        _ = Self.write(&m, 1, from: 0, 2 * Self.MiB - (64 << 10), now: 1)
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 2 * Self.MiB, now: 1)
        #expect(Self.starts(m.transferEnded(2, .completed, now: 1)).isEmpty)
        #expect(Self.starts(m.tick(now: 2.4)).isEmpty)  // 1.4 s without data: not stalled yet
        let steal = m.tick(now: 2.6)
        #expect(Self.aborts(steal) == [1: .takenOver])
        #expect(Self.starts(steal).map(\.range) == [ByteRange(2 * Self.MiB - (64 << 10), 2 * Self.MiB)])
        #expect(Self.starts(steal).first?.isSplit == true)
        // Taken over is not a failure: no retry, no backoff.
        #expect(m.transferEnded(1, .aborted, now: 2.7).contains { if case .notify = $0 { true } else { false } } == false)
    }

    @Test func anOwnerWithNoSpeedAtAllLosesItsRangeAndIsStopped() {
        var (m, _) = Self.running()
        // Transfer 1 has received nothing in 1 s; transfer 2 did 2 MiB/s.
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 2 * Self.MiB, now: 1)
        let actions = m.transferEnded(2, .completed, now: 1)
        #expect(Self.aborts(actions) == [1: .takenOver])
        #expect(Self.starts(actions).map(\.range) == [ByteRange(0, 2 * Self.MiB)])
    }

    @Test func aTakenOverTransferCanWriteNothingMore() {
        var (m, _) = Self.running()
        _ = Self.write(&m, 1, from: 0, 4096, now: 0.1)
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 2 * Self.MiB, now: 0.1)
        _ = m.transferEnded(2, .completed, now: 0.1)
        _ = m.tick(now: 1.7)  // transfer 1 stalled since 0.1: taken over by transfer 3
        #expect(m.claim(1, offset: 4096, count: 4096) == 0)
        #expect(m.claim(3, offset: 4096, count: 4096) == 4096)
    }

    @Test func anIdleConnectionSplitsTheRangeExpectedToFinishLast() {
        var (m, _) = Self.running(size: 8 * Self.MiB)
        // Transfer 2 finishes its 4 MiB at once; transfer 1 has written 1 MiB in 1 s.
        _ = Self.write(&m, 1, from: 0, Self.MiB, now: 1)
        _ = Self.write(&m, 2, from: 4 * Self.MiB, 4 * Self.MiB, now: 1)
        let actions = m.transferEnded(2, .completed, now: 1)
        let split = Self.starts(actions)
        #expect(split.count == 1 && split[0].isSplit && split[0].connection == 1)
        // The owner keeps the bytes before the split point; a claim past it is clamped.
        let point = split[0].range!.lowerBound
        #expect(point > Self.MiB && point < 4 * Self.MiB && point % 4096 == 0 && split[0].range!.upperBound == 4 * Self.MiB)
        #expect(m.claim(1, offset: Self.MiB, count: 4 * Self.MiB) == point - Self.MiB)
    }

    @Test func theSegmentMapShowsRangesInFileOrderWithTheirConnectionsAndSplits() {
        var (m, _) = Self.running(size: 8 * Self.MiB)
        #expect(m.segmentMap == [M.SegmentView(start: 0, end: 4 * Self.MiB, written: 0, connection: 0, isSplit: false),
                                 M.SegmentView(start: 4 * Self.MiB, end: 8 * Self.MiB, written: 4 * Self.MiB, connection: 1,
                                               isSplit: false)])
        _ = Self.write(&m, 1, from: 0, Self.MiB, now: 1)
        _ = Self.write(&m, 2, from: 4 * Self.MiB, 4 * Self.MiB, now: 1)
        let split = Self.starts(m.transferEnded(2, .completed, now: 1))
        let point = split[0].range!.lowerBound
        // The split-off tail sits between its victim and the finished segment, on connection 1.
        #expect(m.segmentMap == [M.SegmentView(start: 0, end: point, written: Self.MiB, connection: 0, isSplit: false),
                                 M.SegmentView(start: point, end: 4 * Self.MiB, written: point, connection: 1, isSplit: true),
                                 M.SegmentView(start: 4 * Self.MiB, end: 8 * Self.MiB, written: 8 * Self.MiB, connection: nil,
                                               isSplit: false)])
        #expect(M(configuration: Self.configuration()).segmentMap.isEmpty)
    }

    @Test func checkpointsFollowTheirCadenceOneAtATime() {
        var (m, _) = Self.running(Self.configuration(quick: 0.1, durable: 1))
        _ = Self.write(&m, 1, from: 0, 4096, now: 0.05)
        guard case .checkpoint(let quick)? = m.tick(now: 0.1).first else { Issue.record("no quick checkpoint"); return }
        #expect(!quick.durable)
        _ = Self.write(&m, 1, from: 4096, 4096, now: 0.2)
        #expect(m.tick(now: 0.25).contains { if case .checkpoint = $0 { true } else { false } } == false)  // one in flight
        // Quick checkpoints came due meanwhile: the next one starts as this one ends.
        guard case .checkpoint(let next)? = m.checkpointEnded(quick.id, succeeded: true, now: 0.26).first else {
            Issue.record("no quick checkpoint after the first")
            return
        }
        _ = m.checkpointEnded(next.id, succeeded: true, now: 0.27)
        // Nothing written since: nothing to save.
        #expect(m.tick(now: 0.4).contains { if case .checkpoint = $0 { true } else { false } } == false)
        _ = Self.write(&m, 1, from: 8192, 4096, now: 0.9)
        guard case .checkpoint(let durable)? = m.tick(now: 1.0).first else { Issue.record("no durable checkpoint"); return }
        #expect(durable.durable)
        #expect(durable.segments.first == .init(start: 0, end: 2 * Self.MiB, written: 12288))
        _ = m.checkpointEnded(durable.id, succeeded: true, now: 1.01)
        // After a durable one, a quick one claims as written what was synced, the rest as cached.
        _ = Self.write(&m, 1, from: 12288, 4096, now: 1.05)
        guard case .checkpoint(let after)? = m.tick(now: 1.11).first else { Issue.record("no quick checkpoint"); return }
        #expect(after.segments.first == .init(start: 0, end: 2 * Self.MiB, written: 12288, cached: 16384))
    }

    @Test func aCompletedSegmentIsSavedAtOnceNotAtTheNextQuickTick() {
        var (m, _) = Self.running(Self.configuration(quick: 0.1))
        #expect(Self.write(&m, 1, from: 0, 2 * Self.MiB, now: 0.02) == 2 * Self.MiB)
        // Well before the quick interval: the completed segment is saved as the transfer ends.
        let ended = m.transferEnded(1, .completed, now: 0.03)
        guard let saved = ended.compactMap({ if case .checkpoint(let c) = $0 { c } else { nil } }).first else {
            Issue.record("no checkpoint when the segment completed: \(ended)")
            return
        }
        #expect(!saved.durable)
        #expect(saved.segments.first == .init(start: 0, end: 2 * Self.MiB, written: 0, cached: 2 * Self.MiB))
        _ = m.checkpointEnded(saved.id, succeeded: true, now: 0.04)
        // Bytes of an unfinished segment wait for the interval.
        _ = Self.write(&m, 2, from: 2 * Self.MiB, 4096, now: 0.05)
        #expect(m.tick(now: 0.06).contains { if case .checkpoint = $0 { true } else { false } } == false)
        #expect(m.tick(now: 0.14).contains { if case .checkpoint = $0 { true } else { false } })
    }

    @Test func aFailedCheckpointStopsEverythingAndSavesNothingMore() {
        var (m, _) = Self.running(Self.configuration(quick: 0.1))
        _ = Self.write(&m, 1, from: 0, 4096, now: 0.05)
        guard case .checkpoint(let c)? = m.tick(now: 0.1).first else { Issue.record("no checkpoint"); return }
        #expect(Self.aborts(m.checkpointEnded(c.id, succeeded: false, now: 0.2)) == [1: .stopping, 2: .stopping])
        _ = m.transferEnded(1, .aborted, now: 0.3)
        #expect(m.transferEnded(2, .aborted, now: 0.3) == [.fail(.checkpoint(id: c.id), finalCheckpointFailed: false)])
    }

    // MARK: - Cancellation

    @Test func cancelStopsEveryTransferThenSavesAFinalCheckpoint() {
        var (m, _) = Self.running()
        #expect(Self.aborts(m.cancel(now: 1)) == [1: .stopping, 2: .stopping])
        #expect(m.cancel(now: 1.1).isEmpty)  // once is enough
        #expect(m.claim(1, offset: 0, count: 10) == 0)  // no more bytes from a stopping transfer
        _ = m.transferEnded(1, .aborted, now: 1.2)
        guard case .checkpoint(let final)? = m.transferEnded(2, .aborted, now: 1.3).first else { Issue.record("no final"); return }
        #expect(final.durable)
        #expect(m.checkpointEnded(final.id, succeeded: false, now: 1.4) == [.fail(.cancelled, finalCheckpointFailed: true)])
    }

    @Test func aTransferStoppedFromOutsideMeansTheCallerIsGoingAway() {
        var (m, _) = Self.running()
        #expect(Self.aborts(m.transferEnded(1, .aborted, now: 1)) == [2: .stopping])
        #expect(m.phase == .stopping(.cancelled))
    }

    @Test func cancelBeforeTheProbeAnswersFailsAtOnce() {
        var m = M(configuration: Self.configuration())
        #expect(m.cancel(now: 0) == [.fail(.cancelled, finalCheckpointFailed: false)])
    }

    @Test func cancelWhilePreparingWaitsForTheFileThenSavesIt() {
        var m = M(configuration: Self.configuration())
        _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
        #expect(m.cancel(now: 0.001).isEmpty)
        guard case .checkpoint(let final)? = m.prepared(now: 0.002).first else { Issue.record("no final checkpoint"); return }
        #expect(m.checkpointEnded(final.id, succeeded: true, now: 0.003) == [.fail(.cancelled, finalCheckpointFailed: false)])
    }

    // MARK: - Retry policy

    @Test func backoffDoublesUpToTheMaximumWithJitterInTheUpperHalf() {
        let policy = RetryPolicy(retries: 10, baseDelay: 0.25, maximumDelay: 4)
        #expect(policy.delay(attempt: 1, retryAfter: nil, jitter: 0) == 0.125)
        #expect(policy.delay(attempt: 3, retryAfter: nil, jitter: 0.999_999) < 1)
        #expect(policy.delay(attempt: 3, retryAfter: nil, jitter: 0) == 0.5)
        #expect(policy.delay(attempt: 9, retryAfter: nil, jitter: 0) == 2)
        #expect(policy.delay(attempt: 2, retryAfter: 9, jitter: 0.3) == 4)
    }

    /// The one retry rule, used for the probe and for every transfer.
    @Test("retry or give up", arguments: [
        (M.TransferFailure(httpStatus: 503), 1, RetryPolicy.Decision.retry(after: 0.125)),
        (M.TransferFailure(httpStatus: 503, retryAfter: .seconds(3)), 1, .retry(after: 3)),
        (M.TransferFailure(httpStatus: 503, retryAfter: .date(1_000, receivedAt: 998)), 2, .retry(after: 2)),
        (M.TransferFailure(httpStatus: 500, retryAfter: .seconds(3)), 1, .retry(after: 0.125)),
        (M.TransferFailure(kind: .network(.receive)), 3, .retry(after: 0.5)),
        (M.TransferFailure(kind: .network(.receive)), 4, .giveUp),
        (M.TransferFailure(httpStatus: 404), 1, .giveUp),
    ])
    func retryDecisions(failure: M.TransferFailure, attempt: Int, expected: RetryPolicy.Decision) {
        let policy = RetryPolicy(retries: 3, baseDelay: 0.25, maximumDelay: 30)
        var random = SplitMix64(seed: 1)
        // The backoffs in the table are at jitter 0: a jittered one lies in [d, 2d).
        let decided = policy.decide(failure, attempt: attempt, random: &random)
        switch (decided, expected) {
        case (.giveUp, .giveUp):
            var fresh = SplitMix64(seed: 1)
            #expect(random.next() == fresh.next(), "giving up draws no jitter")
        case (.retry(let delay), .retry(let atZeroJitter)):
            let honoured = failure.retryAfter != nil && [429, 503].contains(failure.httpStatus ?? 0)
            if honoured {
                #expect(delay == atZeroJitter)
            } else {
                #expect(delay >= atZeroJitter && delay < 2 * atZeroJitter)
            }
        default:
            Issue.record("decided \(decided), expected \(expected)")
        }
    }

    @Test func theSameSeedGivesTheSameDelays() {
        func delays(seed: UInt64) -> [Double] {
            var c = Self.configuration(connections: 1, retries: 8)
            c.seed = seed
            var m = M(configuration: c)
            _ = m.probed(M.ProbeAnswer(size: 4 * Self.MiB, acceptsRanges: true), now: 0)
            var id = Self.starts(m.prepared(now: 0))[0].id
            var out: [Double] = []
            var now = 0.0
            for _ in 0..<5 {
                guard case .notify(.retrying(_, _, _, let d))? = m.transferEnded(id, .failed(.init(kind: .network(.receive))), now: now).first
                else { return out }
                out.append(d)
                now += d
                id = Self.starts(m.tick(now: now))[0].id
            }
            return out
        }
        #expect(delays(seed: 7) == delays(seed: 7))
        #expect(delays(seed: 7) != delays(seed: 8))
        #expect(delays(seed: 7).count == 5)
    }
}
