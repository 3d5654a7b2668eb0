import ArgumentParser
import DownloadSimulation
import DownloadCore

/// Re-runs simulated downloads by seed: the seed a failing property test printed, with its trace.
@main
struct SimulateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sf-simulate",
        abstract: "Runs seeded simulated downloads against the pure download core.")

    @Option(help: "Run this one seed and print its trace.")
    var seed: UInt64?

    @Option(help: "Scenario family: random, straggler, streaming (a straggler mix read in order through a window), mirrors, or capped (24 files of 4 MiB, -j 8 -n 8, 8 per host, 2 MB/s per connection).")
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
        if family == "capped" { return try runCapped() }
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

    /// Capped batches by seed: splits per file, bytes sent over the files' bytes, the most
    /// connections a server counts at once, and the time over the cap's ideal.
    func runCapped() throws {
        var rows: [(splits: Double, sent: Double, peak: Double, time: Double)] = []
        var bad = 0
        for seed in seed.map({ [$0] }) ?? Array(UInt64(1)...UInt64(max(1, runs))) {
            var scenario = CappedBatchSimulator.Scenario()
            scenario.seed = seed
            let outcome = CappedBatchSimulator.run(scenario)
            let ideal = Double(scenario.files) * Double(scenario.size) / (Double(scenario.cap) * scenario.rate)
            rows.append((Double(outcome.splits) / Double(scenario.files), outcome.bytesSentRatio, Double(outcome.peakConnections),
                         outcome.seconds / ideal))
            if !outcome.violations.isEmpty || outcome.finished != scenario.files {
                bad += 1
                print("seed \(seed): \(outcome.finished) finished \(outcome.violations.first ?? "")")
            }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        func worst(_ values: [Double]) -> Double { values.max() ?? 0 }
        print("over \(rows.count) capped batches: splits per file median \(median(rows.map(\.splits))) worst \(worst(rows.map(\.splits))); "
              + "bytes sent / files median \(median(rows.map(\.sent))) worst \(worst(rows.map(\.sent))); "
              + "peak connections median \(median(rows.map(\.peak))) worst \(worst(rows.map(\.peak))); "
              + "time / ideal median \(median(rows.map(\.time))) worst \(worst(rows.map(\.time)))")
        print("\(rows.count - bad) passed, \(bad) failed")
        if bad > 0 { throw ExitCode.failure }
    }
}
