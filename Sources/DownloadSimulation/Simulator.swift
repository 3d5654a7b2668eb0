public import DownloadCore

/// Drives a ``DownloadMachine`` through one ``SimulationScenario`` on a virtual clock, playing the
/// driver, the server, the disk and the checkpoint thread, and checks the machine's promises as it
/// goes:
/// - every byte is written exactly once (per attempt of a stream), and the finished file is whole;
/// - no transfer starts for a range with written bytes;
/// - a checkpoint never claims a byte that is not written;
/// - the download ends (finish or fail) with no transfer left running, within bounded time.
///
/// Thread safety: a value; each run is independent.
public struct Simulator {
    /// How a run ended.
    public struct Outcome: Sendable, Equatable {
        public enum Result: Sendable, Equatable {
            case finished
            case failed(DownloadMachine.Failure)
            /// The run hit its event or time bound without ending: a livelock.
            case hung
        }

        public var result: Result
        /// Virtual seconds from the first probe to the end.
        public var seconds: Double
        public var requests: Int
        public var splits: Int
        public var events: Int
        /// Broken promises, in the order seen.
        public var violations: [String]
        /// A hash of every action with its time: equal for equal runs.
        public var fingerprint: UInt64
    }

    enum Behaviour {
        case healthy
        case resetAfter(Int64)
        case stallAfter(Int64)
        case fail(DownloadMachine.TransferFailure)
    }

    struct SimulatedTransfer {
        var id: Int
        var rate: Double
        var offset: Int64
        var end: Int64
        var next: Double
        var behaviour: Behaviour
        var aborted = false
        var isStream: Bool
    }

    public let scenario: SimulationScenario
    var machine: DownloadMachine
    var now = 0.0
    var ledger = ByteLedger()
    var rng: SplitMix64
    var transfers: [Int: SimulatedTransfer] = [:]
    private var wakeAt: Double?
    private var pendingPrepare: Double?
    private var pendingProbe: (at: Double, answer: DownloadMachine.ProbeAnswer)?
    private var pendingCheckpoint: (id: Int, at: Double)?
    private var cancelAt: Double?
    /// Identity checks of mirrors still out: when each answers.
    private var pendingChecks: [(source: Int, at: Double)] = []
    var faultsLeft: Int
    var violations: [String] = []
    private var result: Outcome.Result?
    private var events = 0
    var requests = 0
    /// What a reader took so far (a download read in order, with a window): at once, as fast as
    /// the prefix grows.
    var delivered: Int64 = 0
    /// When the reader has taken its next piece, and up to where.
    private var pendingRead: (at: Double, through: Int64)?
    private var fingerprint: UInt64 = 0xCBF2_9CE4_8422_2325
    /// The size the machine planned with (segmented), for the size-change fault.
    var plannedSize: Int64?
    /// Every event and action with its time, when ``init(_:trace:)`` asked for it.
    public private(set) var trace: [String]?

    /// Bounds that turn a livelock into a failed property instead of a hung test.
    public static let maximumEvents = 400_000
    public static let maximumSeconds = 3_600.0

    public init(_ scenario: SimulationScenario, trace: Bool = false) {
        self.scenario = scenario
        self.trace = trace ? [] : nil
        machine = DownloadMachine(configuration: scenario.configuration)
        rng = SplitMix64(seed: scenario.seed ^ 0x0DDB_A11C_0FFE_E000)
        faultsLeft = scenario.faults.budget
        if case .cancel(let t)? = scenario.persistent { cancelAt = t }
    }

    /// Runs the scenario to its end.
    public static func run(_ scenario: SimulationScenario) -> Outcome {
        var simulator = Simulator(scenario)
        return simulator.run()
    }

    public mutating func run() -> Outcome {
        now = drawLatency()
        var answer = DownloadMachine.ProbeAnswer(size: scenario.probedSize, acceptsRanges: scenario.acceptsRanges,
                                                 inOrder: scenario.inOrder)
        if scenario.getFirst {
            // The probe is the first segment's GET; its body waits, unwritten, to be adopted.
            let size = scenario.probedSize
            let connections = scenario.configuration.connections
            let end = connections == 1 ? size : min(size, scenario.configuration.minimumSegmentSize)
            answer.openBody = scenario.acceptsRanges && size > 0 ? .range(ByteRange(0, end)) : .whole
            transfers[1] = SimulatedTransfer(id: 1, rate: scenario.rates[0], offset: 0, end: end, next: .infinity, behaviour: .healthy,
                                    isStream: answer.openBody == .whole)
            requests += 1
        }
        perform(machine.probed(answer, now: now))
        // Each mirror's identity check: a few small ranges from it and from the URL probed.
        for source in scenario.sources.indices.dropFirst() {
            pendingChecks.append((source, now + drawLatency() + drawLatency()))
        }
        while result == nil {
            events += 1
            guard events < Self.maximumEvents, now < Self.maximumSeconds else {
                violations.append("no end after \(events) events and \(now) virtual seconds")
                result = .hung
                break
            }
            step()
        }
        return Outcome(result: result!, seconds: now, requests: requests, splits: machine.splitCount, events: events,
                       violations: violations, fingerprint: fingerprint)
    }

