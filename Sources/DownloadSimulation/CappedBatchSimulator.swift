import DownloadCore

/// Drives a batch of ``DownloadMachine``s that share one host under a per-host cap
/// (``HostShares``), on a virtual clock: `jobs` files at a time, each request holding a slot
/// from before it is sent until it ends, waiting (``DownloadMachine/queued(_:_:now:)``) when
/// none is free, and each machine told the host's room before every event
/// (``DownloadMachine/hostRoom``), as a session's driver does.
///
/// The server paces every connection at one rate, in pieces of ``Scenario/paceInterval``, and
/// counts a connection as a threaded server does: from its first request until the server
/// notices its close, which, for a response cut short, is at the next paced write. Connections
/// are kept alive and reused, as libcurl's cache does. The run checks that every file is whole
/// with every byte written once, and counts what a cap is about: splits, bytes sent beyond the
/// files, and the most connections the server counted at once.
///
/// Thread safety: a value; each run is independent.
public struct CappedBatchSimulator {
    /// One capped batch.
    public struct Scenario: Sendable {
        public var files = 24
        public var size: Int64 = 4 << 20
        public var jobs = 8
        public var connections = 8
        public var cap = 8
        /// Bytes per second of every connection.
        public var rate: Double = 2_000_000
        /// A connection's rate varies by up to this fraction either way (drawn per connection).
        public var rateJitter: Double = 0.02
        /// A request's round trip, and what a new connection's handshake adds to it.
        public var roundTrip: Double = 0.0005
        public var handshake: Double = 0.0005
        /// The server writes a piece every this many seconds; a cut connection is noticed at the
        /// next one.
        public var paceInterval: Double = 0.02
        public var seed: UInt64 = 1

        public init() {}
    }

    /// What a run measured.
    public struct Outcome: Sendable, Equatable {
        public var finished: Int
        public var seconds: Double
        public var splits: Int
        /// Body bytes the server sent, over every file's size.
        public var bytesSentRatio: Double
        /// The most connections the server counted at once.
        public var peakConnections: Int
        public var violations: [String]
    }

    private struct Connection {
        var id: Int
        var rate: Double
    }

    private struct Request {
        var file: Int
        var id: DownloadMachine.TransferID
        var offset: Int64
        var end: Int64
        var next: Double = .infinity
        var connection: Connection?
        var ticket: HostShares.Ticket?
        var aborted = false
    }

    private struct File {
        var machine: DownloadMachine
        var ledger = ByteLedger()
        var wake: Double?
        var probed = false
        var done = false
    }

    public let scenario: Scenario
    private var now = 0.0
    private var rng: SplitMix64
    private var shares: HostShares
    private var files: [Int: File] = [:]
    private var begun = 0
    private var ended = 0
    private var transfers: [TransferKey: Request] = [:]
    private var idleConnections: [Connection] = []
    private var nextConnection = 0
    /// When each connection closed mid-response will be noticed.
    private var closing: [Double] = []
    private var live = 0
    private var peak = 0
    private var sent: Int64 = 0
    private var splits = 0
    private var violations: [String] = []

    private struct TransferKey: Hashable, Comparable {
        var file: Int
        var id: Int
        static func < (a: TransferKey, b: TransferKey) -> Bool { (a.file, a.id) < (b.file, b.id) }
    }

    public init(_ scenario: Scenario) {
        self.scenario = scenario
        rng = SplitMix64(seed: scenario.seed ^ 0xBA7C_4CA9)
        shares = HostShares(cap: scenario.cap)
    }

    public static func run(_ scenario: Scenario) -> Outcome {
        var simulator = CappedBatchSimulator(scenario)
        return simulator.run()
    }

