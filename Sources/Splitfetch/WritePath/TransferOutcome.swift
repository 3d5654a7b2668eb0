import DownloadCore

#if canImport(Glibc)
import Glibc
#endif

/// Translates how a request ended (libcurl's result, the response head, what the sink saw) into
/// the core's ``DownloadMachine/TransferEnd``, with the error that names it for people. Facts
/// only: what to do about them is the machine's decision.
enum TransferOutcome {
    /// How a transfer through `sink` ended, and for a stream the bytes it wrote; without a sink
    /// (an open body discarded before it was adopted), as stopped.
    static func of(_ result: TransferResult, sink: (any TransferSink)?) -> (DownloadMachine.TransferEnd, DownloadError?, streamLength: Int64) {
        switch sink {
        case let sink as SegmentSink:
            let (end, error) = segment(result, sink: sink)
            return (end, error, 0)
        case let sink as StreamSink:
            let (end, error) = stream(result, sink: sink)
            return (end, error, sink.offset)
        default:
            return (.aborted, nil, 0)
        }
    }

    /// A ranged request into a segment.
    static func segment(_ result: TransferResult, sink: SegmentSink) -> (DownloadMachine.TransferEnd, DownloadError?) {
        if result.cancelled { return (.aborted, nil) }
        let url = sink.url
        if let error = result.sinkError { return failed(error, result) }
        if result.stoppedBySink { return (.completed, nil) }
        if result.curlCode != 0 { return failed(CurlErrors.error(for: result, url: url), result) }
        guard let head = result.head else {
            return failed(DownloadError(.protocolViolation, "\(redactedURL(url)): no response", kind: .protocolFault(.noResponse)), result)
        }
        if !sink.accepted, case .reject(let error) = sink.check(head) { return failed(error, result) }
        if sink.offset < sink.expectedEnd {
            return failed(DownloadError(.protocolViolation,
                "\(redactedURL(url)): body ended at byte \(sink.offset) of range \(sink.requested.lowerBound)-\(sink.expectedEnd - 1)",
                kind: .protocolFault(.lengthMismatch)), result)
        }
        // At the range's end, or at an earlier end the server chose: the machine asks for the rest.
        return (.completed, nil)
    }

    /// A whole-file request from byte 0.
    static func stream(_ result: TransferResult, sink: StreamSink) -> (DownloadMachine.TransferEnd, DownloadError?) {
        if result.cancelled { return (.aborted, nil) }
        let url = sink.url
        if let error = result.sinkError { return failed(error, result) }
        if result.curlCode != 0 { return failed(CurlErrors.error(for: result, url: url), result) }
        guard let head = result.head else {
            return failed(DownloadError(.protocolViolation, "\(redactedURL(url)): no response", kind: .protocolFault(.noResponse)), result)
        }
        if let error = StreamSink.validate(head, expectedSize: sink.expectedSize, url: url) { return failed(error, result) }
        if let size = sink.expectedSize, sink.offset != size {
            return failed(DownloadError(.protocolViolation, "\(redactedURL(url)): body ended after \(sink.offset) of \(size) bytes",
                                        kind: .protocolFault(.lengthMismatch)), result)
        }
        return (.completed, nil)
    }

    private static func failed(_ error: DownloadError, _ result: TransferResult) -> (DownloadMachine.TransferEnd, DownloadError?) {
        let retryAfter = error.retryAfter
            ?? result.head?.first("retry-after").flatMap { HTTPFields.retryAfterValue($0, receivedAt: Int64(time(nil))) }
        var failure = error.failure
        failure.httpStatus = failure.httpStatus ?? result.head?.status
        failure.retryAfter = retryAfter
        return (.failed(failure), error)
    }
}
