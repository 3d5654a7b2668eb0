/// A per-host connection cap shared with other downloads (a session's): requests that wait for
/// a slot, and whether the host has room for a split.
///
/// The rule: under a cap, a freed slot goes to work not yet started (the host's waiting
/// requests, and files of the batch not begun) before any healthy range is cut short. A split
/// ends its owner's response early, which closes that connection; the new piece needs a
/// connection of its own. So a healthy range is split, or a slow owner's remainder taken whole,
/// only while nothing waits for the host and at least two of its slots are free (one for the
/// new piece, one for the connection being closed, which a server counts until it sees the
/// close), and, as without a cap, only when the split is expected to save more than a new
/// request costs (``SegmentTable/SplitPolicy/requestOverhead``). A stalled range is taken
/// whatever the room: its connection is lost already. A request waiting for a slot is neither
/// slow nor stalled, and its range is not split or taken: that would only move its bytes to
/// another request in the same wait.
extension DownloadMachine {
    /// Slots of a capped host that a split needs free (and nothing waiting).
    public static let slotsForASplit = 2

    /// A transfer's request waits for a slot of its host (`true`), or has one now (`false`):
    /// until then it is not started, so neither stalled nor slow.
    public mutating func queued(_ id: TransferID, _ isQueued: Bool, now: Double) {
        guard transfers[id] != nil else { return }
        transfers[id]!.isPaused = isQueued
        transfers[id]!.lastProgressAt = now
        if let segment = transfers[id]!.segment { table!.setQueued(segment: segment, isQueued, now: now) }
    }
}
