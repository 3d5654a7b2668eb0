/// When the progress is saved, and what a saved snapshot may claim. A quick checkpoint comes
/// every quick interval, and at once when a segment is completed; a durable one every durable
/// interval.
extension DownloadMachine {
    mutating func checkpointIfDue(now: Double, into actions: inout [Action]) {
        guard checkpointInFlight == nil, storage == .ready else { return }
        let quick = configuration.quickCheckpointInterval
        if let due = nextDurable, now >= due {
            nextDurable = now + configuration.durableCheckpointInterval
            if nextQuick != nil { nextQuick = now + quick }
            actions.append(.checkpoint(makeCheckpoint(durable: true)))
        } else if let due = nextQuick, now >= due || segmentCompletedSinceCheckpoint {
            nextQuick = now + quick
            // Nothing written since the last: nothing new to save.
            guard writtenBytes != lastCheckpointWritten else { return }
            actions.append(.checkpoint(makeCheckpoint(durable: false)))
        }
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
        lastCheckpointWritten = table!.writtenBytes
        segmentCompletedSinceCheckpoint = false
        return Checkpoint(id: id, durable: durable, segments: segments)
    }
}
