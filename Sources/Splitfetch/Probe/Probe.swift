import SegmentPlanning

/// Learns a resource's size, validators and range support before the download starts.
///
/// First a `HEAD` (redirects followed). When `HEAD` is refused (405, 403, 501, 5xx), times out,
/// gives no length, or does not announce `Accept-Ranges: bytes`, a `GET` with `Range: bytes=0-0`
/// decides: `206` gives the total from `Content-Range`; `200` means ranges are not supported.
struct Probe {
    let transport: CurlTransport
    let options: DownloadOptions

    /// Stops a probing `GET` after the first piece of body: the probe needs headers only.
    private final class HeadersOnlySink: TransferSink {
        func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict { .stop }
    }

    func run(url: String) async throws(DownloadError) -> RemoteResource {
        var headRequest = TransferRequest(url: url, method: .head, options: options)
        headRequest.totalTimeout = options.probeTimeout
        let head = await transport.perform(headRequest, sink: nil)
        if head.cancelled { throw DownloadError(.interrupted, "interrupted while probing \(redactedURL(url))") }

        var fromHead: RemoteResource?
        if head.curlCode == 0, let h = head.head {
            switch h.status {
            case 200...299:
                let length = try lengthOrThrow(h, url: url)
                fromHead = resource(url: url, finalURL: head.effectiveURL ?? url, head: h, size: length,
                                    ranges: h.first("accept-ranges")?.lowercased() == "bytes", method: "head")
            case 403, 405, 501, 500...599:
                break  // HEAD refused or broken: try a ranged GET
            default:
                throw HTTPFields.httpStatusError(h.status, url: url, head: h)
            }
        } else if head.curlCode != 0 && !CurlErrors.isWorthGetProbe(head.curlCode) {
            throw CurlErrors.error(for: head, url: url)
        }
        if let r = fromHead, r.size != nil, r.acceptsRanges { return r }
        if let r = fromHead, r.size == 0 { return r }

        var get = TransferRequest(url: url, method: .get, range: ByteRange(0, 1), options: options)
        get.totalTimeout = options.probeTimeout
        let probe = await transport.perform(get, sink: HeadersOnlySink())
        if probe.cancelled { throw DownloadError(.interrupted, "interrupted while probing \(redactedURL(url))") }
        guard let h = probe.head, probe.curlCode == 0 || probe.stoppedBySink else {
            throw CurlErrors.error(for: probe, url: url)
        }
        let finalURL = probe.effectiveURL ?? url
        switch h.status {
        case 206:
            let values = h.all("content-range")
            guard values.count == 1, let parsed = HTTPFields.contentRange(values[0]) else {
                throw DownloadError(.protocolViolation, "\(redactedURL(url)): 206 without a valid Content-Range (\(values.first ?? "none"))")
            }
            switch parsed {
            case .range(let got, let total):
                guard got.lowerBound == 0 else {
                    throw DownloadError(.protocolViolation, "\(redactedURL(url)): asked for byte 0, got Content-Range \(values[0])")
                }
                // A HEAD length that disagrees with the 206 total is not trusted.
                return resource(url: url, finalURL: finalURL, head: h, size: total, ranges: total != nil, method: "range-get")
            case .unsatisfied(let total):
                return resource(url: url, finalURL: finalURL, head: h, size: total, ranges: true, method: "range-get")
            }
        case 200:
            let length = try lengthOrThrow(h, url: url)
            return resource(url: url, finalURL: finalURL, head: h, size: length ?? fromHead?.size, ranges: false, method: "range-get")
        case 416:
            if let value = h.first("content-range"), case .unsatisfied(let total)? = HTTPFields.contentRange(value), total == 0 {
                return resource(url: url, finalURL: finalURL, head: h, size: 0, ranges: true, method: "range-get")
            }
            throw HTTPFields.httpStatusError(416, url: url, head: h)
        default:
            throw HTTPFields.httpStatusError(h.status, url: url, head: h)
        }
    }

    private func lengthOrThrow(_ head: ResponseHead, url: String) throws(DownloadError) -> Int64? {
        switch HTTPFields.contentLength(head.all("content-length")) {
        case .success(let n): return n
        case .failure(let e): throw DownloadError(.protocolViolation, "\(redactedURL(url)): \(e.message)")
        }
    }

    private func resource(url: String, finalURL: String, head: ResponseHead, size: Int64?, ranges: Bool, method: String) -> RemoteResource {
        RemoteResource(url: redactedURL(url), finalURL: finalURL, size: size, acceptsRanges: ranges,
                       etag: head.first("etag"), lastModified: head.first("last-modified"),
                       contentType: head.first("content-type"), contentDisposition: head.first("content-disposition"),
                       probeMethod: method)
    }
}

/// Turning libcurl result codes into ``DownloadError``s.
enum CurlErrors {
    // Values from curl/curl.h (CURLcode), stable across libcurl versions.
    static let unsupportedProtocol: Int32 = 1
    static let malformedURL: Int32 = 3
    static let couldNotResolveHost: Int32 = 6
    static let couldNotConnect: Int32 = 7
    static let partialFile: Int32 = 18
    static let writeError: Int32 = 23
    static let timedOut: Int32 = 28
    static let tooManyRedirects: Int32 = 47
    static let gotNothing: Int32 = 52
    static let sendError: Int32 = 55
    static let receiveError: Int32 = 56
    static let peerCertificate: Int32 = 60
    static let badContentEncoding: Int32 = 61

    /// Whether a failed `HEAD` is worth a ranged `GET` (a server that mishandles `HEAD`).
    static func isWorthGetProbe(_ code: Int32) -> Bool {
        [timedOut, gotNothing, receiveError, partialFile, sendError].contains(code)
    }

    /// Whether the same request may succeed later.
    static func isTransient(_ code: Int32) -> Bool {
        [couldNotConnect, partialFile, timedOut, gotNothing, sendError, receiveError, 35, 16, 92].contains(code)
    }

    /// The error for a transfer that failed in libcurl (or in its sink).
    static func error(for result: TransferResult, url: String) -> DownloadError {
        if let sinkError = result.sinkError { return sinkError }
        let code = result.curlCode
        let text = result.curlMessage.isEmpty ? "no response" : result.curlMessage
        switch code {
        case unsupportedProtocol, malformedURL:
            return DownloadError(.usage, "\(redactedURL(url)): \(text)")
        case tooManyRedirects:
            return DownloadError(.network, "\(redactedURL(url)): \(text)")
        default:
            return DownloadError(.network, "\(redactedURL(url)): \(text)", isTransient: isTransient(code))
        }
    }
}