    // MARK: - The event loop

    private enum Next { case prepare, probe, checkpoint, cancel, transfer(Int), wake, read, check(Int) }

    private mutating func step() {
        var best: (time: Double, what: Next)?
        func consider(_ time: Double?, _ what: Next) {
            guard let time else { return }
            if best == nil || time < best!.time { best = (time, what) }
        }
        consider(pendingPrepare, .prepare)
        consider(pendingProbe?.at, .probe)
        consider(pendingCheckpoint?.at, .checkpoint)
        consider(cancelAt, .cancel)
        for id in transfers.keys.sorted() { consider(transfers[id]!.next, .transfer(id)) }
        consider(wakeAt, .wake)
        consider(pendingRead?.at, .read)
        for (index, check) in pendingChecks.enumerated() { consider(check.at, .check(index)) }
        guard let (time, what) = best, time.isFinite else {
            violations.append("nothing left to happen at \(now) s, but the machine has not ended")
            result = .hung
            return
        }
        now = max(now, time)
        switch what {
        case .prepare:
            pendingPrepare = nil
            perform(machine.prepared(now: now))
        case .probe:
            let answer = pendingProbe!.answer
            pendingProbe = nil
            perform(machine.probed(answer, now: now))
        case .checkpoint:
            let id = pendingCheckpoint!.id
            pendingCheckpoint = nil
            perform(machine.checkpointEnded(id, succeeded: scenario.persistent != .checkpointFails, now: now))
        case .cancel:
            cancelAt = nil
            perform(machine.cancel(now: now))
        case .wake:
            wakeAt = nil
            perform(machine.tick(now: now))
        case .read:
            delivered = pendingRead!.through
            pendingRead = nil
            perform(machine.delivered(through: delivered, now: now))
            scheduleRead()
        case .transfer(let id):
            advance(transfer: id)
        case .check(let index):
            let source = pendingChecks.remove(at: index).source
            let passed = scenario.sources[source].fault != .differentBytes
            trace?.append("\(now): source \(source) checked: \(passed)")
            perform(machine.sourceChecked(source, passed: passed, now: now))
        }
    }

    /// The next thing a transfer does: deliver a piece of body, fail, or end.
    private mutating func advance(transfer id: Int) {
        var t = transfers[id]!
        if t.aborted { return end(id, .aborted) }
        if case .fail(let failure) = t.behaviour { return end(id, .failed(failure)) }
        var limit = t.end
        if case .resetAfter(let at) = t.behaviour { limit = min(limit, at) }
        if case .stallAfter(let at) = t.behaviour { limit = min(limit, at) }
        let piece = min(max(4096, Int64(t.rate * 0.1)), limit - t.offset)
        if piece <= 0 {
            if case .resetAfter = t.behaviour {
                return end(id, .failed(DownloadMachine.TransferFailure(kind: .network(.receive))))
            }
            if case .stallAfter = t.behaviour {
                transfers[id]!.next = .infinity  // silent until aborted
                return
            }
            return end(id, .completed)
        }
        let allowed = machine.claim(id, offset: t.offset, count: piece)
        if allowed < 0 || allowed > piece { violations.append("claim of \(piece) bytes allowed \(allowed)") }
        if allowed > 0 {
            let range = ByteRange(t.offset, t.offset + allowed)
            if !ledger.record(range) { violations.append("transfer \(id) wrote \(range) a second time at \(now) s") }
            t.offset += allowed
            machine.commit(id, through: t.offset, now: now)
            checkPrefix()
            if scenario.readerRate == nil, scenario.configuration.window != nil, case .segmented? = machine.mode,
               machine.contiguousPrefix > delivered {
                delivered = machine.contiguousPrefix
                transfers[id] = t
                perform(machine.delivered(through: delivered, now: now))
                guard let current = transfers[id] else { return }  // the reader's news ended it
                t = current
            }
            scheduleRead()
        }
        if allowed < piece { return end(id, .completed) }  // stopped at its segment's end
        t.next = now + Double(piece) / t.rate
        transfers[id] = t
    }

    /// A reader at ``SimulationScenario/readerRate`` takes up to 1 MiB of the prefix at a time.
    private mutating func scheduleRead() {
        guard let rate = scenario.readerRate, pendingRead == nil, scenario.configuration.window != nil,
              case .segmented? = machine.mode, machine.contiguousPrefix > delivered else { return }
        let through = min(machine.contiguousPrefix, delivered + (1 << 20))
        pendingRead = (now + Double(through - delivered) / rate, through)
    }

    /// A hasher follows the machine's contiguous prefix: it must be exactly the bytes written
    /// from 0 without a gap, never more (a hash of unwritten bytes) and never behind.
    private mutating func checkPrefix() {
        guard case .segmented? = machine.mode else { return }
        let written = ledger.ranges.first.map { $0.lowerBound == 0 ? $0.upperBound : 0 } ?? 0
        if machine.contiguousPrefix != written {
            violations.append("contiguous prefix \(machine.contiguousPrefix) but bytes [0, \(written)) are written, at \(now) s")
        }
    }

