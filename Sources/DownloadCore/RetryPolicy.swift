/// When to try a failed request again, and when to give up.
///
/// Exponential backoff with jitter, or the wait the server asked for with `Retry-After`. Pure:
/// the jitter comes from the caller (``DownloadMachine`` draws it from its seeded generator), so
/// the same seed always gives the same delays.
public struct RetryPolicy: Sendable, Equatable {
    /// Retries per connection before the download fails; a retry that wrote bytes starts the count
    /// again.
    public var retries: Int
    /// The first backoff delay, in seconds; it doubles with every further attempt.
    public var baseDelay: Double
    /// The longest delay, backoff or `Retry-After`, in seconds.
    public var maximumDelay: Double

    public init(retries: Int = 5, baseDelay: Double = 0.25, maximumDelay: Double = 30) {
        precondition(retries >= 0 && baseDelay >= 0 && maximumDelay >= baseDelay)
        self.retries = retries
        self.baseDelay = baseDelay
        self.maximumDelay = maximumDelay
    }

    /// The statuses with which a URL reached through a redirect says it has expired (S3
    /// presigned URLs, release assets): resolved again from the URL given, not retried.
    public static let statusesOfAnExpiredURL: Set<Int> = [401, 403, 404, 410]

    /// The statuses whose `Retry-After` is honoured: the server says when to come back.
    public static let statusesWithRetryAfter: Set<Int> = [429, 503]

    /// What follows a failed attempt: another after a delay, or giving up. The one rule for every
    /// request of a download, the probe included.
    public enum Decision: Sendable, Equatable {
        case retry(after: Double)
        case giveUp
    }

    /// Decides after failed attempt number `attempt` (1-based) of a request. Draws the jitter from
    /// `random` only when it retries.
    public func decide(_ failure: DownloadMachine.TransferFailure, attempt: Int, random: inout SplitMix64) -> Decision {
        guard failure.isTransient, attempt <= retries else { return .giveUp }
        let honoured = failure.httpStatus.map { Self.statusesWithRetryAfter.contains($0) } ?? false
        return .retry(after: delay(attempt: attempt, retryAfter: honoured ? failure.retryAfter?.delay : nil, jitter: random.nextUnit()))
    }

    /// The wait before retry number `attempt` (1-based).
    ///
    /// - Parameters:
    ///   - attempt: 1 for the first retry.
    ///   - retryAfter: the server's wait in seconds, when it gave one that applies.
    ///   - jitter: a number in `[0, 1)`; the backoff is scaled into `[50 %, 100 %)` of its value.
    /// - Returns: seconds, never more than ``maximumDelay`` and never negative.
    public func delay(attempt: Int, retryAfter: Double?, jitter: Double) -> Double {
        if let retryAfter { return min(maximumDelay, max(0, retryAfter)) }
        let exponential = baseDelay * Double(UInt64(1) << UInt64(min(max(attempt, 1) - 1, 16)))
        return min(maximumDelay, exponential) * (0.5 + 0.5 * min(max(jitter, 0), 1))
    }
}

/// A server's `Retry-After` (RFC 9110 §10.2.3), parsed but not yet turned into a delay.
public enum RetryAfter: Sendable, Equatable {
    /// `Retry-After: 120`.
    case seconds(Int64)
    /// `Retry-After: <HTTP-date>`, as seconds since 1970, with the wall-clock second at which the
    /// response arrived (the date is relative to that moment).
    case date(Int64, receivedAt: Int64)

    /// The wait it asks for, in seconds; a date in the past asks for none.
    public var delay: Double {
        switch self {
        case .seconds(let s): Double(max(0, s))
        case .date(let date, let receivedAt): Double(max(0, date - receivedAt))
        }
    }
}

/// A small deterministic generator (SplitMix64): the machine's only source of randomness, so a
/// seed replays a download's every decision.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    public mutating func nextUnit() -> Double { Double(next() >> 11) / Double(UInt64(1) << 53) }
}
