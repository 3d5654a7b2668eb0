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
/// Thread safety: `Sendable`; its state is behind a lock, taken by the transport threads.
public final class RateLimit: Sendable {
    /// The cap, in bytes per second.
    public let bytesPerSecond: Int64
    /// The most tokens the bucket holds: a tenth of a second of the rate, at least 64 KiB.
    let burst: Double
    private let state: NIOLockedValueBox<(tokens: Double, refilled: ContinuousClock.Instant)>

    /// - Precondition: `bytesPerSecond > 0`.
    public init(bytesPerSecond: Int64) {
        precondition(bytesPerSecond > 0)
        self.bytesPerSecond = bytesPerSecond
        burst = max(Double(bytesPerSecond) / 10, 65_536)
        state = NIOLockedValueBox((burst, .now))
    }

    /// Takes `count` bytes from the budget if it is not in debt; otherwise returns how long to
    /// wait before asking again.
    func take(_ count: Int, now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLockedValue { state in
            let elapsed = (now - state.refilled).seconds
            state.tokens = min(burst, state.tokens + elapsed * Double(bytesPerSecond))
            state.refilled = now
            guard state.tokens > 0 else {
                // The debt, paid back at the rate, plus a millisecond so that the wake finds it paid.
                return .seconds(-state.tokens / Double(bytesPerSecond)) + .milliseconds(1)
            }
            state.tokens -= Double(count)
            return nil
        }
    }
}
