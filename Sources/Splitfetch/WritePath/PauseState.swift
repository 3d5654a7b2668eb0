import DownloadCore
import Synchronization

/// Pauses a sink's transfer while its next piece would pass the end of a reader's ring, or while
/// a rate limit's budget is in debt, and tells the machine, so that a connection waiting for the
/// reader or for the budget is never taken for stalled.
///
/// Thread safety: used by one sink on the transport thread; atomics for the hand-over.
final class PauseState: Sendable {
    let reader: PrefixReader?
    let rateLimit: RateLimit?
    /// The end of the piece waiting for room in the reader's ring (0: not waiting for room).
    private let waitingThrough = Atomic<Int64>(0)
    /// How long the budget asked to wait, in nanoseconds (0: not waiting for the budget).
    private let waitingNanoseconds = Atomic<Int64>(0)

    init(reader: PrefixReader?, rateLimit: RateLimit?) {
        self.reader = reader
        self.rateLimit = rateLimit
    }

    /// Whether the piece of `count` bytes ending at `through` must wait. Tells the machine when
    /// the transfer pauses and when it goes on.
    func shouldPause(through: Int64, count: Int, machine: SharedMachine, transfer: DownloadMachine.TransferID) -> Bool {
        guard reader != nil || rateLimit != nil else { return false }
        let wasPaused = waitingThrough.load(ordering: .relaxed) != 0 || waitingNanoseconds.load(ordering: .relaxed) != 0
        var room: Int64 = 0
        var delay: Duration?
        if let reader, !reader.admits(through: through) {
            room = through
        } else if let rateLimit {
            delay = rateLimit.take(count)
        }
        let pause = room != 0 || delay != nil
        waitingThrough.store(room, ordering: .relaxed)
        waitingNanoseconds.store(delay.map { max(1, Int64($0.seconds * 1e9)) } ?? 0, ordering: .relaxed)
        if pause != wasPaused {
            let now = machine.now()
            machine.withLock { $0.paused(transfer, pause, now: now) }
        }
        return pause
    }

    /// How long the budget asked to wait, when the pause is for the budget alone.
    func resumeDelay() -> Duration? {
        guard waitingThrough.load(ordering: .relaxed) == 0 else { return nil }
        let nanoseconds = waitingNanoseconds.load(ordering: .relaxed)
        return nanoseconds > 0 ? .nanoseconds(nanoseconds) : nil
    }

    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) {
        let through = waitingThrough.load(ordering: .relaxed)
        let nanoseconds = waitingNanoseconds.load(ordering: .relaxed)
        if let reader, through > 0 {
            reader.resumeWhen(through: through, resume)
        } else if nanoseconds > 0 {
            // The resume only posts to the transport thread, so it never blocks the timer's.
            TimerQueue.shared.schedule(after: .nanoseconds(nanoseconds), resume)
        } else {
            resume()
        }
    }
}
