/// Which connection gets which range, and which transfers are stopped.
extension DownloadMachine {
    mutating func abortStalled(now: Double, into actions: inout [Action]) {
        // In id order: a dictionary's order differs between processes, decisions must not.
        let stalled = transfers.values.filter {
            $0.abortReason == nil && now >= $0.lastProgressAt + configuration.stallTimeout  // as the wake is computed
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
        let idle = slots.indices.filter { slots[$0].state == .idle }
            .sorted { (slots[$0].lastRate ?? -1, -$0) > (slots[$1].lastRate ?? -1, -$1) }
        for index in idle {
            let id = nextTransferID
            guard let assignment = table!.assign(transfer: id, now: now, rate: slots[index].lastRate) else { continue }
            if let displaced = assignment.displacedOwner, transfers[displaced] != nil, transfers[displaced]!.abortReason == nil {
                transfers[displaced]!.abortReason = .takenOver
                actions.append(.abort(displaced, .takenOver))
            }
            actions.append(.start(startTransfer(connection: index, segment: assignment.segment, range: assignment.range,
                                                isSplit: assignment.isSplit, now: now)))
        }
    }

    mutating func startTransfer(connection: Int, segment: Int?, range: ByteRange?, isSplit: Bool,
                                        now: Double) -> TransferStart {
        let id = nextTransferID
        nextTransferID += 1
        transfers[id] = Transfer(id: id, connection: connection, segment: segment, range: range, startedAt: now,
                                 lastProgressAt: now, offset: range?.lowerBound ?? 0, abortReason: nil)
        slots[connection].state = .busy(id)
        return TransferStart(id: id, connection: connection, source: 0, range: range, useIfRange: range != nil && ifRangeUsable,
                             isSplit: isSplit)
    }
}