    private mutating func end(_ id: Int, _ how: DownloadMachine.TransferEnd) {
        transfers[id] = nil
        trace?.append("\(now): transfer \(id) ended: \(how)")
        perform(machine.transferEnded(id, how, now: now))
    }

    // MARK: - Actions

    private mutating func mix(_ values: Int64...) {
        for v in values {
            fingerprint ^= UInt64(bitPattern: v)
            fingerprint = fingerprint &* 0x100_0000_01B3
        }
    }

    private mutating func perform(_ actions: [DownloadMachine.Action]) {
        mix(Int64(now * 1_000_000))
        for action in actions {
            trace?.append("\(now): \(action)")
            switch action {
            case .prepare(let preparation):
                mix(1)
                ledger.removeAll()
                if case .segmented(let size) = preparation.mode {
                    plannedSize = size
                    if let manifest = preparation.manifest { check(manifest, size: size) }
                } else {
                    plannedSize = nil
                }
                pendingPrepare = now + 0.002
            case .start(let start):
                mix(2, Int64(start.id), start.range.map { $0.lowerBound } ?? -1, start.range.map { $0.upperBound } ?? -1)
                begin(start)
            case .adopt(let start):
                mix(8, Int64(start.id))
                if transfers[start.id]?.next != .infinity || transfers[start.id]?.aborted == true {
                    violations.append("adoption of transfer \(start.id), which is not the waiting probe body")
                }
                transfers[start.id] = nil
                requests -= 1  // the probe's request, counted when it was sent
                begin(start)
            case .discardOpenBody:
                mix(9)
                if transfers[1]?.next != .infinity { violations.append("discard of an open body that is not waiting") }
                transfers[1] = nil
            case .abort(let id, _):
                mix(3, Int64(id))
                if transfers[id] == nil {
                    violations.append("abort of transfer \(id), which is not running")
                } else if !transfers[id]!.aborted {
                    transfers[id]!.aborted = true
                    transfers[id]!.next = now + 0.001
                }
            case .notify:
                mix(4)
            case .checkpoint(let checkpoint):
                mix(5, Int64(checkpoint.id))
                if pendingCheckpoint != nil { violations.append("checkpoint \(checkpoint.id) while another is saving") }
                check(checkpoint, size: plannedSize ?? 0)
                pendingCheckpoint = (checkpoint.id, now + (checkpoint.durable ? 0.004 : 0.0005))
            case .wake(let at):
                mix(6, Int64(at * 1_000_000))
                if at < now - 1e-9 { violations.append("wake asked for \(at), in the past at \(now)") }
                wakeAt = min(wakeAt ?? at, at)
            case .resolveAgain:
                // Not in any scenario yet (no simulated redirect): the same file, at once.
                mix(10)
                perform(machine.resolved(sameFile: true, now: now))
            case .discardAndProbeAgain:
                mix(7)
                if !transfers.isEmpty { violations.append("probe again with \(transfers.count) transfers running") }
                ledger.removeAll()
                pendingProbe = (now + drawLatency(),
                                DownloadMachine.ProbeAnswer(size: scenario.size, acceptsRanges: scenario.acceptsRanges,
                                                            inOrder: scenario.inOrder))
            case .finish:
                mix(8)
                if !transfers.isEmpty { violations.append("finish with \(transfers.count) transfers running") }
                if pendingCheckpoint != nil { violations.append("finish while a checkpoint is saving") }
                let size = plannedSize ?? scenario.size
                if size != scenario.size { violations.append("finished a file of \(size) bytes, the server has \(scenario.size)") }
                if ledger.count != scenario.size || !ledger.covers(ByteRange(0, scenario.size)) {
                    violations.append("finished with \(ledger.count) of \(scenario.size) bytes written")
                }
                result = .finished
            case .fail(let failure, _):
                mix(9)
                if !transfers.isEmpty { violations.append("fail with \(transfers.count) transfers running") }
                if pendingCheckpoint != nil { violations.append("fail while a checkpoint is saving") }
                result = .failed(failure)
            }
        }
    }

    /// A checkpoint tiles the file and claims only written bytes.
    private mutating func check(_ checkpoint: DownloadMachine.Checkpoint, size: Int64) {
        var cursor: Int64 = 0
        for segment in checkpoint.segments {
            if segment.start != cursor { violations.append("checkpoint \(checkpoint.id) has a gap or overlap at \(cursor)") }
            cursor = segment.end
            let claimed = max(segment.written, segment.cached ?? segment.written)
            if !(segment.start <= segment.written && claimed <= segment.end) {
                violations.append("checkpoint \(checkpoint.id) segment \(segment) out of order")
            } else if !ledger.covers(ByteRange(segment.start, claimed)) {
                violations.append("checkpoint \(checkpoint.id) claims \(segment.start)..<\(claimed), not all written")
            }
        }
        if cursor != size { violations.append("checkpoint \(checkpoint.id) ends at \(cursor), file has \(size)") }
    }
}
