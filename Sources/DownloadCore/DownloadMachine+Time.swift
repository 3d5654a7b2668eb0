/// When the machine wants to be asked again.
extension DownloadMachine {
    /// Asks for a tick at the next moment something is due: a retry, a stall deadline, an idle
    /// connection's next look, a checkpoint.
    mutating func scheduleWake(now: Double, into actions: inout [Action]) {
        var next: Double?
        func consider(_ t: Double?) {
            guard let t else { return }
            next = min(next ?? t, t)
        }
        for slot in slots {
            if case .waiting(let until) = slot.state { consider(until) }
        }
        for transfer in transfers.values where transfer.abortReason == nil && !transfer.isPaused {
            consider(transfer.lastProgressAt + configuration.stallTimeout)
        }
        if phase == .running, case .segmented = mode {
            if !transfers.isEmpty, slots.indices.contains(where: { slots[$0].state == .idle && isUsable($0) }) {
                consider(now + configuration.idleRecheckInterval)
            }
            // Even while one is saving, if it is still ahead: the driver then keeps one timer
            // instead of replacing it. One already due waits for the save to end, not for a tick.
            for due in [nextQuick, nextDurable] {
                if let due, checkpointInFlight == nil || due > now { consider(due) }
            }
        }
        if let deadline = configuration.deadline {
            switch phase {
            case .preparing, .running, .restarting, .awaitingProbe: consider(deadline)
            case .stopping, .done: break
            }
        }
        if next != scheduledWake {
            scheduledWake = next
            if let next { actions.append(.wake(at: next)) }
        }
    }
}
