import DownloadCore
import Synchronization

/// Writes a `206` body into its segment of the partial file, straight from libcurl's buffer (or
/// the start of a whole-file `200`, for a range that starts at byte 0).
///
/// Thread safety: `receive` runs on the transport thread, one call at a time; the driver reads
/// ``offset`` and ``accepted`` after the transfer ended. They are atomics, so no lock or unchecked
/// claim is needed for that hand-over (ThreadSanitizer cannot see the continuation's edge).
final class SegmentSink: TransferSink, Sendable {
    let target: SinkTarget
    let requested: ByteRange
    let total: Int64
    let url: String
    let etag: String?
    let lastModified: String?
    let sentIfRange: Bool
    /// Whether a sync will follow (``DownloadOptions/Durability-swift.struct/syncBeforeRename``): then a finished
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

    init(_ target: SinkTarget, requested: ByteRange, total: Int64, url: String, etag: String?, lastModified: String?,
         sentIfRange: Bool, startsWriteback: Bool) {
        self.startsWriteback = startsWriteback
        self.target = target
        pause = PauseState(reader: target.reader, rateLimit: target.rateLimit)
        self.etag = etag
        self.lastModified = lastModified
        self.sentIfRange = sentIfRange
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
            case .accept(let through):
                acceptedThrough.store(through, ordering: .relaxed)
                target.counters.responded(http2: head.version == "2")
            case .reject(let error): return .fail(error)
            }
        }
        let end = acceptedThrough.load(ordering: .relaxed)
        let offset = written.load(ordering: .relaxed)
        var count = Int64(body.count)
        if offset + count > end {
            guard head.status == 200 else {
                target.counters.received.wrappingAdd(count, ordering: .relaxed)
                return .fail(DownloadError(.protocolViolation,
                    "\(redactedURL(url)): body runs past the range ending at byte \(end - 1)", kind: .protocolFault(.bodyOverrun)))
            }
            count = end - offset  // a whole file from byte 0: this segment needs only its start
        }
        let (id, at) = (target.transfer, offset)
        // A paused piece comes again: it is counted once, when taken.
        if pause.shouldPause(through: offset + count, count: Int(count), machine: target.machine, transfer: id) { return .pause }
        target.counters.received.wrappingAdd(Int64(body.count), ordering: .relaxed)
        let allowed = count > 0 ? target.machine.withLock { $0.claim(id, offset: at, count: count) } : 0
        if allowed > 0 {
            do {
                try target.file.write(UnsafeRawBufferPointer(rebasing: body[0..<Int(allowed)]), at: offset)
            } catch {
                target.machine.withLock { $0.unclaim(id) }
                return .fail(error)
            }
            let through = offset + allowed
            written.store(through, ordering: .relaxed)
            let now = target.machine.now()
            let prefix = target.machine.withLock { $0.commit(id, through: through, now: now); return $0.contiguousPrefix }
            target.reader?.advance(to: prefix)
            // A finished segment's pages start for the disk now, so the next checkpoint's sync finds
            // them on their way. Not when it completes the file (the written prefix reaches the end;
            // a small file's only segment does): the final `fdatasync` follows at once on an I/O
            // thread, while `sync_file_range` here would hold up this transport thread's other
            // transfers.
            if through == end && startsWriteback && prefix < total { target.file.startWriteback(ByteRange(requested.lowerBound, end)) }
            target.counters.bytes.wrappingAdd(allowed, ordering: .relaxed)
        }
        return allowed < Int64(body.count) ? .stop : .proceed
    }

    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) { pause.resumeWhenReady(resume) }
    func resumeDelay() -> Duration? { pause.resumeDelay() }
}
