public import DownloadCore

/// One simulated download: the file, the server's connections, and what goes wrong.
///
/// Everything random in a run is drawn from generators seeded by ``seed``, so a scenario and its
/// run are reproduced exactly by the seed alone (``random(seed:)`` and ``straggler(seed:)``).
public struct SimulationScenario: Sendable, CustomStringConvertible {
    /// A fault that does not clear, so the download must end with the right failure.
    public enum PersistentFault: Sendable, Equatable {
        /// Every request answers 404.
        case notFound
        /// Every request answers 503 with `Retry-After`.
        case alwaysBusy
        /// Every checkpoint fails (a disk error on `fsync`).
        case checkpointFails
        /// The caller cancels at this virtual time.
        case cancel(at: Double)
    }

    /// Transient faults: each request draws one with these probabilities, at most ``budget`` in a
    /// run (fewer than the retries, so a run without a persistent fault must complete).
    public struct FaultMix: Sendable, Equatable {
        /// The connection resets after some bytes.
        public var reset = 0.0
        /// The connection stops sending after some bytes and never ends by itself.
        public var stall = 0.0
        /// `503` with `Retry-After` (seconds or an HTTP-date).
        public var busy = 0.0
        /// A `206` for another range (rejected before a byte is written).
        public var wrongRange = 0.0
        /// At most this many faults in the whole run.
        public var budget = 0

        public init() {}
        var total: Double { reset + stall + busy + wrongRange }
    }

    /// What goes wrong with one source of several (a mirror, or the URL probed).
    public enum SourceFault: Sendable, Equatable {
        /// Every request answers 404 (its identity check passed: the file went later).
        case notFound
        /// The server goes away at this virtual time: running responses reset, new connections are refused.
        case diesAt(Double)
        /// A mirror serving other bytes of the same size: its identity check fails.
        case differentBytes
    }

    /// One source of several serving the file.
    public struct Source: Sendable, Equatable {
        /// Bytes per second of each of its connections.
        public var rate: Double
        public var fault: SourceFault?

        public init(rate: Double, fault: SourceFault? = nil) {
            self.rate = rate
            self.fault = fault
        }
    }

    public var seed: UInt64
    /// Several sources (``DownloadMachine/Configuration/sources``), each with
    /// ``DownloadMachine/Configuration/connections`` connections at its own rate; empty: one
    /// source whose connections run at ``rates``.
    public var sources: [Source] = []
    /// The file's real size.
    public var size: Int64
    /// The size the first probe reports; another value makes the `206`s disagree (a size change).
    public var probedSize: Int64
    /// Whether the server answers ranges.
    public var acceptsRanges: Bool
    public var configuration: DownloadMachine.Configuration
    /// Bytes per second of each connection slot (cycled when there are more slots).
    public var rates: [Double]
    /// Seconds from a request to its first byte, drawn per request.
    public var latency: ClosedRange<Double>
    public var faults = FaultMix()
    public var persistent: PersistentFault?
    /// The server ends every range response cleanly after at most this many bytes (servers that
    /// cap range lengths); the rest must be asked for again.
    public var rangeCap: Int64?
    /// The probe is the first segment's `GET` (its body adopted), not a `HEAD`.
    public var getFirst = false
    /// The file is hashed as it downloads: the machine plans pieces fetched in order.
    public var inOrder = false
    /// With a window: how fast the reader takes bytes; `nil`, at once.
    public var readerRate: Double?

    public init(seed: UInt64, size: Int64, configuration: DownloadMachine.Configuration, rates: [Double],
                latency: ClosedRange<Double> = 0.001...0.001) {
        self.seed = seed
        self.size = size
        self.probedSize = size
        self.acceptsRanges = true
        self.configuration = configuration
        self.rates = rates
        self.latency = latency
    }

    public var description: String {
        "seed \(seed): \(size) bytes (probed \(probedSize)), ranges \(acceptsRanges), \(configuration.connections) connections, "
            + "min segment \(configuration.minimumSegmentSize), retries \(configuration.retry.retries), "
            + "stall timeout \(configuration.stallTimeout), rates \(rates.map { Int($0) }), latency \(latency), "
            + "faults \(faults), sources \(sources.map { "\(Int($0.rate)) \($0.fault.map { "\($0)" } ?? "healthy")" }), persistent \(persistent.map { "\($0)" } ?? "none"), range cap \(rangeCap.map(String.init) ?? "none"), GET first \(getFirst), in order \(inOrder), window \(configuration.window.map(String.init) ?? "none"), reader \(readerRate.map { String(Int($0)) } ?? "instant")"
    }

