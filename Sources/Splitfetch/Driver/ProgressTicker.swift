import NIOConcurrencyHelpers

/// Emits ``DownloadEvent/progress(_:)`` every ``DownloadOptions/progressInterval`` from the
/// connections' live counters, with a smoothed speed, on the ``TimerQueue``: a download that ends
/// before its first tick costs a heap entry, not a task.
///
/// Thread safety: the ticks run on the timer thread one at a time; `cancel` may come from any
/// task. One lock guards the speeds and the pending tick.
final class ProgressTicker: Sendable {
    private struct State {
        var token: TimerQueue.Token?
        var cancelled = false
        var lastTime = 0.0
        var overall = Speed()
        var speeds: [Speed]
    }

    let interval: Duration
    private let emit: @Sendable (DownloadEvent) -> Void
    private let counters: [ConnectionCounters]
    /// Reads the segment map (a segmented download), under the machine's lock.
    private let segments: (@Sendable () -> [SegmentProgress])?
    private let total: Int64?
    private let base: Int64
    private let start = ContinuousClock.now
    private let state: NIOLockedValueBox<State>
    private let timers: TimerQueue

    /// Starts ticking.
    ///
    /// - Parameters:
    ///   - counters: the connections whose bytes are counted.
    ///   - total: the file size, when known.
    ///   - base: bytes already on disk before this run.
    ///   - segments: reads the segment map, for a segmented download.
    init(interval: Duration, emit: @escaping @Sendable (DownloadEvent) -> Void, counters: [ConnectionCounters], total: Int64?,
         base: Int64, segments: (@Sendable () -> [SegmentProgress])? = nil, timers: TimerQueue = .shared) {
        self.interval = interval
        self.emit = emit
        self.counters = counters
        self.segments = segments
        self.total = total
        self.base = base
        self.timers = timers
        state = NIOLockedValueBox(State(speeds: [Speed](repeating: Speed(), count: counters.count)))
        scheduleNext()
    }

    /// No tick follows (one under way may still emit).
    func cancel() {
        let token = state.withLockedValue { state -> TimerQueue.Token? in
            state.cancelled = true
            defer { state.token = nil }
            return state.token
        }
        if let token { timers.cancel(token) }
    }

    private func scheduleNext() {
        // Scheduled under the lock, so a cancel that comes meanwhile finds the token.
        state.withLockedValue { state in
            guard !state.cancelled else { return }
            state.token = timers.schedule(after: interval) { [self] in tick() }
        }
    }

    /// No tick follows, and one last progress is emitted now: every byte counted so far. A
    /// download whose bytes have all arrived says so before anyone hears it is transferred, so a
    /// snapshot never shows it short of its size while the next download takes its place.
    func finish() {
        let token = state.withLockedValue { state -> TimerQueue.Token? in
            defer { state.token = nil }
            return state.token
        }
        if let token { timers.cancel(token) }
        emitProgress(last: true)
    }

    private func tick() {
        emitProgress(last: false)
    }

    /// Emits the progress now and, unless it is the `last`, schedules the next tick.
    private func emitProgress(last: Bool) {
        let now = (ContinuousClock.now - start).seconds
        // The map before the counters: its written parts are then not ahead of the bytes the
        // counters report. Read after them, a tick delayed between the two reads (on a loaded
        // machine; 31 ms is 1 MiB at 32 MiB/s) can show the map ahead: a full run's
        // progressEventsAndStatisticsAddUp once saw it more than 1 MiB ahead.
        let map = segments?() ?? []
        var connections = counters.map(\.progress)
        let bytes = connections.reduce(0) { $0 + $1.bytes }
        let smoothed: Double? = state.withLockedValue { state in
            guard !state.cancelled else { return nil }
            if last { state.cancelled = true }
            let dt = now - state.lastTime
            for index in connections.indices {
                connections[index].bytesPerSecond = state.speeds[index].update(bytes: connections[index].bytes, over: dt)
            }
            state.lastTime = now
            return state.overall.update(bytes: bytes, over: dt)
        }
        guard let smoothed else { return }
        emit(.progress(DownloadProgress(bytesWritten: base + bytes, totalBytes: total, bytesPerSecond: smoothed,
                                        elapsed: .seconds(now), connections: connections, segments: map)))
        if !last { scheduleNext() }
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
