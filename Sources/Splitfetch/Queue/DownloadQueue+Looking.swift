import DownloadCore

/// Looking at a queue: its downloads now, its events from now on, and waiting for it to be idle.
extension DownloadQueue {
    /// One download now, if it is in the queue.
    public func snapshot(_ id: ID) -> DownloadSnapshot? {
        state.withLock { state in
            state.schedule.position(of: id).map { Self.snapshot(of: state.schedule.entry(id)!, at: $0, in: state) }
        }
    }

    /// Every download now, in position order.
    public func snapshots() -> [DownloadSnapshot] {
        state.withLock { state in
            state.schedule.entries.enumerated().map { Self.snapshot(of: $0.element, at: $0.offset, in: state) }
        }
    }

    private static func snapshot(of entry: QueueSchedule.Entry, at position: Int, in state: State) -> DownloadSnapshot {
        let record = state.records[entry.id]!
        return DownloadSnapshot(id: entry.id, url: redactedURL(record.url), destination: record.destination,
                                state: DownloadState(entry.state), priority: entry.priority, position: position,
                                progress: record.progress?.value, bytesPerSecondLimit: record.limit?.bytesPerSecond,
                                error: entry.state == .failed ? record.ending?.error : nil, statistics: record.ending?.statistics)
    }

    /// A stream of the queue's events from now on: every download's (or, with `id`, one
    /// download's) state changes and events. A one-download stream ends when the download is
    /// complete, failed or removed; a whole-queue stream ends at ``shutdown()``. A subscriber
    /// that falls behind loses only its own oldest progress events beyond `keepingProgress`.
    /// With `statesOnly`, the stream has the state changes alone: a subscriber that records
    /// states is then woken once per change, not for every event of every download. With
    /// `endsOnly`, it has each run's last event (``DownloadEvent/isLast``): a subscriber that
    /// collects results is woken once per run. With both, it has both.
    public func subscribe(to id: ID? = nil, keepingProgress: Int = 64, statesOnly: Bool = false,
                          endsOnly: Bool = false) -> QueueEvents {
        let subscriber = EventSubscriber<QueueEvent>(keepingProgress: keepingProgress, isProgress: \.isProgress)
        let interest = Subscription.Interest(states: statesOnly, ends: endsOnly)
        let ended = state.withLock { state -> Bool in
            if state.closed { return true }
            if let id, state.schedule.entry(id)?.state.isFinal ?? true { return true }
            state.subscribers.append(Subscription(id: id, interest: interest, subscriber: subscriber))
            return false
        }
        if ended { subscriber.finish() }
        return QueueEvents(subscriber: subscriber)
    }

    /// Returns when nothing runs and nothing waits: every download is paused, complete, failed
    /// or removed (at once, if so already).
    public func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle = state.withLock { state -> Bool in
                if state.schedule.isIdle || state.closed { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }
}
