@testable import Splitfetch
import Testing

/// Idle workers must wake when another worker's transfer ends, not only when their poll interval
/// passes. Every wait below has an hour-long timeout, so a missed wake shows as the test's time
/// limit, never as a pass.
@Suite(.timeLimit(.minutes(1)))
struct IdleWaitersTests {
    @Test func aWakeEndsTheWait() async {
        let waiters = IdleWaiters()
        let generation = waiters.generation
        let waiting = Task { await waiters.wait(since: generation, timeout: .seconds(3600)) }
        waiters.wakeAll()
        await waiting.value
        #expect(waiters.generation == generation + 1)
    }

    @Test func aWakeBeforeTheWaitIsNotMissed() async {
        let waiters = IdleWaiters()
        let generation = waiters.generation
        waiters.wakeAll()  // between reading the generation and waiting
        await waiters.wait(since: generation, timeout: .seconds(3600))
        #expect(waiters.generation != generation)
    }

    @Test func everyWaiterWakes() async {
        let waiters = IdleWaiters()
        let generation = waiters.generation
        let woken = await withTaskGroup(of: Int.self) { group in
            for i in 0..<32 {
                group.addTask {
                    await waiters.wait(since: generation, timeout: .seconds(3600))
                    return i
                }
            }
            waiters.wakeAll()
            var seen: [Int] = []
            for await i in group { seen.append(i) }
            return seen.sorted()
        }
        #expect(woken == Array(0..<32))
    }

    @Test func cancellationEndsTheWait() async {
        let waiters = IdleWaiters()
        let generation = waiters.generation
        let waiting = Task { await waiters.wait(since: generation, timeout: .seconds(3600)) }
        waiting.cancel()
        await waiting.value
        #expect(waiters.generation == generation)
    }

    @Test func theTimeoutEndsTheWaitWithoutAWake() async {
        let waiters = IdleWaiters()
        let generation = waiters.generation
        await waiters.wait(since: generation, timeout: .milliseconds(5))
        #expect(waiters.generation == generation)
    }
}
