import NIOConcurrencyHelpers

/// A budget of bytes per second, shared by every transfer of every download that holds it: give
/// several downloads the same instance (``DownloadOptions/rateLimit``) to cap them together, as
/// `--limit-rate` does across `-j` jobs.
///
/// A token bucket that may go into debt: a piece of body is taken when the bucket holds any
/// tokens, and costs its size; while the bucket is in debt, the transfer pauses (libcurl's pause,
/// so the socket is not read and TCP slows the sender) until the debt is paid back at the rate
/// and a burst is earned. Over any stretch longer than the burst, the bytes taken stay within the
/// rate.
///
/// A budget may sit within another (``init(bytesPerSecond:within:)``): a piece waits while either
/// is in debt and is taken from both, as a queue's downloads each have a limit within the
/// queue's. A budget without a cap of its own (``init(unlimitedWithin:)``) only passes pieces on.
///
/// The rate may change while downloads use it (``setBytesPerSecond(_:now:)``): what was earned at
/// the old rate is kept, up to the new burst, and every later piece pays at the new one, so a
/// change takes effect within the wait of the transfers in debt (about a fifth of a second, or
/// one piece of body at the new rate).
///
/// Thread safety: `Sendable`; its state is behind a lock, taken by the transport threads.
public final class RateLimit: Sendable {
    private struct State {
        /// `nil`: no cap of its own (a child that only passes pieces to its parent).
        var bytesPerSecond: Int64?
        var tokens: Double
        var refilled: ContinuousClock.Instant

        /// The most tokens the bucket holds: a fifth of a second of the rate, at least 64 KiB.
        /// Each paused transfer waits for a burst, so the burst sets how often transfers pause
        /// and wake: a fifth of a second took 17 % less CPU than a tenth under
        /// `--limit-rate 8M -n 8` (64 MiB: 0.153 against 0.185 CPU s), and a download still
        /// starts with at most a fifth of a second's worth ahead of the rate.
        var burst: Double { bytesPerSecond.map(Self.burst(of:)) ?? .infinity }

        static func burst(of rate: Int64) -> Double { max(Double(rate) / 5, 65_536) }

        /// Adds what the rate earned since the last refill, up to the burst.
        mutating func refill(now: ContinuousClock.Instant) {
            if let bytesPerSecond {
                let elapsed = (now - refilled).seconds
                tokens = min(burst, tokens + elapsed * Double(bytesPerSecond))
            }
            refilled = now
        }

        /// How long until the debt is paid and a burst earned, when in debt: a paused transfer
        /// wakes to a bucket that takes several pieces, not one, so it pauses about five times a
        /// second instead of once a piece (with `--limit-rate 8M -n 8`, 0.9 CPU s for 64 MiB
        /// became 0.2, then 0.15 with the larger burst).
        func wait() -> Duration? {
            guard let bytesPerSecond, tokens <= 0 else { return nil }
            return .seconds((-tokens + burst) / Double(bytesPerSecond))
        }
    }

    private let state: NIOLockedValueBox<State>
    /// A budget this one's pieces are also taken from: a download's own limit within a queue's.
    public let parent: RateLimit?

    /// A budget of `bytesPerSecond`, within `parent`'s when given.
    ///
    /// - Precondition: `bytesPerSecond > 0`.
    public init(bytesPerSecond: Int64, within parent: RateLimit? = nil) {
        precondition(bytesPerSecond > 0)
        self.parent = parent
        state = NIOLockedValueBox(State(bytesPerSecond: bytesPerSecond, tokens: State.burst(of: bytesPerSecond), refilled: .now))
    }

    /// A budget with no cap of its own (until ``setBytesPerSecond(_:now:)`` gives it one),
    /// within `parent`'s when given: a queue's, or one download's that may get a cap later.
    public init(unlimitedWithin parent: RateLimit? = nil) {
        self.parent = parent
        state = NIOLockedValueBox(State(bytesPerSecond: nil, tokens: 0, refilled: .now))
    }

    /// The cap, in bytes per second; `nil` when this budget has none of its own.
    public var bytesPerSecond: Int64? { state.withLockedValue { $0.bytesPerSecond } }

    /// The most tokens the bucket holds now.
    var burst: Double { state.withLockedValue { $0.burst } }

    /// Changes the cap for every download that holds this budget, from now on; `nil` lifts it.
    ///
    /// - Precondition: `bytesPerSecond` is `nil` or positive.
    public func setBytesPerSecond(_ bytesPerSecond: Int64?, now: ContinuousClock.Instant = .now) {
        precondition(bytesPerSecond.map { $0 > 0 } ?? true)
        state.withLockedValue { state in
            state.refill(now: now)  // what the old rate earned so far is kept
            if state.bytesPerSecond == nil, let bytesPerSecond { state.tokens = State.burst(of: bytesPerSecond) }
            state.bytesPerSecond = bytesPerSecond
            state.tokens = min(state.tokens, state.burst)
        }
    }

    /// Takes `count` bytes from this budget and every parent's if none is in debt; otherwise
    /// returns how long to wait before asking again (the longest debt), and takes nothing.
    func take(_ count: Int, now: ContinuousClock.Instant = .now) -> Duration? {
        // Called once per piece of body: a budget alone (`--limit-rate`) checks and takes
        // under one lock; a chain checks every level first, then takes from each.
        guard parent != nil else {
            return state.withLockedValue { state in
                state.refill(now: now)
                if let wait = state.wait() { return wait }
                if state.bytesPerSecond != nil { state.tokens -= Double(count) }
                return nil
            }
        }
        var wait: Duration?
        var level: RateLimit? = self
        while let limit = level {
            if let debt = limit.state.withLockedValue({ state -> Duration? in
                state.refill(now: now)
                return state.wait()
            }) {
                wait = max(wait ?? .zero, debt)
            }
            level = limit.parent
        }
        if wait != nil { return wait }
        level = self
        while let limit = level {
            limit.state.withLockedValue { state in
                if state.bytesPerSecond != nil { state.tokens -= Double(count) }
            }
            level = limit.parent
        }
        return nil
    }
}
