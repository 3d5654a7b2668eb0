/// Several sources for one file (mirrors): which are in use, which wait for their identity
/// check, and when one that keeps failing is dropped so that its ranges go to the others.
extension DownloadMachine {
    /// Where a source stands.
    public enum SourceStatus: Sendable, Equatable {
        /// Waiting for its identity check: its connections take no range yet.
        case unchecked
        /// Serving ranges.
        case active
        /// Used no more.
        case dropped
    }

    struct SourceState: Sendable, Equatable {
        var status: SourceStatus
        /// Failed requests in a row with no byte written in between, over all its connections.
        var failuresInARow = 0
        /// The most of its transfers that received bytes at the same time.
        var servedAtOnce = 0
    }

    /// Where source `index` stands.
    public func status(ofSource index: Int) -> SourceStatus { sources[index].status }

    /// The source connection `index` asks.
    public func source(ofConnection index: Int) -> Int { slots.indices.contains(index) ? slots[index].source : 0 }

    /// The identity check of mirror `source` ended: it serves the same bytes as the others
    /// (its connections start taking ranges), or not (it is dropped; none of its bytes is
    /// ever written).
    public mutating func sourceChecked(_ source: Int, passed: Bool, now: Double) -> [Action] {
        guard sources.indices.contains(source), sources[source].status == .unchecked else { return [] }
        var actions: [Action] = []
        if passed {
            sources[source].status = .active
        } else {
            drop(source: source, transfer: nil, into: &actions)
            if !sources.contains(where: { $0.status != .dropped }) { stop(.noSourceLeft) }
        }
        guard case .running = phase else { return actions }
        return actions + advance(now: now)
    }

    /// Whether connection `slot` may take a range now: its source serves ranges.
    func isUsable(_ slot: Int) -> Bool { sources[slots[slot].source].status == .active }

    /// Whether a source other than `source` is still in use or waiting for its check.
    func anotherSourceLeft(besides source: Int) -> Bool {
        sources.indices.contains { $0 != source && sources[$0].status != .dropped }
    }

    /// Stops using `source`: its connections take nothing more (those in flight finish what
    /// they hold, and their ranges go back to the others if they fail).
    mutating func drop(source: Int, transfer: TransferID?, into actions: inout [Action]) {
        guard sources[source].status != .dropped else { return }
        sources[source].status = .dropped
        for index in slots.indices where slots[index].source == source {
            if case .busy = slots[index].state { continue }
            slots[index].state = .retired
        }
        actions.append(.notify(.sourceDropped(source: source, transfer: transfer)))
    }

    /// A failure of a transfer from a mirror or, with mirrors left, from the URL probed: drops
    /// its source when the failure cannot clear (a 404, another file size) or the source keeps
    /// failing. Returns whether it was dropped (the failure is then judged no further).
    mutating func dropSourceIfFailing(_ failure: TransferFailure, of transfer: TransferState, into actions: inout [Action]) -> Bool {
        let source = slots[transfer.connection].source
        guard sources.count > 1, anotherSourceLeft(besides: source) else { return false }
        // A redirect target that expired is resolved again before its source is given up.
        if source == 0, redirected, resolutionsLeft > 0, let status = failure.httpStatus,
           RetryPolicy.statusesOfAnExpiredURL.contains(status) { return false }
        sources[source].failuresInARow += 1
        let persistent = !failure.isTransient || (source != 0 && failure.observedTotal != nil)
        guard persistent || sources[source].failuresInARow >= configuration.sourceFailuresInARow else { return false }
        drop(source: source, transfer: transfer.id, into: &actions)
        return true
    }

    /// Slots for `perSource` connections of each source, the probed URL's first.
    func makeSlots(perSource: Int) -> [Slot] {
        (0..<configuration.sources).flatMap { source in (0..<perSource).map { _ in Slot(source: source) } }
    }
}
