import Splitfetch

/// `splitfetch.onProgress`: what a live view needs of the running downloads, pushed over the
/// WebSocket to the clients that called `splitfetch.watchProgress` (the web page).
extension Aria2RPC {
    /// The notification's one parameter: the whole queue's speed and counts, and for each active
    /// download its bytes, speed, connections and segment map.
    ///
    /// A connection is `[id, state, bytesPerSecond]` (state as ``ConnectionProgress/State``'s raw
    /// value); a segment is `[start, end, written, connection or -1, split 0 or 1]`: compact,
    /// since a page gets one every half second.
    public func progressNotification() -> JSONValue {
        let counts = daemon.counts()
        var speed = 0.0
        var downloads: [JSONValue] = []
        for job in daemon.unfinished([.active], offset: 0, count: .max) {
            guard let progress = daemon.queue.snapshot(job.gid)?.progress else {
                downloads.append(["gid": .string(job.gid)])
                continue
            }
            speed += progress.bytesPerSecond
            let connections: [JSONValue] = progress.connections.map {
                [.number(Double($0.id)), .number(Double($0.state.rawValue)), .number($0.bytesPerSecond.rounded())]
            }
            let segments: [JSONValue] = progress.segments.map {
                [.number(Double($0.range.lowerBound)), .number(Double($0.range.upperBound)), .number(Double($0.written)),
                 .number(Double($0.connection ?? -1)), .number($0.isSplit ? 1 : 0)]
            }
            downloads.append([
                "gid": .string(job.gid), "completedLength": .number(Double(progress.bytesWritten)),
                "totalLength": progress.totalBytes.map { .number(Double($0)) } ?? .null,
                "downloadSpeed": .number(progress.bytesPerSecond.rounded()),
                "connections": .array(connections), "segments": .array(segments),
            ])
        }
        return ["downloadSpeed": .number(speed.rounded()), "numActive": .number(Double(counts[.active] ?? 0)),
                "numWaiting": .number(Double((counts[.waiting] ?? 0) + (counts[.paused] ?? 0))),
                "downloads": .array(downloads)]
    }
}
