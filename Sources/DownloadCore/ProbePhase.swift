/// The probe phase of a download as a value: which request asks first, what a `HEAD`'s answer
/// leaves to a ranged `GET`, when a failed probe is asked again (the download's ``RetryPolicy``,
/// with the machine's seeded jitter), when it gives up, and the time limit. The driver sends the
/// requests and sleeps; every decision is here, proven by table tests.
public struct ProbePhase: Sendable {
    /// A probe request.
    public enum Request: Sendable, Equatable {
        /// The first segment's `GET`, whose body becomes the first transfer.
        case getFirst
        /// A `HEAD`, then a ranged `GET` when it does not tell enough.
        case head
    }

    /// What the driver does next.
    public enum Step: Sendable, Equatable {
        /// Send this request now, waiting at most `timeout` seconds for its answer.
        case ask(Request, timeout: Double)
        /// Wait `after` seconds, then call ``next(now:)``; the failure is retry number `retry`.
        case wait(after: Double, retry: Int)
        /// The failure ends the download; `retried` is how many retries it had, when it was
        /// retried at all.
        case giveUp(retried: Int?)
        /// The time limit passed.
        case timedOut
    }

    /// What a `HEAD`'s answer lets the probe conclude.
    public enum HeadVerdict: Sendable, Equatable {
        /// It told the size and range support (or an empty file): done.
        case enough
        /// A ranged `GET` (`bytes=0-0`) decides: the `HEAD` was refused, broken, timed out, or
        /// gave no length or no `Accept-Ranges: bytes`.
        case askRangedGet
        /// The `HEAD`'s failure is the download's.
        case fail
    }

    public let request: Request
    public let retry: RetryPolicy
    /// The longest wait for a probe's answer, in seconds.
    public let probeTimeout: Double
    /// When the download must have ended, on the machine's clock; `nil` for no limit.
    public let deadline: Double?
    /// Failed attempts so far.
    public private(set) var failures = 0
    private var random: SplitMix64

    public init(request: Request, retry: RetryPolicy, probeTimeout: Double, deadline: Double?, seed: UInt64) {
        self.request = request
        self.retry = retry
        self.probeTimeout = probeTimeout
        self.deadline = deadline
        random = SplitMix64(seed: seed)
    }

    /// The first attempt, or the next one after a ``Step/wait(after:retry:)``.
    public func next(now: Double) -> Step {
        if let deadline, now >= deadline { return .timedOut }
        return .ask(request, timeout: min(probeTimeout, deadline.map { $0 - now } ?? probeTimeout))
    }

    /// An attempt failed: ask again after the retry policy's delay (cut short by the time
    /// limit), or give up.
    public mutating func failed(_ failure: DownloadMachine.TransferFailure, now: Double) -> Step {
        if let deadline, now >= deadline { return .timedOut }
        failures += 1
        switch retry.decide(failure, attempt: failures, random: &random) {
        case .giveUp:
            return .giveUp(retried: failures > 1 && failure.isTransient ? failures - 1 : nil)
        case .retry(let delay):
            return .wait(after: deadline.map { min(delay, max(0, $0 - now)) } ?? delay, retry: failures)
        }
    }

    /// Judges a `HEAD`: `status` when a response arrived, else how the request failed.
    public static func afterHead(status: Int?, failure: FailureKind?, size: Int64?, acceptsRanges: Bool) -> HeadVerdict {
        guard let status else {
            // A server that mishandles HEAD: a timeout, no reply, a cut reply.
            guard case .network(let network)? = failure else { return .fail }
            return [.timeout, .emptyReply, .receive, .partialBody, .send].contains(network) ? .askRangedGet : .fail
        }
        switch status {
        case 200...299:
            if size == 0 || (size != nil && acceptsRanges) { return .enough }
            return .askRangedGet
        case 403, 405, 501, 500...599:
            return .askRangedGet  // HEAD refused or broken
        default:
            return .fail
        }
    }
}
