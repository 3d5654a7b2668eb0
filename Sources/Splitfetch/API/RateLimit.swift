import NIOConcurrencyHelpers

/// A budget of bytes per second, shared by every transfer of every download that holds it: give
/// several downloads the same instance (``DownloadOptions/rateLimit``) to cap them together, as
/// `--limit-rate` does across `-j` jobs.
///
/// A token bucket that may go into debt: a piece of body is taken when the bucket holds any
/// tokens, and costs its size; while the bucket is in debt, the transfer pauses (libcurl's pause,
/// so the socket is not read and TCP slows the sender) until the debt is paid back at the rate.
/// Over any stretch longer than the burst, the bytes taken stay within the rate.
///
/// The rate may change while downloads use it (``setBytesPerSecond(_:now:)``): what was earned at
/// the old rate is kept, up to the new burst, and every later piece pays at the new one, so a
/// change takes effect within the wait of the transfers in debt (a tenth of a second, or one
/// piece of body at the new rate).
///
/// Thread safety: `Sendable`; its state is behind a lock, taken by the transport threads.
public final class RateLimit: Sendable {
    private struct State {
        var bytesPerSecond: Int64
        var tokens: Double
        var refilled: ContinuousClock.Instant

        /// The most tokens the bucket holds: a tenth of a second of the rate, at least 64 KiB.
        var burst: Double { Self.burst(of: bytesPerSecond) }

        static func burst(of rate: Int64) -> Double { max(Double(rate) / 10, 65_536) }

        /// Adds what the rate earned since the last refill, up to the burst.
        mutating func refill(now: ContinuousClock.Instant) {
            let elapsed = (now - refilled).seconds
            tokens = min(burst, tokens + elapsed * Double(bytesPerSecond))
            refilled = now
        }
    }

    private let state: NIOLockedValueBox<State>

    /// - Precondition: `bytesPerSecond > 0`.
    public init(bytesPerSecond: Int64) {
        precondition(bytesPerSecond > 0)
        state = NIOLockedValueBox(State(bytesPerSecond: bytesPerSecond, tokens: State.burst(of: bytesPerSecond), refilled: .now))
    }

    /// The cap, in bytes per second.
    public var bytesPerSecond: Int64 { state.withLockedValue { $0.bytesPerSecond } }

    /// The most tokens the bucket holds now.
    var burst: Double { state.withLockedValue { $0.burst } }

    /// Changes the cap for every download that holds this budget, from now on.
    ///
    /// - Precondition: `bytesPerSecond > 0`.
    public func setBytesPerSecond(_ bytesPerSecond: Int64, now: ContinuousClock.Instant = .now) {
        precondition(bytesPerSecond > 0)
        state.withLockedValue { state in
            state.refill(now: now)  // what the old rate earned so far is kept
            state.bytesPerSecond = bytesPerSecond
            state.tokens = min(state.tokens, state.burst)
        }
    }

    /// Takes `count` bytes from the budget if it is not in debt; otherwise returns how long to
    /// wait before asking again.
    func take(_ count: Int, now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLockedValue { state in
            state.refill(now: now)
            guard state.tokens > 0 else {
                // The debt, paid back at the rate, plus a millisecond so that the wake finds it paid.
                return .seconds(-state.tokens / Double(state.bytesPerSecond)) + .milliseconds(1)
            }
            state.tokens -= Double(count)
            return nil
        }
    }
}
