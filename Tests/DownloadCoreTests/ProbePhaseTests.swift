import DownloadCore
import Testing

/// The probe phase and the time limit: which request, when to ask again, when to give up, and
/// what a deadline does to a running download.
@Suite("Probe phase and deadline")
struct ProbePhaseTests {
    typealias M = DownloadMachine

    static func phase(deadline: Double? = nil, retries: Int = 2) -> ProbePhase {
        ProbePhase(request: .getFirst, retry: RetryPolicy(retries: retries, baseDelay: 1, maximumDelay: 30), probeTimeout: 15,
                   deadline: deadline, seed: 7)
    }

    @Test(arguments: [
        // deadline, now → the step
        (Double?.none, 0.0, ProbePhase.Step.ask(.getFirst, timeout: 15)),
        (10, 2, .ask(.getFirst, timeout: 8)),  // the time left is the wait
        (30, 2, .ask(.getFirst, timeout: 15)),
        (10, 10, .timedOut),
    ])
    func eachAttemptWaitsAtMostTheTimeLeft(deadline: Double?, now: Double, step: ProbePhase.Step) {
        #expect(Self.phase(deadline: deadline).next(now: now) == step)
    }

    @Test func aTransientFailureIsAskedAgainUntilTheRetriesAreUsedUp() {
        var phase = Self.phase(retries: 2)
        guard case .wait(let first, 1) = phase.failed(M.TransferFailure(httpStatus: 503), now: 0) else {
            Issue.record("a 503 is retried")
            return
        }
        #expect(first >= 0.5 && first < 1)  // the backoff's first delay, jittered into [50 %, 100 %)
        guard case .wait(let second, 2) = phase.failed(M.TransferFailure(kind: .network(.connect)), now: 1) else {
            Issue.record("a refused connection is retried")
            return
        }
        #expect(second >= 1 && second < 2)
        #expect(phase.failed(M.TransferFailure(httpStatus: 503), now: 3) == .giveUp(retried: 2))
    }

    @Test(arguments: [
        (M.TransferFailure(httpStatus: 404), ProbePhase.Step.giveUp(retried: nil)),
        (M.TransferFailure(kind: .network(.tls)), .giveUp(retried: nil)),
        (M.TransferFailure(kind: .protocolFault(.malformed)), .giveUp(retried: nil)),
        (M.TransferFailure(kind: .fatal), .giveUp(retried: nil)),
    ])
    func aFailureNoRetryChangesEndsTheProbeAtOnce(failure: M.TransferFailure, step: ProbePhase.Step) {
        var phase = Self.phase()
        #expect(phase.failed(failure, now: 0) == step)
    }

    @Test func theDeadlineCutsTheWaitShortThenEndsTheProbe() {
        var phase = Self.phase(deadline: 2.2, retries: 5)
        _ = phase.failed(M.TransferFailure(httpStatus: 503), now: 0)
        // A 30 s Retry-After, 0.2 s before the limit: the wait ends at the limit.
        guard case .wait(let wait, 2) = phase.failed(M.TransferFailure(httpStatus: 503, retryAfter: .seconds(30)), now: 2) else {
            Issue.record("a 503 before the limit is retried")
            return
        }
        #expect(abs(wait - 0.2) < 1e-9)
        #expect(phase.next(now: 2.2) == .timedOut)
        #expect(phase.failed(M.TransferFailure(httpStatus: 503), now: 2.3) == .timedOut)
    }

    @Test(arguments: [
        // status, failure, size, ranges → verdict
        (Int?(200), FailureKind?.none, Int64?(100), true, ProbePhase.HeadVerdict.enough),
        (200, nil, 0, false, .enough),  // an empty file
        (200, nil, nil, true, .askRangedGet),  // no length
        (200, nil, 100, false, .askRangedGet),  // no Accept-Ranges
        (403, nil, nil, false, .askRangedGet),
        (405, nil, nil, false, .askRangedGet),
        (501, nil, nil, false, .askRangedGet),
        (503, nil, nil, false, .askRangedGet),
        (404, nil, nil, false, .fail),
        (401, nil, nil, false, .fail),
        (nil, .network(.timeout), nil, false, .askRangedGet),
        (nil, .network(.emptyReply), nil, false, .askRangedGet),
        (nil, .network(.receive), nil, false, .askRangedGet),
        (nil, .network(.connect), nil, false, .fail),
        (nil, .network(.tls), nil, false, .fail),
        (nil, .fatal, nil, false, .fail),
    ])
    func whatAHeadLeavesToARangedGet(status: Int?, failure: FailureKind?, size: Int64?, ranges: Bool,
                                     verdict: ProbePhase.HeadVerdict) {
        #expect(ProbePhase.afterHead(status: status, failure: failure, size: size, acceptsRanges: ranges) == verdict)
    }

    // MARK: - The deadline of a running download

    static func configuration(deadline: Double?) -> M.Configuration {
        var c = DownloadMachineTests.configuration()
        c.deadline = deadline
        return c
    }

    @Test func aRunningDownloadAsksToBeWokenAtItsDeadlineAndStopsThere() {
        var m = M(configuration: Self.configuration(deadline: 5))
        _ = m.probed(M.ProbeAnswer(size: 4 * DownloadMachineTests.MiB, acceptsRanges: true), now: 0)
        let started = m.prepared(now: 0)
        #expect(started.contains(.wake(at: 5)))
        #expect(m.tick(now: 4.9).allSatisfy { if case .abort = $0 { false } else { true } })
        #expect(DownloadMachineTests.aborts(m.tick(now: 5)) == [1: .stopping, 2: .stopping])
        #expect(m.phase == .stopping(.timedOut))
        _ = m.transferEnded(1, .aborted, now: 5.1)
        guard case .checkpoint(let final)? = m.transferEnded(2, .aborted, now: 5.2).first else {
            Issue.record("a timed-out download keeps its data: a final checkpoint")
            return
        }
        #expect(m.checkpointEnded(final.id, succeeded: true, now: 5.3) == [.fail(.timedOut, finalCheckpointFailed: false)])
    }

    @Test func aDeadlineWhileTheProbeIsAwaitedFailsAtOnce() {
        var m = M(configuration: Self.configuration(deadline: 1))
        #expect(m.tick(now: 1) == [.fail(.timedOut, finalCheckpointFailed: false)])
    }

    @Test func withoutADeadlineNothingStops() {
        var (m, _) = DownloadMachineTests.running()
        _ = m.tick(now: 1_000_000)
        #expect(m.phase != .stopping(.timedOut))
    }
}
