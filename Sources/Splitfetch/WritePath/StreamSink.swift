import DownloadCore
import Synchronization

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
        if let error = HTTPFields.codingRefusal(head, url: redactedURL(url)) { return error }
        switch HTTPFields.contentLength(head.all("content-length")) {
        case .failure(let e):
            return DownloadError(.protocolViolation, "\(redactedURL(url)): \(e.message)")
        case .success(let length):
            if let length, let expectedSize, length != expectedSize {
                return DownloadError(.protocolViolation,
                    "\(redactedURL(url)): Content-Length \(length) differs from the probed size \(expectedSize)", kind: .protocolFault(.lengthMismatch))
            }
        }
        return nil
    }

    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
        if !validated.load(ordering: .relaxed) {
            if let error = Self.validate(head, expectedSize: expectedSize, url: url) { return .fail(error) }
            validated.store(true, ordering: .relaxed)
            target.counters.responded(http2: head.version == "2")
        }
        let offset = written.load(ordering: .relaxed)
        let count = Int64(body.count)
        if pause.shouldPause(through: offset + count, count: Int(count), machine: target.machine, transfer: target.transfer) { return .pause }
        target.counters.received.wrappingAdd(count, ordering: .relaxed)
        if let expectedSize, offset + count > expectedSize {
            return .fail(DownloadError(.protocolViolation, "\(redactedURL(url)): body longer than its \(expectedSize) bytes", kind: .protocolFault(.bodyOverrun)))
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
    func resumeDelay() -> Duration? { pause.resumeDelay() }
}
