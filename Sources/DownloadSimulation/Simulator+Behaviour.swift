import DownloadCore

/// The server's side of a transfer: where it ends, how fast it goes, and what goes wrong with it
/// (a scenario's persistent answer, a faulty mirror, or a fault drawn from the mix).
extension Simulator {
    mutating func begin(_ start: DownloadMachine.TransferStart) {
        requests += 1
        if transfers[start.id] != nil { violations.append("transfer id \(start.id) started twice") }
        let isStream = start.range == nil
        let end: Int64
        if let range = start.range {
            if range.isEmpty || ledger.intersects(range) {
                violations.append("transfer \(start.id) started for \(range), which has written bytes or none at all")
            }
            if let window = scenario.configuration.window, !start.isSplit, range.upperBound > delivered + window,
               range.lowerBound > machine.contiguousPrefix {
                violations.append("transfer \(start.id) asks for \(range), past the window ending at \(delivered + window)")
            }
            end = scenario.rangeCap.map { min(range.upperBound, range.lowerBound + $0) } ?? range.upperBound
        } else {
            ledger.removeAll()  // a stream starts over from byte 0
            end = scenario.size
        }
        let first = start.range?.lowerBound ?? 0
        let rate = scenario.sources.isEmpty ? scenario.rates[start.connection % scenario.rates.count] : scenario.sources[start.source].rate
        if !scenario.sources.isEmpty, scenario.sources[start.source].fault == .differentBytes {
            violations.append("transfer \(start.id) asks source \(start.source), which serves other bytes")
        }
        let behaviour = chooseBehaviour(for: start, first: first, end: end)
        transfers[start.id] = SimulatedTransfer(id: start.id, rate: rate, offset: first, end: end, next: now + drawLatency(),
                                       behaviour: behaviour, isStream: isStream)
        if case .diesAt(let t)? = scenario.sources.isEmpty ? nil : scenario.sources[start.source].fault {
            // Refused once it is gone; reset where it got to by then while it was serving.
            if now >= t {
                transfers[start.id]!.behaviour = .fail(DownloadMachine.TransferFailure(kind: .network(.receive)))
            } else if case .healthy = behaviour {
                let cut = first + Int64((t - now) * rate)
                if cut < end { transfers[start.id]!.behaviour = .resetAfter(cut) }
            }
        }
    }

    mutating func chooseBehaviour(for start: DownloadMachine.TransferStart, first: Int64, end: Int64) -> Behaviour {
        if !scenario.sources.isEmpty, scenario.sources[start.source].fault == .notFound {
            return .fail(DownloadMachine.TransferFailure(httpStatus: 404))
        }
        switch scenario.persistent {
        case .notFound?:
            return .fail(DownloadMachine.TransferFailure(httpStatus: 404))
        case .alwaysBusy?:
            return .fail(DownloadMachine.TransferFailure(httpStatus: 503, retryAfter: .seconds(1)))
        default:
            break
        }
        if start.range != nil, let planned = plannedSize, planned != scenario.size {
            // The 206 names the server's real total.
            return .fail(DownloadMachine.TransferFailure(httpStatus: 206, kind: .protocolFault(.wrongRange), observedTotal: scenario.size))
        }
        if start.range == nil && !scenario.acceptsRanges && plannedSize != nil {
            violations.append("a whole-file request in a segmented download")
        }
        let mix = scenario.faults
        guard faultsLeft > 0, mix.total > 0 else { return .healthy }
        var roll = rng.nextUnit()
        guard roll < mix.total else { return .healthy }
        faultsLeft -= 1
        let span = max(1, end - first)
        let cut = first + Int64(rng.next() % UInt64(span))
        if roll < mix.reset { return .resetAfter(cut) }
        roll -= mix.reset
        if roll < mix.stall { return .stallAfter(cut) }
        roll -= mix.stall
        if roll < mix.busy {
            let wall: Int64 = 1_800_000_000 + Int64(now)
            let after: RetryAfter = rng.next() % 2 == 0 ? .seconds(Int64(rng.next() % 3)) : .date(wall + 2, receivedAt: wall)
            return .fail(DownloadMachine.TransferFailure(httpStatus: 503, retryAfter: after))
        }
        return .fail(DownloadMachine.TransferFailure(httpStatus: 206, kind: .protocolFault(.wrongRange)))
    }

    mutating func drawLatency() -> Double {
        let l = scenario.latency
        return l.lowerBound + (l.upperBound - l.lowerBound) * rng.nextUnit()
    }
}