    public mutating func run() -> Outcome {
        while begun < min(scenario.jobs, scenario.files) { begin() }
        var events = 0
        while ended < scenario.files {
            events += 1
            guard events < 2_000_000, now < 3_600 else {
                violations.append("no end after \(events) events and \(now) virtual seconds")
                break
            }
            guard step() else {
                violations.append("nothing left to happen at \(now) s with \(scenario.files - ended) files unfinished")
                break
            }
        }
        let total = Double(scenario.size) * Double(scenario.files)
        return Outcome(finished: files.values.filter(\.done).count, seconds: now, splits: splits, bytesSentRatio: Double(sent) / total, peakConnections: peak,
                       violations: violations)
    }

    // MARK: - Files

    private var room: Int { shares.room(pending: scenario.files - begun) }

    /// Starts the next file: its probe is the first segment's GET, which waits for a slot too.
    private mutating func begin() {
        let file = begun
        begun += 1
        var configuration = DownloadMachine.Configuration()
        configuration.connections = scenario.connections
        configuration.quickCheckpointInterval = 0
        configuration.durableCheckpointInterval = 0
        configuration.seed = scenario.seed &+ UInt64(file)
        let machine = DownloadMachine(configuration: configuration)
        files[file] = File(machine: machine)
        // The probe asks before the machine knows anything: as transfer 1, adopted once its head
        // is in (``probed(_:)``).
        let first = min(scenario.size, configuration.minimumSegmentSize)
        transfers[TransferKey(file: file, id: 1)] = Request(file: file, id: 1, offset: 0, end: first)
        request(TransferKey(file: file, id: 1))
    }

    /// The probe's head is in: the machine plans, with the probe's body as its first transfer.
    private mutating func probed(_ file: Int) {
        files[file]!.probed = true
        files[file]!.machine.hostRoom = room
        let first = transfers[TransferKey(file: file, id: 1)]!.end
        let answer = DownloadMachine.ProbeAnswer(size: scenario.size, acceptsRanges: true, openBody: .range(ByteRange(0, first)))
        perform(file, files[file]!.machine.probed(answer, now: now))
        perform(file, files[file]!.machine.prepared(now: now))
    }

    // MARK: - The event loop

    private mutating func step() -> Bool {
        var best: (time: Double, file: Int, transfer: TransferKey?)?
        for (file, state) in files.sorted(by: { $0.key < $1.key }) where !state.done {
            if let wake = state.wake, best == nil || wake < best!.time { best = (wake, file, nil) }
        }
        for key in transfers.keys.sorted() where transfers[key]!.next < (best?.time ?? .infinity) {
            best = (transfers[key]!.next, key.file, key)
        }
        guard let (time, file, key) = best, time.isFinite else { return false }
        now = max(now, time)
        closing.removeAll { $0 <= now }
        if let key { advance(key) } else {
            files[file]!.wake = nil
            files[file]!.machine.hostRoom = room
            perform(file, files[file]!.machine.tick(now: now))
        }
        return true
    }

    /// One paced piece of a transfer, or its end.
    private mutating func advance(_ key: TransferKey) {
        if !files[key.file]!.probed { probed(key.file) }
        var t = transfers[key]!
        guard !t.aborted else { return end(key, .aborted, cut: true) }
        let piece = min(max(1024, Int64(t.connection!.rate * scenario.paceInterval)), t.end - t.offset)
        guard piece > 0 else { return end(key, .completed, cut: false) }
        sent += piece
        let allowed = files[key.file]!.machine.claim(t.id, offset: t.offset, count: piece)
        if allowed > 0 {
            if !files[key.file]!.ledger.record(ByteRange(t.offset, t.offset + allowed)) {
                violations.append("file \(key.file): transfer \(t.id) wrote \(t.offset)..<\(t.offset + allowed) a second time")
            }
            t.offset += allowed
            files[key.file]!.machine.commit(t.id, through: t.offset, now: now)
        }
        // Stopped short of its response's end (a split lowered it): the connection closes.
        if allowed < piece { return end(key, .completed, cut: true) }
        t.next = now + Double(piece) / t.connection!.rate
        transfers[key] = t
    }

