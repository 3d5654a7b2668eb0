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
}
