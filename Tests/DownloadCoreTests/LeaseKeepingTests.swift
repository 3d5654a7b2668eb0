import DownloadCore
import Testing

struct LeaseKeepingTests {
    @Test func aRenewalStopsTheRunningJobsItNoLongerHolds() {
        var keeping = LeaseKeeping(leaseSeconds: 30, now: 0)
        // "b" was claimed by another worker; "c" ended here while the renewal was under way.
        let stop = keeping.renewed(sentAt: 10, asked: ["a", "b", "c"], held: ["a"], running: ["a", "b"])
        #expect(stop == ["b"])
        #expect(keeping.confirmedAt == 10)
        #expect(keeping.renewEvery == 10)
    }

    @Test("failed renewals stop every job once a confirmation is too old, once per outage", arguments: [
        // (failures at, expected answers)
        ([12.0, 20.0, 23.9], [false, false, false]),
        ([12.0, 24.0, 30.0], [false, true, false]),
        ([40.0], [true]),
    ])
    func failedRenewals(failures: [Double], expected: [Bool]) {
        var keeping = LeaseKeeping(leaseSeconds: 30, now: 0)
        var answers: [Bool] = []
        for time in failures { answers.append(keeping.renewalFailed(at: time)) }
        #expect(answers == expected)
    }

    @Test func anAnswerAfterAnOutageArmsTheStopAgain() {
        var keeping = LeaseKeeping(leaseSeconds: 30, now: 0)
        let failed25 = keeping.renewalFailed(at: 25)
        #expect(failed25)
        #expect(keeping.stoppedUnconfirmed)
        _ = keeping.renewed(sentAt: 50, asked: [], held: [], running: [])
        #expect(!keeping.stoppedUnconfirmed)
        let failed60 = keeping.renewalFailed(at: 60)
        #expect(!failed60)
        let failed74 = keeping.renewalFailed(at: 74)
        #expect(failed74)
    }

    @Test func idleTimeNeedsNoConfirmation() {
        var keeping = LeaseKeeping(leaseSeconds: 30, now: 0)
        keeping.idle(at: 100)
        let failed110 = keeping.renewalFailed(at: 110)
        #expect(!failed110)
        let failed124 = keeping.renewalFailed(at: 124)
        #expect(failed124)
    }

    /// A renewal that never answers: each attempt is cut off so that the stop comes before the
    /// lease runs out (24 s of a 30 s lease, the next attempt cut off after 1 s), never at it.
    @Test("renewals that hang are cut off in time to stop before the lease runs out", arguments: [
        // (now, confirmed at, time limit, retry delay)
        (10.0, 0.0, 10.0, 10.0),   // early: a whole period each
        (20.0, 0.0, 4.0, 4.0),     // the stop point is 4 s away
        (23.5, 0.0, 1.0, 0.5),     // at least a second to answer, half a second between
        (24.0, 0.0, 1.0, 0.5),
        (40.0, 0.0, 1.0, 0.5),     // past it (stopped already): the floor, never a busy loop
        (30.0, 20.0, 10.0, 10.0),  // confirmed at 20: stop point at 44
    ])
    func hangingRenewalsAreCutOff(now: Double, confirmed: Double, limit: Double, retry: Double) {
        var keeping = LeaseKeeping(leaseSeconds: 30, now: 0)
        if confirmed > 0 { _ = keeping.renewed(sentAt: confirmed, asked: [], held: [], running: []) }
        #expect(keeping.stopAt == confirmed + 24)
        #expect(keeping.timeLimit(at: now) == limit)
        #expect(keeping.retryDelay(afterFailureAt: now) == retry)
    }

    /// Walked through: renewals at 10 (cut off at 20), 24 (cut off at 25: stop), each failing.
    @Test func aDatabaseThatNeverAnswersStopsTheJobsBeforeTheLeaseEnds() {
        var keeping = LeaseKeeping(leaseSeconds: 30, now: 0)
        var now = keeping.renewEvery
        var stoppedAt: Double?
        for _ in 0..<10 where stoppedAt == nil {
            now += keeping.timeLimit(at: now)
            if keeping.renewalFailed(at: now) { stoppedAt = now }
            now += keeping.retryDelay(afterFailureAt: now)
        }
        #expect(stoppedAt == 25)
    }
}
