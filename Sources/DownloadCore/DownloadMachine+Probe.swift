/// The probe's answers: at the start it decides the mode and the plan (and the probe's own
/// `GET`, when its body is still arriving, becomes the first transfer); mid-download, a
/// redirect target that expired is resolved again.
extension DownloadMachine {
    /// The probe answered: decide the mode and the plan.
    public mutating func probed(_ answer: ProbeAnswer, now: Double) -> [Action] {
        guard case .awaitingProbe(let observed) = phase else { return [] }
        redirected = answer.redirected
        if let table, storage == .ready {
            // Resumed: the driver has checked that the server still has the same file.
            mode = .segmented(size: table.size)
            let left = table.segments.reduce(Int64(0)) { $0 + $1.remaining }
            let perConnection = configuration.minimumSegmentSize
            let count = max(1, min(configuration.connections, Int((left + perConnection - 1) / perConnection)))
            slots = makeSlots(perSource: count)
            return (answer.openBody != nil ? [.discardOpenBody] : []) + begin(now: now)
        }
        let segmented: Int64?
        if let observed {
            // After a size mismatch: segmented only if the ranged answer agrees with the 206.
            mayRestartOnSizeMismatch = false
            segmented = answer.acceptsRanges && answer.size == observed && observed > 0 && !totalsContradicted ? observed : nil
        } else {
            segmented = answer.acceptsRanges && (answer.size ?? 0) > 0 ? answer.size : nil
        }
        storage = .preparing
        phase = .preparing
        guard let size = segmented else {
            mode = .stream(size: observed == nil ? answer.size : nil)
            slots = [Slot()]
            // One stream from the URL probed: mirrors take no part.
            var dropped: [Action] = []
            for source in sources.indices.dropFirst() { drop(source: source, transfer: nil, into: &dropped) }
            table = nil
            var actions: [Action] = []
            if answer.openBody == .whole, observed == nil {
                adopted = startTransfer(connection: 0, segment: nil, range: nil, isSplit: false, now: now)
            } else if answer.openBody != nil {
                actions.append(.discardOpenBody)
            }
            return dropped + actions + [.prepare(Preparation(mode: mode!, manifest: nil))]
        }
        // An open 206 body from byte 0 is the first segment; the rest is planned as usual.
        var first: ByteRange?
        if case .range(let r)? = answer.openBody, r.lowerBound == 0, r.upperBound <= size, !r.isEmpty, observed == nil { first = r }
        // After a size change, mirrors checked against the old size are not trusted again.
        var actions: [Action] = []
        if observed != nil {
            for source in sources.indices.dropFirst() { drop(source: source, transfer: nil, into: &actions) }
        }
        let connections = configuration.connections * configuration.sources
        // The rest: full shares for the other connections, the last and shorter one for the
        // probe's connection once its range is in (Planner.plan(after:size:...)).
        let plan: [ByteRange]
        if answer.inOrder || configuration.window != nil {
            let start = first?.upperBound ?? 0
            plan = (first.map { [$0] } ?? []) + Planner.plan(inOrderFrom: start, size: size, connections: connections,
                                                             minimumSegmentSize: configuration.minimumSegmentSize,
                                                             window: configuration.window)
        } else if let first {
            plan = [first] + Planner.plan(after: first.upperBound, size: size, connections: connections,
                                          minimumSegmentSize: configuration.minimumSegmentSize)
        } else {
            plan = Planner.plan(size: size, connections: connections, minimumSegmentSize: configuration.minimumSegmentSize)
        }
        var policy = configuration.split
        if let window = configuration.window {
            // Pieces of a window take a fraction of a second: a straggler at the read position
            // is split as soon as a quarter second tells its rate (simulated straggler mixes
            // read in order: p90 1.12 x the healthy ideal, against 1.14 with the 0.5 s default).
            policy.rateWarmup = min(policy.rateWarmup, 0.25)
            table = SegmentTable(size: size, ranges: plan, policy: policy)
            table!.windowEnd = window
        } else {
            table = SegmentTable(size: size, ranges: plan, policy: policy)
        }
        durableOffsets = [:]
        mode = .segmented(size: size)
        slots = makeSlots(perSource: min(configuration.connections, plan.count))  // the probe's is one of them
        if first != nil {
            let id = nextTransferID
            let assignment = table!.assign(transfer: id, now: now)!  // segment 0, unowned
            adopted = startTransfer(connection: 0, segment: assignment.segment, range: assignment.range, isSplit: false, now: now)
        } else if answer.openBody != nil {
            actions.append(.discardOpenBody)
        }
        let checkpoint = Checkpoint(id: 0, durable: false,
                                    segments: plan.map { Checkpoint.Segment(start: $0.lowerBound, end: $0.upperBound, written: $0.lowerBound) })
        return actions + [.prepare(Preparation(mode: mode!, manifest: checkpoint, manifestCanWait: first != nil && plan.count == 1))]
    }

    /// The answer to ``Action/resolveAgain``: the URL given still leads to the same file (its
    /// requests now go where it leads), or not (then the download fails with the transfer that
    /// found the URL expired).
    public mutating func resolved(sameFile: Bool, now: Double) -> [Action] {
        guard resolving else { return [] }
        resolving = false
        lastResolvedAt = now
        if !sameFile, let expired = expiredTransfer {
            stop(.transfer(expired, gaveUpAfter: nil))
        }
        return advance(now: now)
    }
}
