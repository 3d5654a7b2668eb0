/// Which connection gets which range, and which transfers are stopped.
extension DownloadMachine {
    mutating func abortStalled(now: Double, into actions: inout [Action]) {
        // In id order: a dictionary's order differs between processes, decisions must not.
        let stalled = transfers.values.filter {
            $0.abortReason == nil && !$0.isPaused && now >= $0.lastProgressAt + configuration.stallTimeout  // as the wake is computed
        }.map(\.id).sorted()
        for id in stalled {
            transfers[id]!.abortReason = .stalled
            actions.append(.abort(id, .stalled))
        }
    }

    mutating func abortAll(into actions: inout [Action]) {
        for (id, transfer) in transfers.sorted(by: { $0.key < $1.key }) where transfer.abortReason == nil {
            transfers[id]!.abortReason = .stopping
            actions.append(.abort(id, .stopping))
        }
    }

    /// Gives every idle connection a range: an untaken one, or part of a range in flight, or a
    /// stalled or hopelessly slow owner's remainder whole (that owner is then aborted). The
    /// fastest idle connection asks first; one that is refused does not stop a faster one.
    mutating func assignIdleConnections(now: Double, into actions: inout [Action]) {
        let idle = slots.indices.filter { slots[$0].state == .idle && isUsable($0) }
            .sorted { (slots[$0].lastRate ?? -1, -$0) > (slots[$1].lastRate ?? -1, -$1) }
        let stragglerBelow = stragglerRate()
        // What each transfer's connection was measured at on its earlier transfers.
        var ownerRates: [Int: Double] = [:]
        for transfer in transfers.values { if let rate = slots[transfer.connection].lastRate { ownerRates[transfer.id] = rate } }
        // Under a per-host cap, each new request takes one of the host's free slots.
        var room = hostRoom
        for index in idle {
            let id = nextTransferID
            let fresh = stragglerBelow.map { (slots[index].lastRate ?? .infinity) >= $0 } ?? true
            let mayCut = room.map { $0 >= Self.slotsForASplit } ?? true
            guard let assignment = table!.assign(transfer: id, now: now, rate: slots[index].lastRate, freshPieces: fresh,
                                                 ownerRates: ownerRates, mayCut: mayCut) else { continue }
            room = room.map { max(0, $0 - 1) }
            if let displaced = assignment.displacedOwner, transfers[displaced] != nil, transfers[displaced]!.abortReason == nil {
                transfers[displaced]!.abortReason = .takenOver
                actions.append(.abort(displaced, .takenOver))
            }
            actions.append(.start(startTransfer(connection: index, segment: assignment.segment, range: assignment.range,
                                                isSplit: assignment.isSplit, now: now)))
        }
    }

    /// In a download read in order, a connection slower than a quarter of the connections'
    /// median rate is a straggler: a fresh piece given to it would hold the reader up, so it
    /// only helps through splits. `nil` outside a window, or before two rates are known.
    func stragglerRate() -> Double? {
        guard configuration.window != nil else { return nil }
        // Of the connections still in use: the median one is never a straggler, so someone can
        // always take a fresh piece.
        let rates = slots.filter { $0.state != .retired }.compactMap(\.lastRate).sorted()
        guard rates.count >= 2 else { return nil }
        return rates[rates.count / 2] / 4
    }

    mutating func startTransfer(connection: Int, segment: Int?, range: ByteRange?, isSplit: Bool,
                                        now: Double) -> TransferStart {
        let id = nextTransferID
        nextTransferID += 1
        transfers[id] = TransferState(id: id, connection: connection, segment: segment, range: range, startedAt: now,
                                 lastProgressAt: now, offset: range?.lowerBound ?? 0, abortReason: nil)
        slots[connection].state = .busy(id)
        // Validators belong to the URL probed: a mirror's ETag differs for the same bytes.
        let source = slots[connection].source
        return TransferStart(id: id, connection: connection, source: source, range: range,
                             useIfRange: range != nil && ifRangeUsable && source == 0, isSplit: isSplit)
    }
}
