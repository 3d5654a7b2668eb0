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
            var lastBytes: Int64 = 0
            var lastTime = 0.0
            var smoothed = 0.0
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                if Task.isCancelled { break }
                let now = (clock.now - start).seconds
                let connections = counters.map(\.progress)
                let bytes = connections.reduce(0) { $0 + $1.bytes }
                let dt = now - lastTime
                if dt > 0 {
                    let instant = Double(bytes - lastBytes) / dt
                    smoothed = smoothed == 0 ? instant : smoothed + (instant - smoothed) * min(1, dt / 2.0)
                }
                lastBytes = bytes
                lastTime = now
                emit(.progress(DownloadProgress(bytesWritten: base + bytes, totalBytes: total, bytesPerSecond: max(0, smoothed),
                                                elapsed: .seconds(now), connections: connections)))
            }
        }
    }
}
