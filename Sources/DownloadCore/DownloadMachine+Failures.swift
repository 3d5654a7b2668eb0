/// What a failed transfer leads to: start over, drop If-Range, resolve an expired URL again,
/// one connection fewer, a retry after a backoff, or the end of the download.
extension DownloadMachine {

    /// What a failed attempt leads to: a restart after a size change, one connection fewer for a
    /// busy server, a retry after a backoff, or the end of the download.
    mutating func judge(failure: TransferFailure, of transfer: TransferState, wrote: Int64, now: Double,
                                into actions: inout [Action]) {
        let slot = transfer.connection
        let source = slots[slot].source
        if wrote > 0 { sources[source].failuresInARow = 0 }
        // A mirror naming another size, or a source that keeps failing while others serve.
        if dropSourceIfFailing(failure, of: transfer, into: &actions) { return }
        // Another total before any byte was written, or a 416 saying the file ends before the
        // planned size (then the bytes written may be of another file too): start over.
        if source == 0, let observed = failure.observedTotal, mayRestartOnSizeMismatch, let table,
           table.writtenBytes == 0 || failure.httpStatus == 416 {
            // After bytes were written the server's answers contradict each other (206 totals
            // that ranges past the end refute): its ranges are not trusted again.
            totalsContradicted = table.writtenBytes > 0
            phase = .restarting(observedTotal: observed)
            return
        }
        if failure.ignoredIfRange, ifRangeUsable {
            // Not the file changing (the validators matched): ask again at once, without If-Range.
            ifRangeUsable = false
            actions.append(.notify(.ifRangeDropped(connection: slot, transfer: transfer.id)))
            return
        }
        if redirected, source == 0, let status = failure.httpStatus, RetryPolicy.statusesOfAnExpiredURL.contains(status) {
            // A signed URL expired: resolve it again rather than fail; its connection waits.
            if resolving { return }
            // The answer to a request made before the last resolution: the old target's (read
            // late, by a loaded process). The new one is in use already; its range is asked of it
            // at once. Counted, such answers used up the resolutions while the new targets served.
            if let resolvedAt = lastResolvedAt, transfer.startedAt < resolvedAt { return }
            if resolutionsLeft > 0 {
                resolutionsLeft -= 1
                resolving = true
                expiredTransfer = transfer.id
                actions.append(.resolveAgain)
                return
            }
        }
        // One connection fewer for a busy source (429, 503, FTP's 421, a login refused while
        // others are logged in), but never its last.
        var failure = failure
        let live = slots.filter { $0.state != .retired && $0.source == source }.count
        if case .segmented = mode, failure.isServerBusy, !transfers.isEmpty, live > 1 {
            // FTP closes its control connection after every range, and a server counts a closed
            // session for a moment longer: refused at no more connections than it has served at
            // once, the request is asked again after a backoff (once: refused again, the
            // connection is given up).
            if failure.httpStatus == nil, live <= sources[source].servedAtOnce, slots[slot].failures == 0 {
                failure.kind = .network(.serverFull)
            } else {
                slots[slot].state = .retired
                actions.append(.notify(.connectionsReduced(remaining: live - 1, transfer: transfer.id)))
                return
            }
        }
        guard failure.isTransient else {
            stop(.transfer(transfer.id, gaveUpAfter: nil))
            return
        }
        if case .segmented = mode, wrote > 0 {
            slots[slot].failures = 1
        } else {
            slots[slot].failures += 1
        }
        let attempt = slots[slot].failures
        switch configuration.retry.decide(failure, attempt: attempt, random: &random) {
        case .giveUp:
            stop(.transfer(transfer.id, gaveUpAfter: configuration.retry.retries))
        case .retry(let delay):
            slots[slot].state = .waiting(until: now + delay)
            actions.append(.notify(.retrying(connection: slot, transfer: transfer.id, attempt: attempt, delay: delay)))
        }
    }

    mutating func stop(_ failure: Failure) {
        switch phase {
        case .preparing, .running, .restarting: phase = .stopping(failure)
        case .awaitingProbe, .stopping, .done: break
        }
    }
}
