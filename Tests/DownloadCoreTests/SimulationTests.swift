import Dispatch
import DownloadSimulation
import DownloadCore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Properties of the pure core over seeded simulated downloads. A failing seed is printed with
/// the command that re-runs it with its trace.
@Suite("Simulated downloads")
struct SimulationTests {
    /// How a failing seed is reported.
    static func report(_ scenario: SimulationScenario, _ outcome: Simulator.Outcome, family: String) -> String {
        "seed \(scenario.seed) (re-run: swift run sf-simulate --family \(family) --seed \(scenario.seed)): "
            + "\(outcome.result), \(outcome.violations.prefix(3)); \(scenario)"
    }

    /// Every byte owned and written once, no transfer for a written range, no checkpoint claiming
    /// unwritten bytes, every run ends, and a run without a persistent fault completes.
    @Test func tenThousandSeededDownloadsKeepEveryPromise() async {
        // Under ThreadSanitizer (scripts/test sets SPLITFETCH_UNDER_TSAN) a tenth: the simulator
        // is single-threaded pure code, where TSan finds nothing and costs minutes of the CPU the
        // concurrent suites need.
        let seeds: UInt64 = getenv("SPLITFETCH_UNDER_TSAN") == nil ? 10_000 : 1_000
        // Seconds of CPU in all: off the cooperative pool, which the other suites' tasks need.
        let (failures, finished) = await Self.offThePool { () -> ([String], Int) in
            var failures: [String] = []
            var finished = 0
            for seed in UInt64(1)...seeds {
                let scenario = SimulationScenario.random(seed: seed)
                let outcome = Simulator.run(scenario)
                if outcome.result == .finished { finished += 1 }
                if !outcome.violations.isEmpty || (scenario.persistent == nil && outcome.result != .finished) {
                    failures.append(Self.report(scenario, outcome, family: "random"))
                }
            }
            return (failures, finished)
        }
        #expect(failures.isEmpty, "\(failures.count) failing seeds; first: \(failures.first ?? "")")
        // The mix must exercise both endings, or the properties above check little.
        #expect(finished > Int(seeds) * 8 / 10 && finished < Int(seeds))
    }

    /// Persistent faults end the download with the failure they cause.
    @Test func persistentFaultsEndWithTheirFailure() async {
        var seen: [String: Int] = [:]
        let runs = await Self.offThePool {
            (UInt64(1)...3_000).map { SimulationScenario.random(seed: $0) }.filter { $0.persistent != nil }.map { ($0, Simulator.run($0)) }
        }
        for (scenario, outcome) in runs {
            let persistent = scenario.persistent!
            let ok: Bool
            switch (persistent, outcome.result) {
            case (.notFound, .failed(.transfer(_, gaveUpAfter: nil))): ok = true
            case (.alwaysBusy, .failed(.transfer(_, gaveUpAfter: scenario.configuration.retry.retries))): ok = true
            case (.checkpointFails, .failed(.checkpoint)), (.checkpointFails, .finished): ok = true
            case (.cancel, .failed(.cancelled)), (.cancel, .finished): ok = true
            default: ok = false
            }
            #expect(ok, "\(Self.report(scenario, outcome, family: "random"))")
            seen["\(persistent)".prefix(8).description, default: 0] += 1
        }
        #expect(seen.count == 4, "every kind of persistent fault was drawn: \(seen)")
    }

    /// One thread for every simulation of the suite, one run at a time: off Swift's cooperative
    /// pool, whose threads the network tests' drivers need, and never more than one core, which
    /// their transfers and servers need (one thread per test oversubscribed the 2 cores and timed
    /// probes out).
    static let simulations = DispatchQueue(label: "splitfetch.tests.simulations")

