/// Every decision of one download, as a value: which range goes to which connection, when to
/// split or take over a range, when to retry, back off, give up, restart or fall back to one
/// stream, and when to checkpoint.
///
/// The machine does no I/O, starts no thread and reads no clock: a driver feeds it events
/// (``probed(_:now:)``, ``prepared(now:)``, ``transferEnded(_:_:now:)``, ``tick(now:)``,
/// ``checkpointEnded(_:succeeded:now:)``, ``cancel(now:)``) with the time of each, and performs
/// the ``Action``s it returns. The same events always give the same actions, so every rule is
/// tested by tables and by a simulator on a virtual clock.
///
/// The write path goes through the machine too, so that a byte is never written by two transfers:
/// before writing, a transfer *claims* its bytes (``claim(_:offset:count:)``, clamped to its
/// segment's current end, which a split may have lowered), and after `pwrite` it *commits* them
/// (``commit(_:through:now:)``).
///
/// Thread safety: a value type; the driver keeps it behind one lock and performs the returned
/// actions after leaving it.
public struct DownloadMachine: Sendable {
    struct TransferState: Sendable {
        var id: TransferID
        var connection: Int
        /// The segment it owns (segmented mode).
        var segment: Int?
        var range: ByteRange?
        var startedAt: Double
        var lastProgressAt: Double
        /// Bytes written through (stream mode: from 0).
        var offset: Int64
        var abortReason: AbortReason?
        /// Paused until the reader takes more (never stalled meanwhile).
        var isPaused = false
        /// A byte of its body has been written.
        var receiving = false
    }

    enum SlotState: Sendable, Equatable {
        case idle
        case busy(TransferID)
        case waiting(until: Double)
        /// Left after the server refused more connections.
        case retired
    }

    /// One connection of the download.
    struct Slot: Sendable {
        /// The source it asks (``Configuration/sources``).
        var source = 0
        var state: SlotState = .idle
        /// Failed attempts in a row (a segmented attempt that wrote bytes starts again at 1).
        var failures = 0
        /// Bytes per second of its last transfer that ran long enough to tell.
        var lastRate: Double?
    }

    enum Storage: Sendable, Equatable { case none, preparing, ready }

    struct CheckpointInFlight: Sendable {
        var id: Int
        var durable: Bool
        var offsets: [Int64: Int64]
    }

    /// The tunables in force.
    public let configuration: Configuration
    /// Where the download is.
    public internal(set) var phase: Phase
    /// How the file is fetched, once decided.
    public internal(set) var mode: Mode?
    /// The segments (segmented mode).
    public internal(set) var table: SegmentTable?

    var slots: [Slot] = []
    var transfers: [TransferID: TransferState] = [:]
    var nextTransferID = 1
    var nextCheckpointID = 1
    var random: SplitMix64
    var storage: Storage = .none
    var checkpointInFlight: CheckpointInFlight?
    var finalCheckpointID: Int?
    var saveOnStop = true
    /// Segment start → offset known to be on disk (synced).
    var durableOffsets: [Int64: Int64]
    var nextQuick: Double?
    var nextDurable: Double?
    /// The bytes written when the last checkpoint was taken.
    var lastCheckpointWritten: Int64 = 0
    /// A segment was completed since the last checkpoint: the next quick one is due at once, so
    /// a kill right after loses none of it (a whole segment can take less than a quick interval).
    var segmentCompletedSinceCheckpoint = false
    var scheduledWake: Double?
    var mayRestartOnSizeMismatch: Bool
    var streamComplete = false
    /// Whether requests carry `If-Range`; off once the server answered it wrongly.
    var ifRangeUsable = true
    /// The file comes from where a redirect pointed.
    var redirected = false
    /// A ``Action/resolveAgain`` is out; idle connections wait for its answer.
    var resolving = false
    /// When the URL given was last resolved again: older requests went to the target before.
    var lastResolvedAt: Double?
    /// Re-resolutions left in a row; a transfer that writes bytes after one restores them.
    var resolutionsLeft = DownloadMachine.resolutionsInARow
    /// Expired URLs resolved again in a row before the download gives up.
    static let resolutionsInARow = 3
    /// The server's size answers contradicted each other after bytes were written.
    var totalsContradicted = false
    /// The transfer whose 401/403/404/410 started the resolution in progress.
    var expiredTransfer: TransferID?
    /// The probe's open body, made a transfer at ``probed(_:now:)``, announced once prepared.
    var adopted: TransferStart?
    /// Each source's standing; source 0, the URL probed, is in use from the start.
    var sources: [SourceState]
    /// Under a per-host cap, the slots of the host a new request would get at once: the free
    /// ones while no request waits and no file of the batch waits to begin, else 0; `nil` when
    /// there is no cap. The driver sets it before each event; splits read it
    /// (``slotsForASplit``).
    public var hostRoom: Int?

