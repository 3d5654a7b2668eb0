import SegmentPlanning
import Synchronization

/// Writes a `206` body into its segment of the partial file, straight from libcurl's buffer (or
/// the start of a whole-file `200`, for a range that starts at byte 0).
///
/// Thread safety: `receive` runs on the transport thread, one call at a time; the driver reads
/// ``offset`` and ``accepted`` after the transfer ended. They are atomics, so no lock or unchecked
/// claim is needed for that hand-over (ThreadSanitizer cannot see the continuation's edge).
final class SegmentSink: TransferSink, Sendable {
    let machine: SharedMachine
    let transfer: DownloadMachine.TransferID
    let file: OutputFile
    let counters: WorkerCounters
    let requested: ByteRange
    let total: Int64
    let url: String
    let etag: String?
    let lastModified: String?
    let sentIfRange: Bool
    let reader: PrefixReader?
    /// Whether a sync will follow (``DownloadOptions/syncBeforeRename``): then a finished
    /// segment's pages start for the disk at once, unless it completes the file. Without one,
    /// the kernel writes them back in its own time, not on this process's clock.
    let startsWriteback: Bool
    private let written: Atomic<Int64>
    private let pause: PauseState
    /// Where the accepted response's body ends (exclusive); 0 until a response is accepted.
    private let acceptedThrough = Atomic<Int64>(0)

    /// Where the next byte goes (the first unwritten byte of the range, after the last call).
    var offset: Int64 { written.load(ordering: .relaxed) }
    /// Whether the response was checked and accepted.
    var accepted: Bool { acceptedThrough.load(ordering: .relaxed) > 0 }
    /// Where the accepted body ends: the range's end, or earlier when the server capped it.
    var expectedEnd: Int64 { accepted ? acceptedThrough.load(ordering: .relaxed) : requested.upperBound }

    init(machine: SharedMachine, transfer: DownloadMachine.TransferID, file: OutputFile, counters: WorkerCounters,
         requested: ByteRange, total: Int64, url: String, etag: String?, lastModified: String?, sentIfRange: Bool,
         reader: PrefixReader? = nil, rateLimit: RateLimit? = nil, startsWriteback: Bool) {
        self.reader = reader
        self.startsWriteback = startsWriteback
        pause = PauseState(reader: reader, rateLimit: rateLimit)
        self.etag = etag
        self.lastModified = lastModified
        self.sentIfRange = sentIfRange
        self.machine = machine
        self.transfer = transfer
        self.file = file
        self.counters = counters
        self.requested = requested
        self.total = total
        self.url = url
        self.written = Atomic(requested.lowerBound)
    }

    /// What `head` allows this sink to write.
    func check(_ head: ResponseHead) -> HTTPFields.RangeAnswer {
        HTTPFields.checkRangeResponse(head, requested: requested, total: total, url: url, etag: etag,
                                      lastModified: lastModified, sentIfRange: sentIfRange)
    }

    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
        if !accepted {
            switch check(head) {
            case .accept(let through): acceptedThrough.store(through, ordering: .relaxed)
            case .reject(let error): return .fail(error)
            }
        }
        let end = acceptedThrough.load(ordering: .relaxed)
        let offset = written.load(ordering: .relaxed)
        var count = Int64(body.count)
        if offset + count > end {
            guard head.status == 200 else {
                counters.received.wrappingAdd(count, ordering: .relaxed)
                return .fail(DownloadError(.protocolViolation,
                    "\(redactedURL(url)): body runs past the range ending at byte \(end - 1)", isTransient: true))
            }
            count = end - offset  // a whole file from byte 0: this segment needs only its start
        }
        let (id, at) = (transfer, offset)
        // A paused piece comes again: it is counted once, when taken.
        if pause.shouldPause(through: offset + count, count: Int(count), machine: machine, transfer: id) { return .pause }
        counters.received.wrappingAdd(Int64(body.count), ordering: .relaxed)
        let allowed = count > 0 ? machine.withLock { $0.claim(id, offset: at, count: count) } : 0
        if allowed > 0 {
            do {
                try file.write(UnsafeRawBufferPointer(rebasing: body[0..<Int(allowed)]), at: offset)
            } catch {
                machine.withLock { $0.unclaim(id) }
                return .fail(error)
            }
            let through = offset + allowed
            written.store(through, ordering: .relaxed)
            let now = machine.now()
            let prefix = machine.withLock { $0.commit(id, through: through, now: now); return $0.contiguousPrefix }
            reader?.advance(to: prefix)
            // A finished segment's pages start for the disk now, so the next checkpoint's sync finds
            // them on their way. Not when it completes the file (the written prefix reaches the end;
            // a small file's only segment does): the final `fdatasync` follows at once on an I/O
            // thread, while `sync_file_range` here would hold up this transport thread's other
            // transfers.
            if through == end && startsWriteback && prefix < total { file.startWriteback(ByteRange(requested.lowerBound, end)) }
            counters.bytes.wrappingAdd(allowed, ordering: .relaxed)
        }
        return allowed < Int64(body.count) ? .stop : .proceed
    }

    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) { pause.resumeWhenReady(resume) }
}

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
    let machine: SharedMachine
    let transfer: DownloadMachine.TransferID
    let file: OutputFile
    let counters: WorkerCounters
    let expectedSize: Int64?
    let url: String
    let maximumSize: Int64?
    let reader: PrefixReader?
    private let written = Atomic<Int64>(0)
    private let pause: PauseState
    private let validated = Atomic<Bool>(false)

    /// Bytes written from offset 0.
    var offset: Int64 { written.load(ordering: .relaxed) }

    init(machine: SharedMachine, transfer: DownloadMachine.TransferID, file: OutputFile, counters: WorkerCounters,
         expectedSize: Int64?, url: String, maximumSize: Int64?, reader: PrefixReader? = nil, rateLimit: RateLimit? = nil) {
        self.reader = reader
        pause = PauseState(reader: reader, rateLimit: rateLimit)
        self.machine = machine
        self.transfer = transfer
        self.maximumSize = maximumSize
        self.file = file
        self.counters = counters
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
        if pause.shouldPause(through: offset + count, count: Int(count), machine: machine, transfer: transfer) { return .pause }
        counters.received.wrappingAdd(count, ordering: .relaxed)
        if let expectedSize, offset + count > expectedSize {
            return .fail(DownloadError(.protocolViolation, "\(redactedURL(url)): body longer than its \(expectedSize) bytes", isTransient: true))
        }
        if let maximumSize, offset + count > maximumSize {
            return .fail(DownloadError(.sizeLimit, "\(redactedURL(url)): more than the limit of \(maximumSize) bytes",
                                       remedy: .raiseMaximumSize))
        }
        do {
            try file.write(body, at: offset)
        } catch {
            return .fail(error)
        }
        let through = offset + count
        written.store(through, ordering: .relaxed)
        counters.bytes.wrappingAdd(count, ordering: .relaxed)
        let (id, now) = (transfer, machine.now())
        machine.withLock { $0.commit(id, through: through, now: now) }  // progress, for the stall deadline
        reader?.advance(to: through)
        return .proceed
    }

    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) { pause.resumeWhenReady(resume) }
}