    /// Runs `body` on ``simulations``. Expectations stay with the caller: an issue is recorded from
    /// the test's own task.
    static func offThePool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            simulations.async { continuation.resume(returning: body()) }
        }
    }

    /// Runs seeds 1...300 of a family; every run finishes without a violation, within 1.5 times
    /// its `ideal`. Returns the ratios, sorted, and prints their median, p90 and worst.
    static func finishRatios(_ family: String, _ make: @escaping @Sendable (UInt64) -> SimulationScenario,
                             ideal: @escaping @Sendable (SimulationScenario) -> Double) async -> [Double] {
        var ratios: [Double] = []
        let runs = await offThePool { (UInt64(1)...300).map { seed in let s = make(seed); return (s, Simulator.run(s)) } }
        for (scenario, outcome) in runs {
            #expect(outcome.result == .finished && outcome.violations.isEmpty, "\(report(scenario, outcome, family: family))")
            let ratio = outcome.seconds / ideal(scenario)
            ratios.append(ratio)
            #expect(ratio <= 1.5, "\(report(scenario, outcome, family: family)): \(ratio) x the ideal")
        }
        ratios.sort()
        print("\(family) mixes, finish / ideal over \(ratios.count) runs: median \(ratios[ratios.count / 2]), "
              + "p90 \(ratios[ratios.count * 9 / 10]), worst \(ratios.last!)")
        return ratios
    }

    /// Straggler mixes (a quarter to a half of the connections 4-32 times slower) finish within
    /// 1.5 times the ideal: one request latency plus the size over the sum of the rates.
    @Test func stragglerMixesFinishNearTheIdeal() async {
        _ = await Self.finishRatios("straggler", SimulationScenario.straggler(seed:), ideal: \.idealSeconds)
    }

    /// The same mixes read in order through a window of 16-128 MiB, as by a pipe: the reader
    /// gets the file within 1.5 times the healthy connections' ideal (the stragglers' share
    /// counted as nothing), and at least 80 % of that ideal in nine mixes out of ten.
    @Test func stragglerMixesReadInOrderKeepNearTheHealthyIdeal() async {
        let ratios = await Self.finishRatios("streaming", SimulationScenario.streaming(seed:), ideal: \.healthyIdealSeconds)
        #expect(ratios[ratios.count * 9 / 10] <= 1.25, "p90 \(ratios[ratios.count * 9 / 10]) x the healthy ideal")
    }

    /// Mixes of 1 to 8 sources at random speeds, some answering 404, dying partway or serving
    /// other bytes, always finish while one healthy source remains: within 1.15 times the ideal
    /// of the healthy sources combined, and never with a byte of a source that failed its
    /// identity check (the simulator reports any request to one as a violation).
    @Test func mirrorMixesFinishWithinTheHealthySourcesIdeal() async {
        let seeds: UInt64 = getenv("SPLITFETCH_UNDER_TSAN") == nil ? 300 : 60
        var worst = 0.0
        let runs = await Self.offThePool { (UInt64(1)...seeds).map { seed in let s = SimulationScenario.mirrors(seed: seed); return (s, Simulator.run(s)) } }
        for (scenario, outcome) in runs {
            #expect(outcome.result == .finished && outcome.violations.isEmpty, "\(Self.report(scenario, outcome, family: "mirrors"))")
            let ratio = outcome.seconds / scenario.healthySourcesIdealSeconds
            worst = max(worst, ratio)
            #expect(ratio <= 1.15, "\(Self.report(scenario, outcome, family: "mirrors")): \(ratio) x the healthy sources' ideal")
        }
        print("mirror mixes over \(seeds) runs: worst \(worst) x the healthy sources' ideal")
    }

    /// The mirror mixes draw every kind of source fault, and sometimes none.
    @Test func mirrorMixesDrawEveryKindOfSourceFault() {
        var kinds = Set<String>()
        for seed in UInt64(1)...200 {
            for source in SimulationScenario.mirrors(seed: seed).sources {
                kinds.insert(source.fault.map { "\($0)".prefix(6).description } ?? "healthy")
            }
        }
        #expect(kinds == ["healthy", "notFou", "diesAt", "differ"], "\(kinds)")
    }

    @Test func theSameSeedGivesTheSameRun() {
        for seed: UInt64 in [3, 77, 1_234, 9_999] {
            for scenario in [SimulationScenario.random(seed: seed), .straggler(seed: seed), .mirrors(seed: seed)] {
                let first = Simulator.run(scenario), second = Simulator.run(scenario)
                #expect(first == second)
            }
        }
        // And different seeds give different runs: the fingerprint sees the decisions.
        #expect(Simulator.run(.straggler(seed: 1)).fingerprint != Simulator.run(.straggler(seed: 2)).fingerprint)
    }

    @Test func theLedgerRefusesASecondWriteOfAnyByte() {
        var ledger = ByteLedger()
        let recorded = [ByteRange(10, 20), ByteRange(20, 30), ByteRange(29, 31), ByteRange(0, 11), ByteRange(0, 10)]
            .map { ledger.record($0) }
        #expect(recorded == [true, true, false, false, true])
        #expect(ledger.ranges == [ByteRange(0, 30)])
        #expect(ledger.covers(ByteRange(0, 30)) && !ledger.covers(ByteRange(0, 31)))
        #expect(ledger.count == 30)
    }
}
