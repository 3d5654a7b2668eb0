import ArgumentParser
import DownloadSimulation
import SegmentPlanning

/// Re-runs simulated downloads by seed: the seed a failing property test printed, with its trace.
@main
struct SimulateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sf-simulate",
        abstract: "Runs seeded simulated downloads against the pure download core.")

    @Option(help: "Run this one seed and print its trace.")
    var seed: UInt64?

    @Option(help: "Scenario family: random, straggler, streaming (a straggler mix read in order through a window), or mirrors.")
    var family: String = "random"

    @Option(help: "Run seeds 1...N and report the outcomes.")
    var runs: Int = 1000

    func scenario(_ seed: UInt64) -> SimulationScenario {
        switch family {
        case "straggler": .straggler(seed: seed)
        case "streaming": .streaming(seed: seed)
        case "mirrors": .mirrors(seed: seed)
        default: .random(seed: seed)
        }
    }

    func run() throws {
        if let seed {
            let scenario = scenario(seed)
            var simulator = Simulator(scenario, trace: true)
            let outcome = simulator.run()
            for line in simulator.trace ?? [] { print(line) }
            print(scenario)
            print("\(outcome.result) after \(outcome.seconds) s (ideal \(scenario.idealSeconds) s), "
                  + "\(outcome.requests) requests, \(outcome.splits) splits, \(outcome.events) events")
            for violation in outcome.violations { print("VIOLATION: \(violation)") }
            if !outcome.violations.isEmpty { throw ExitCode.failure }
            return
        }
        var bad = 0
        var ratios: [Double] = []
        var worst: (ratio: Double, seed: UInt64)?
        for seed in UInt64(1)...UInt64(max(1, runs)) {
            let scenario = scenario(seed)
            let outcome = Simulator.run(scenario)
            if family != "random", outcome.result == .finished {
                let ideal = family == "streaming" ? scenario.healthyIdealSeconds
                    : family == "mirrors" ? scenario.healthySourcesIdealSeconds : scenario.idealSeconds
                let ratio = outcome.seconds / ideal
                ratios.append(ratio)
                if ratio > worst?.ratio ?? 0 { worst = (ratio, seed) }
            }
            if !outcome.violations.isEmpty || (scenario.persistent == nil && outcome.result != .finished) {
                bad += 1
                print("seed \(seed): \(outcome.result) \(outcome.violations.first ?? "")")
            }
        }
        if !ratios.isEmpty {
            let sorted = ratios.sorted()
            func percentile(_ p: Double) -> Double { sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
            let ideal = switch family {
            case "mirrors": "the healthy sources' ideal"
            case "streaming": "the healthy connections' ideal"
            default: "ideal"
            }
            print("finish time / \(ideal) over \(sorted.count) finished runs: median \(percentile(0.5)), "
                  + "p90 \(percentile(0.9)), p99 \(percentile(0.99)), worst \(sorted.last!) (seed \(worst!.seed))")
        }
        print("\(runs - bad) passed, \(bad) failed")
        if bad > 0 { throw ExitCode.failure }
    }
}
