/// When the progress is saved, and what a saved snapshot may claim.
extension DownloadMachine {
    mutating func checkpointIfDue(now: Double, into actions: inout [Action]) {
        guard checkpointInFlight == nil, storage == .ready else { return }
        let quick = configuration.quickCheckpointInterval
        if let due = nextDurable, now >= due {
            nextDurable = now + configuration.durableCheckpointInterval
            if nextQuick != nil { nextQuick = now + quick }
            lastCheckpoint = (now, writtenBytes)
            actions.append(.checkpoint(makeCheckpoint(durable: true)))
        } else if let due = nextQuick, now >= due {
            if let later = quickCheckpointDeferred(now: now) {
                nextQuick = later
                return
            }
            nextQuick = now + quick
            lastCheckpoint = (now, writtenBytes)
            actions.append(.checkpoint(makeCheckpoint(durable: false)))
        }
    }

    /// When a quick checkpoint that came due should be looked at again instead, or `nil` to take
    /// it now: it waits for ``Configuration/quickCheckpointBytes`` new bytes, at most until
    /// ``Configuration/quickCheckpointLongestInterval`` after the last checkpoint, and with no
    /// new byte at all there is nothing to save. The next look is when the bytes should be
    /// there at the rate since the last checkpoint.
    func quickCheckpointDeferred(now: Double) -> Double? {
        let quick = configuration.quickCheckpointInterval, longest = configuration.quickCheckpointLongestInterval
        let fresh = writtenBytes - lastCheckpoint.written, elapsed = now - lastCheckpoint.at
        if fresh > 0 && (fresh >= configuration.quickCheckpointBytes || elapsed >= longest) { return nil }
        if fresh <= 0 { return now + max(quick, longest) }
        let rate = Double(fresh) / max(elapsed, quick)
        let expected = now + Double(configuration.quickCheckpointBytes - fresh) / rate
        return max(now + quick, min(expected, lastCheckpoint.at + longest))
    }

    /// A snapshot of the written offsets. A durable one claims them as on disk (the driver syncs
    /// before saving); a quick one claims only what the last durable one did, the rest as cached.
    mutating func makeCheckpoint(durable: Bool) -> Checkpoint {
        let id = nextCheckpointID
        nextCheckpointID += 1
        let snapshot = table!.progressSnapshot()
        var offsets: [Int64: Int64] = [:]
        let segments = snapshot.map { entry -> Checkpoint.Segment in
            let start = entry.range.lowerBound
            offsets[start] = entry.written
            let onDisk = durable ? entry.written : min(durableOffsets[start] ?? start, entry.written)
            return Checkpoint.Segment(start: start, end: entry.range.upperBound, written: onDisk,
                                      cached: entry.written > onDisk ? entry.written : nil)
        }
        checkpointInFlight = CheckpointInFlight(id: id, durable: durable, offsets: offsets)
        return Checkpoint(id: id, durable: durable, segments: segments)
    }
}