    private mutating func end(_ key: TransferKey, _ how: DownloadMachine.TransferEnd, cut: Bool) {
        let t = transfers.removeValue(forKey: key)!
        if let connection = t.connection {
            if cut && t.offset < t.end {
                // Closed mid-response: counted until the server's next paced write finds it.
                live -= 1
                closing.append(now + scenario.paceInterval)
            } else {
                idleConnections.append(connection)
            }
            release(file: key.file)
        } else if let ticket = t.ticket {
            shares.withdraw(ticket)
        }
        files[key.file]!.machine.hostRoom = room
        perform(key.file, files[key.file]!.machine.transferEnded(t.id, how, now: now))
    }

    // MARK: - Slots and connections

    private mutating func request(_ key: TransferKey) {
        switch shares.request(for: key.file) {
        case .granted:
            connect(key)
        case .waiting(let ticket):
            transfers[key]!.ticket = ticket
            if files[key.file]!.probed { files[key.file]!.machine.queued(key.id, true, now: now) }
        }
    }

    /// Gives back a slot of `file`; the waiter it goes to starts.
    private mutating func release(file: Int) {
        guard let ticket = shares.release(by: file) else { return }
        guard let key = transfers.keys.sorted().first(where: { transfers[$0]!.ticket == ticket }) else {
            violations.append("a slot went to ticket \(ticket.value), which no transfer holds")
            return
        }
        transfers[key]!.ticket = nil
        files[key.file]!.machine.queued(key.id, false, now: now)
        connect(key)
    }

    /// The request goes out on an idle connection, or a new one.
    private mutating func connect(_ key: TransferKey) {
        var delay = scenario.roundTrip
        let connection: Connection
        if let reused = idleConnections.popLast() {
            connection = reused
        } else {
            nextConnection += 1
            let jitter = 1 + scenario.rateJitter * (2 * rng.nextUnit() - 1)
            connection = Connection(id: nextConnection, rate: scenario.rate * jitter)
            live += 1
            delay += scenario.handshake
        }
        peak = max(peak, live + closing.count)
        transfers[key]!.connection = connection
        transfers[key]!.next = now + delay
    }

    // MARK: - Actions

    private mutating func perform(_ file: Int, _ actions: [DownloadMachine.Action]) {
        for action in actions {
            switch action {
            case .start(let start):
                guard let range = start.range else {
                    violations.append("file \(file): a stream started under a batch of ranges")
                    continue
                }
                if start.isSplit { splits += 1 }
                let key = TransferKey(file: file, id: start.id)
                transfers[key] = Request(file: file, id: start.id, offset: range.lowerBound, end: range.upperBound)
                request(key)
            case .adopt(let start):
                if start.id != 1 || transfers[TransferKey(file: file, id: 1)] == nil {
                    violations.append("file \(file): adopted \(start.id), not the probe")
                }
            case .discardOpenBody:
                violations.append("file \(file): the probe's body was discarded")
            case .abort(let id, _):
                let key = TransferKey(file: file, id: id)
                guard transfers[key] != nil, !transfers[key]!.aborted else {
                    violations.append("file \(file): abort of transfer \(id), which is not running")
                    continue
                }
                transfers[key]!.aborted = true
                transfers[key]!.next = now + 0.0001
            case .wake(let at):
                files[file]!.wake = min(files[file]!.wake ?? at, at)
            case .finish:
                if !files[file]!.ledger.covers(ByteRange(0, scenario.size)) || files[file]!.ledger.count != scenario.size {
                    violations.append("file \(file) finished with \(files[file]!.ledger.count) of \(scenario.size) bytes")
                }
                files[file]!.done = true
                files[file]!.wake = nil
                ended += 1
                if begun < scenario.files { begin() }
            case .fail(let failure, _):
                violations.append("file \(file) failed: \(failure)")
                files[file]!.done = true
                ended += 1
                if begun < scenario.files { begin() }
            case .prepare, .notify, .checkpoint, .resolveAgain, .discardAndProbeAgain:
                continue
            }
        }
    }
}
