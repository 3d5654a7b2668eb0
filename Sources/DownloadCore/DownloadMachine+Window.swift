/// A download read in order (a pipe): the reader's progress moves the window that ranges are
/// handed out in, and a connection paused for the reader is not stalled.
extension DownloadMachine {
    /// The reader has taken the file's bytes `[0, offset)` (a download read in order, with a
    /// ``Configuration/window``): ranges up to `offset + window` may now be handed out.
    public mutating func delivered(through offset: Int64, now: Double) -> [Action] {
        guard let window = configuration.window, table != nil else { return [] }
        let end = offset > Int64.max - window ? Int64.max : offset + window
        guard end > table!.windowEnd else { return [] }
        table!.windowEnd = end
        return phase == .running ? advance(now: now) : []
    }

    /// A transfer's connection was paused (its bytes would pass the reader's window) or goes on
    /// again: a paused transfer is waiting for the reader, not stalled, so its stall clock
    /// restarts when it goes on.
    public mutating func paused(_ id: TransferID, _ isPaused: Bool, now: Double) {
        guard transfers[id] != nil else { return }
        transfers[id]!.isPaused = isPaused
        transfers[id]!.lastProgressAt = now
        if let segment = transfers[id]!.segment { table!.touch(segment: segment, now: now) }
    }
}