    /// A fresh download: nothing on disk yet.
    public init(configuration: Configuration) {
        precondition(configuration.connections >= 1 && configuration.minimumSegmentSize >= 1 && configuration.sources >= 1)
        self.configuration = configuration
        sources = (0..<configuration.sources).map { SourceState(status: $0 == 0 ? .active : .unchecked) }
        phase = .awaitingProbe(observedTotal: nil)
        random = SplitMix64(seed: configuration.seed)
        durableOffsets = [:]
        mayRestartOnSizeMismatch = true
    }

    /// A resumed download: the partial file and its manifest are open and were checked against the
    /// server's answer.
    ///
    /// - Parameters:
    ///   - progress: each segment's range and written offset, covering `[0, size)` in order.
    ///   - durable: segment start → offset synced to disk, from the manifest.
    public init(configuration: Configuration, resuming size: Int64, progress: [(range: ByteRange, written: Int64)],
                durable: [Int64: Int64]) {
        self.init(configuration: configuration)
        table = SegmentTable(size: size, progress: progress, policy: configuration.split)
        durableOffsets = durable
        mayRestartOnSizeMismatch = false
        storage = .ready
    }

    // MARK: - Queries

    /// Splits made so far.
    public var splitCount: Int { table?.splitCount ?? 0 }
    /// Connections of the download (slots, busy or not).
    public var connectionCount: Int { slots.count }
    /// Bytes on disk (segmented mode).
    public var writtenBytes: Int64 { table?.writtenBytes ?? 0 }
    /// The lowest unwritten byte of a segmented download: `[0, contiguousPrefix)` is written.
    public var contiguousPrefix: Int64 { table?.contiguousPrefix ?? 0 }
    /// Transfers in flight.
    public var transfersInFlight: Int { transfers.count }
    /// The transfer the probe's open body became, until it is announced with ``Action/adopt(_:)``.
    public var openBodyTransfer: TransferID? { adopted?.id }

    // MARK: - Events

    /// The partial file exists (and the first manifest is saved): start.
    public mutating func prepared(now: Double) -> [Action] {
        guard storage == .preparing else { return [] }
        storage = .ready
        if case .stopping = phase { return advance(now: now) }
        guard phase == .preparing else { return [] }
        return begin(now: now)
    }

    mutating func begin(now: Double) -> [Action] {
        phase = .running
        if case .segmented = mode {
            let quick = configuration.quickCheckpointInterval, durable = configuration.durableCheckpointInterval
            nextQuick = quick > 0 ? now + quick : nil
            nextDurable = durable > 0 ? now + durable : nil
            lastCheckpointWritten = writtenBytes
        }
        let adoption = adopted.map { [Action.adopt($0)] } ?? []
        adopted = nil
        return adoption + advance(now: now)
    }

    /// Time passed; answers a ``Action/wake(at:)``. At the deadline, the download stops.
    public mutating func tick(now: Double) -> [Action] {
        scheduledWake = nil
        if let deadline = configuration.deadline, now >= deadline {
            switch phase {
            case .awaitingProbe:
                phase = .done
                return [.fail(.timedOut, finalCheckpointFailed: false)]
            case .preparing, .running, .restarting:
                stop(.timedOut)
            case .stopping, .done:
                break
            }
        }
        return advance(now: now)
    }

