import DownloadSimulation
import SegmentPlanning
import Testing

@Suite("Simulated downloads")
struct SimulationTests {
    @Test func tenThousandSeededDownloadsKeepEveryPromise() async {
        var failures: [String] = []
        var finished = 0, failed = 0
        for seed in UInt64(1)...10_000 {
            // Seconds of CPU in all: let the other suites' tasks share this cooperative thread.
            if seed % 20 == 0 { await Task.yield() }
            let scenario = SimulationScenario.random(seed: seed)
            let outcome = Simulator.run(scenario)
            if outcome.result == .finished { finished += 1 } else { failed += 1 }
            if !outcome.violations.isEmpty || (scenario.persistent == nil && outcome.result != .finished) {
                failures.append("\(scenario)\n  -> \(outcome.result): \(outcome.violations.prefix(3))")
            }
        }
        print("finished \(finished), failed \(failed)")
        #expect(failures.isEmpty, "\(failures.count) failing seeds; first: \(failures.first ?? "")")
    }
}