    /// The time a perfect scheduler would need: one request latency, then every planned
    /// connection busy until the last byte.
    public var idealSeconds: Double {
        let plan = Planner.plan(size: size, connections: configuration.connections,
                                minimumSegmentSize: configuration.minimumSegmentSize)
        let total = (0..<max(1, plan.count)).reduce(0.0) { $0 + rates[$1 % rates.count] }
        return latency.lowerBound + Double(size) / total
    }

    /// With several sources: the time their healthy ones alone would need, every connection busy
    /// from one latency to the last byte.
    public var healthySourcesIdealSeconds: Double {
        let total = sources.filter { $0.fault == nil }.reduce(0.0) { $0 + $1.rate * Double(configuration.connections) }
        return latency.lowerBound + Double(size) / total
    }

    /// The time the healthy connections alone would need (those at the fastest rate): what a
    /// download read in order is measured against when stragglers hold ranges at its read
    /// position.
    public var healthyIdealSeconds: Double {
        let count = max(1, min(configuration.connections, Int((size + configuration.minimumSegmentSize - 1) / configuration.minimumSegmentSize)))
        let fastest = rates.max() ?? 1
        let healthy = (0..<count).map { rates[$0 % rates.count] }.filter { $0 == fastest }.reduce(0, +)
        return latency.lowerBound + Double(size) / healthy
    }

    /// A download read in order through a window, as by a pipe: 16 connections, a quarter of
    /// them (or more) 4 to 32 times slower, a window of 16 to 128 MiB, no faults; measured
    /// against the healthy connections' ideal.
    public static func streaming(seed: UInt64) -> SimulationScenario {
        var scenario = straggler(seed: seed)
        var rng = SplitMix64(seed: seed ^ 0x0DDB_A11_5EED)
        scenario.configuration.window = [16, 32, 64, 128][Int(rng.next() % 4)] << 20
        return scenario
    }

    /// A random mix of sizes, connection counts, speeds, latencies and faults.
    public static func random(seed: UInt64) -> SimulationScenario {
        var rng = SplitMix64(seed: seed ^ 0xA5A5_5A5A_C3C3_3C3C)
        func unit() -> Double { rng.nextUnit() }
        func between(_ low: Int64, _ high: Int64) -> Int64 { low + Int64(rng.next() % UInt64(high - low + 1)) }

        var configuration = DownloadMachine.Configuration()
        configuration.seed = seed
        configuration.connections = Int(between(1, 16))
        configuration.minimumSegmentSize = [64 << 10, 256 << 10, 1 << 20][Int(rng.next() % 3)]
        configuration.split = SegmentTable.SplitPolicy(minimumPiece: [16 << 10, 64 << 10][Int(rng.next() % 2)],
                                                       alignment: 4096, requestOverhead: 0.05, rateWarmup: 0.5,
                                                       stallAfter: 1.5, minimumBlindPiece: 1 << 20)
        configuration.retry = RetryPolicy(retries: Int(between(2, 8)), baseDelay: 0.25, maximumDelay: 30)
        configuration.stallTimeout = Double(between(2, 20))
        configuration.durableCheckpointInterval = [0, 1, 5][Int(rng.next() % 3)]
        configuration.quickCheckpointInterval = [0, 0.1][Int(rng.next() % 2)]

        let sizeClass = unit()
        let size: Int64 = sizeClass < 0.1 ? between(0, 64 << 10)
            : sizeClass < 0.6 ? between(64 << 10, 4 << 20) : between(4 << 20, 32 << 20)
        let connections = configuration.connections
        var rates = (0..<connections).map { _ in Double(between(256 << 10, 8 << 20)) }
        if unit() < 0.3 {
            for i in stride(from: 0, to: connections, by: 4) { rates[i] /= 16 }  // stragglers
        }
        let low = 0.0005 + unit() * 0.05
        var scenario = SimulationScenario(seed: seed, size: size, configuration: configuration, rates: rates,
                                          latency: low...(low + unit() * 0.05))
        scenario.acceptsRanges = unit() < 0.92
        if unit() < 0.08 && size > 0 { scenario.probedSize = max(1, size + between(-(size / 2), size / 2 + 1)) }
        if unit() < 0.6 {
            scenario.faults.reset = unit() * 0.2
            scenario.faults.stall = unit() * 0.1
            scenario.faults.busy = unit() * 0.1
            scenario.faults.wrongRange = unit() * 0.1
            scenario.faults.budget = Int(between(0, Int64(configuration.retry.retries)))
        }
        let persistent = unit()
        if persistent < 0.04 {
            scenario.persistent = .notFound
        } else if persistent < 0.08 {
            scenario.persistent = .alwaysBusy
        } else if persistent < 0.12 {
            scenario.persistent = .checkpointFails
        } else if persistent < 0.16 {
            scenario.persistent = .cancel(at: unit() * 2)
        }
        if unit() < 0.1 { scenario.rangeCap = between(16 << 10, 2 << 20) }
        scenario.getFirst = unit() < 0.5
        scenario.inOrder = unit() < 0.3  // drawn last: the draws before it are those of earlier builds
        if unit() < 0.2 {  // read in order, as by a pipe; half the readers slower than the download
            scenario.configuration.window = between(1 << 20, 64 << 20)
            if unit() < 0.5 { scenario.readerRate = Double(between(64 << 10, 8 << 20)) }
        }
        return scenario
    }