    /// The caller wants the download stopped.
    public mutating func cancel(now: Double) -> [Action] {
        switch phase {
        case .awaitingProbe:
            phase = .done
            return [.fail(.cancelled, finalCheckpointFailed: false)]
        case .done, .stopping:
            return []
        case .preparing, .running, .restarting:
            stop(.cancelled)
            return advance(now: now)
        }
    }

    /// A checkpoint was saved, or failed.
    public mutating func checkpointEnded(_ id: Int, succeeded: Bool, now: Double) -> [Action] {
        guard let inFlight = checkpointInFlight, inFlight.id == id else { return [] }
        checkpointInFlight = nil
        if id == finalCheckpointID, case .stopping(let failure) = phase {
            phase = .done
            return [.fail(failure, finalCheckpointFailed: !succeeded)]
        }
        if succeeded {
            if inFlight.durable { durableOffsets = inFlight.offsets }
        } else {
            // The disk may have dropped written data: stop, and do not save over the manifest.
            saveOnStop = false
            stop(.checkpoint(id: id))
        }
        return advance(now: now)
    }

    // MARK: - The write path (called for every piece of body, under the driver's lock)

    /// Reserves the next bytes of a transfer's range for writing.
    ///
    /// - Returns: how many of `count` bytes at `offset` to write. Fewer (maybe 0) means the range
    ///   was split or taken over, or the transfer is being stopped: write that many, then stop.
    public mutating func claim(_ id: TransferID, offset: Int64, count: Int64) -> Int64 {
        guard let transfer = transfers[id], transfer.abortReason == nil else { return 0 }
        guard let segment = transfer.segment else { return count }
        return table!.claim(segment: segment, offset: offset, count: count)
    }

    /// Records that a transfer's claimed bytes are on disk, through `offset` (stream mode: the
    /// bytes written so far, from 0).
    public mutating func commit(_ id: TransferID, through offset: Int64, now: Double) {
        guard transfers[id] != nil else { return }
        if let segment = transfers[id]!.segment { table!.commit(segment: segment, through: offset, now: now) }
        transfers[id]!.offset = offset
        transfers[id]!.lastProgressAt = now
        if !transfers[id]!.receiving {
            transfers[id]!.receiving = true
            let source = slots[transfers[id]!.connection].source
            let atOnce = transfers.values.count { $0.receiving && slots[$0.connection].source == source }
            sources[source].servedAtOnce = max(sources[source].servedAtOnce, atOnce)
        }
    }

    /// Gives back claimed bytes whose write failed.
    public mutating func unclaim(_ id: TransferID) {
        guard let segment = transfers[id]?.segment else { return }
        table!.unclaim(segment: segment)
    }

