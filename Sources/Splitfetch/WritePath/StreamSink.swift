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

/// Writes a whole-file `200` body from offset 0 (servers without ranges, or of unknown length).
///
/// Thread safety: as for ``SegmentSink``.
final class StreamSink: TransferSink, Sendable {
    let target: SinkTarget
    let expectedSize: Int64?
    let url: String
    let maximumSize: Int64?
    private let written = Atomic<Int64>(0)
    private let pause: PauseState
    private let validated = Atomic<Bool>(false)

    /// Bytes written from offset 0.
    var offset: Int64 { written.load(ordering: .relaxed) }

    init(_ target: SinkTarget, expectedSize: Int64?, url: String, maximumSize: Int64?) {
        self.target = target
        pause = PauseState(reader: target.reader, rateLimit: target.rateLimit)
        self.maximumSize = maximumSize
        self.expectedSize = expectedSize
        self.url = url
    }

    /// Checks a whole-file response; `nil` when it may be written.
    static func validate(_ head: ResponseHead, expectedSize: Int64?, url: String) -> DownloadError? {
        guard head.status == 200 else {
            if head.status == 206 {
                return DownloadError(.protocolViolation, "\(redactedURL(url)): 206 to a request without a range", httpStatus: 206)
            }
            return HTTPFields.httpStatusError(head.status, url: url, head: head)
        }
        if let encoding = head.first("content-encoding"), encoding.lowercased() != "identity" {
            return DownloadError(.protocolViolation,
                "\(redactedURL(url)): the server sent the body with Content-Encoding \(encoding) although asked for identity")
        }
        switch HTTPFields.contentLength(head.all("content-length")) {
        case .failure(let e):
            return DownloadError(.protocolViolation, "\(redactedURL(url)): \(e.message)")
        case .success(let length):
            if let length, let expectedSize, length != expectedSize {
                return DownloadError(.protocolViolation,
                    "\(redactedURL(url)): Content-Length \(length) differs from the probed size \(expectedSize)", isTransient: true)
            }
        }
        return nil
    }

    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
        if !validated.load(ordering: .relaxed) {
            if let error = Self.validate(head, expectedSize: expectedSize, url: url) { return .fail(error) }
            validated.store(true, ordering: .relaxed)
        }
        let offset = written.load(ordering: .relaxed)
        let count = Int64(body.count)
        if pause.shouldPause(through: offset + count, count: Int(count), machine: target.machine, transfer: target.transfer) { return .pause }
        target.counters.received.wrappingAdd(count, ordering: .relaxed)
        if let expectedSize, offset + count > expectedSize {
            return .fail(DownloadError(.protocolViolation, "\(redactedURL(url)): body longer than its \(expectedSize) bytes", isTransient: true))
        }
        if let maximumSize, offset + count > maximumSize {
            return .fail(DownloadError(.sizeLimit, "\(redactedURL(url)): more than the limit of \(maximumSize) bytes",
                                       remedy: .raiseMaximumSize))
        }
        do {
            try target.file.write(body, at: offset)
        } catch {
            return .fail(error)
        }
        let through = offset + count
        written.store(through, ordering: .relaxed)
        target.counters.bytes.wrappingAdd(count, ordering: .relaxed)
        let (id, now) = (target.transfer, target.machine.now())
        target.machine.withLock { $0.commit(id, through: through, now: now) }  // progress, for the stall deadline
        target.reader?.advance(to: through)
        return .proceed
    }

    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) { pause.resumeWhenReady(resume) }
}