    /// Several sources (1 to 8) of 1 to 4 connections each, at 256 KiB/s to 8 MiB/s per
    /// connection; some 404, die partway, or serve other bytes, but at least one is healthy. The
    /// file takes the healthy ones 3 to 15 s.
    public static func mirrors(seed: UInt64) -> SimulationScenario {
        var rng = SplitMix64(seed: seed ^ 0x4D1_0505_F00D_CAFE)
        func between(_ low: Int64, _ high: Int64) -> Int64 { low + Int64(rng.next() % UInt64(high - low + 1)) }
        var configuration = DownloadMachine.Configuration()
        configuration.seed = seed
        configuration.connections = Int(between(1, 4))
        configuration.minimumSegmentSize = 1 << 20
        configuration.split = SegmentTable.SplitPolicy(minimumPiece: 64 << 10)
        let count = Int(between(1, 8))
        var sources = (0..<count).map { _ in Source(rate: Double(between(256 << 10, 8 << 20))) }
        for index in sources.indices where rng.nextUnit() < 0.4 {
            switch rng.next() % 3 {
            case 0: sources[index].fault = .notFound
            case 1: sources[index].fault = .diesAt(rng.nextUnit() * 4)
            default: sources[index].fault = index == 0 ? .notFound : .differentBytes  // the URL probed is the reference
            }
        }
        if !sources.contains(where: { $0.fault == nil }) { sources[Int(rng.next() % UInt64(count))].fault = nil }
        configuration.sources = count
        // Sized to take the healthy sources 3 to 15 s: long enough that the rates are learned,
        // as for the files worth several mirrors.
        let healthy = sources.filter { $0.fault == nil }.reduce(0.0) { $0 + $1.rate } * Double(configuration.connections)
        let size = Int64(healthy * Double(between(3, 15)))
        var scenario = SimulationScenario(seed: seed, size: size, configuration: configuration, rates: [sources[0].rate],
                                          latency: 0.001...0.02)
        scenario.sources = sources
        scenario.getFirst = rng.next() % 2 == 0
        return scenario
    }

    /// A straggler mix: a quarter of the connections (or more) 4 to 32 times slower than the
    /// rest, no faults; for measuring the finish time against the ideal.
    public static func straggler(seed: UInt64) -> SimulationScenario {
        var rng = SplitMix64(seed: seed ^ 0x5EED_0F57_4A66_1E45)
        func between(_ low: Int64, _ high: Int64) -> Int64 { low + Int64(rng.next() % UInt64(high - low + 1)) }
        var configuration = DownloadMachine.Configuration()
        configuration.seed = seed
        configuration.connections = [4, 8, 16][Int(rng.next() % 3)]
        configuration.minimumSegmentSize = 1 << 20
        configuration.split = SegmentTable.SplitPolicy(minimumPiece: 64 << 10)
        let connections = configuration.connections
        let fast = Double(between(1 << 20, 4 << 20))
        let factor = Double([4, 8, 16, 32][Int(rng.next() % 4)])
        let slowCount = max(1, Int(between(Int64(connections / 4), Int64(connections / 2))))
        var rates = Array(repeating: fast, count: connections)
        for i in 0..<slowCount { rates[(i * connections) / slowCount] = fast / factor }
        let size = between(32, 128) << 20
        var scenario = SimulationScenario(seed: seed, size: size, configuration: configuration, rates: rates,
                                          latency: 0.005...0.02)
        // Half the mixes start as the command line does: the probe's GET is the first range.
        scenario.getFirst = rng.next() % 2 == 0
        return scenario
    }
}