    /// A transfer ended: judge how, and decide what follows.
    public mutating func transferEnded(_ id: TransferID, _ end: TransferEnd, now: Double) -> [Action] {
        guard let transfer = transfers.removeValue(forKey: id) else { return [] }
        var wrote: Int64
        var segmentComplete = false
        if let segment = transfer.segment, let range = transfer.range {
            table!.release(segment: segment)
            let s = table!.segments[segment]
            wrote = s.written - range.lowerBound
            segmentComplete = s.isComplete
            if segmentComplete && wrote > 0 { segmentCompletedSinceCheckpoint = true }
        } else {
            wrote = transfer.offset
        }
        let slot = transfer.connection
        // A connection of a dropped source takes nothing more.
        slots[slot].state = sources[slots[slot].source].status == .dropped ? .retired : .idle
        let elapsed = now - transfer.startedAt
        // Long enough to tell: 0.2 s, or a quarter MiB (a piece of a download read in order can
        // be done in a tenth of a second, and without its rate a split would take the rate of
        // the slow owners still fetching for the idle connection's).
        if wrote > 0 && (elapsed > 0.2 || (elapsed > 0.02 && wrote >= 256 << 10)) { slots[slot].lastRate = Double(wrote) / elapsed }
        guard phase == .running else { return advance(now: now) }

        var actions: [Action] = []
        switch (transfer.abortReason, end) {
        case (.takenOver?, _), (.stopping?, _):
            break
        case (.stalled?, .aborted):
            judge(failure: TransferFailure(kind: .network(.stalled)), of: transfer, wrote: wrote, now: now, into: &actions)
        case (nil, .aborted):
            stop(.cancelled)  // stopped from outside: the caller is going away
        // Ended on its own before the stall's abort reached it (its end was waiting behind the
        // tick that found it silent, in a process too loaded to read its events at once): judged
        // by how it ended. Judged as a stall, a server's answer that asks for something else
        // (drop If-Range, resolve an expired URL again) was retried as it was until the
        // retries ran out.
        case (.stalled?, .completed), (nil, .completed):
            if case .stream = mode {
                streamComplete = true
                slots[slot].failures = 0
            } else if segmentComplete || wrote > 0 {
                // All of it, or a server that caps range lengths: the rest is asked for next.
                slots[slot].failures = 0
                sources[slots[slot].source].failuresInARow = 0
                resolutionsLeft = Self.resolutionsInARow
            } else {
                judge(failure: TransferFailure(kind: .protocolFault(.lengthMismatch)), of: transfer, wrote: wrote, now: now, into: &actions)
            }
        case (.stalled?, .failed(let failure)), (nil, .failed(let failure)):
            judge(failure: failure, of: transfer, wrote: wrote, now: now, into: &actions)
        }
        return actions + advance(now: now)
    }

    /// Brings everything up to date at `now` and says what to do.
    mutating func advance(now: Double) -> [Action] {
        var actions: [Action] = []
        switch phase {
        case .running:
            abortStalled(now: now, into: &actions)
            for index in slots.indices {
                if case .waiting(let until) = slots[index].state, until <= now { slots[index].state = .idle }
            }
            switch mode {
            case .segmented?:
                if table!.isComplete && transfers.isEmpty {
                    if checkpointInFlight == nil {
                        phase = .done
                        return actions + [.finish]
                    }
                    return actions  // the checkpoint's end brings us back here
                }
                if !resolving { assignIdleConnections(now: now, into: &actions) }
                // Nothing running, nothing waiting, and not the reader's window holding the rest
                // back (``delivered(through:now:)`` brings it): the download cannot go on.
                if transfers.isEmpty && !resolving && !table!.isHeldByWindow && !sources.contains(where: { $0.status == .unchecked })
                    && !slots.contains(where: { if case .waiting = $0.state { true } else { false } }) {
                    stop(.incomplete)
                    return actions + advance(now: now)
                }
                checkpointIfDue(now: now, into: &actions)
            case .stream(let size)?:
                if streamComplete || size == 0 {
                    phase = .done
                    return actions + [.finish]
                }
                if transfers.isEmpty, slots[0].state == .idle, !resolving {
                    actions.append(.start(startTransfer(connection: 0, segment: nil, range: nil, isSplit: false, now: now)))
                }
            case nil:
                break
            }
        case .restarting(let observed):
            abortAll(into: &actions)
            if transfers.isEmpty && checkpointInFlight == nil {
                phase = .awaitingProbe(observedTotal: observed)
                storage = .none
                scheduledWake = nil
                return actions + [.discardAndProbeAgain]
            }
        case .stopping(let failure):
            abortAll(into: &actions)
            guard transfers.isEmpty, checkpointInFlight == nil, storage != .preparing else { break }
            if case .segmented = mode, storage == .ready, saveOnStop, finalCheckpointID == nil {
                let checkpoint = makeCheckpoint(durable: true)
                finalCheckpointID = checkpoint.id
                actions.append(.checkpoint(checkpoint))
            } else if finalCheckpointID == nil {
                phase = .done
                actions.append(.fail(failure, finalCheckpointFailed: false))
            }
        case .awaitingProbe, .preparing, .done:
            break
        }
        scheduleWake(now: now, into: &actions)
        return actions
    }
}
