/// Emits ``DownloadEvent/progress(_:)`` every ``DownloadOptions/progressInterval`` from the
/// connections' live counters, with a smoothed speed.
struct ProgressTicker: Sendable {
    let interval: Duration
    let emit: @Sendable (DownloadEvent) -> Void

    /// Starts ticking; cancel the task to stop.
    ///
    /// - Parameters:
    ///   - counters: the connections whose bytes are counted.
    ///   - total: the file size, when known.
    ///   - base: bytes already on disk before this run.
    func start(counters: [WorkerCounters], total: Int64?, base: Int64) -> Task<Void, Never> {
        let (interval, emit) = (self.interval, self.emit)
        let clock = ContinuousClock()
        let start = clock.now
        return Task {
            var lastTime = 0.0
            var overall = Speed()
            var speeds = [Speed](repeating: Speed(), count: counters.count)
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { break }
                let now = (clock.now - start).seconds
                var connections = counters.map(\.progress)
                let bytes = connections.reduce(0) { $0 + $1.bytes }
                let dt = now - lastTime
                let smoothed = overall.update(bytes: bytes, over: dt)
                for index in connections.indices {
                    connections[index].bytesPerSecond = speeds[index].update(bytes: connections[index].bytes, over: dt)
                }
                lastTime = now
                emit(.progress(DownloadProgress(bytesWritten: base + bytes, totalBytes: total, bytesPerSecond: smoothed,
                                                elapsed: .seconds(now), connections: connections)))
            }
        }
    }
}

/// A speed smoothed over about two seconds (an exponential moving average of the rate between
/// ticks).
private struct Speed {
    private var lastBytes: Int64 = 0
    private var smoothed = 0.0

    /// The smoothed speed after `bytes` in total, `seconds` after the last update.
    mutating func update(bytes: Int64, over seconds: Double) -> Double {
        if seconds > 0 {
            let instant = Double(bytes - lastBytes) / seconds
            smoothed = smoothed == 0 ? instant : smoothed + (instant - smoothed) * min(1, seconds / 2.0)
        }
        lastBytes = bytes
        return max(0, smoothed)
    }
}
