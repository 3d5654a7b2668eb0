import Logging
import DownloadCore
import NIOConcurrencyHelpers

/// Learns a resource's size, validators and range support before the download starts.
///
/// First a `HEAD`. When `HEAD` is refused (405, 403, 501, 5xx), times out, gives no length, or does
/// not announce `Accept-Ranges: bytes`, a `GET` with `Range: bytes=0-0` decides: `206` gives the
/// total from `Content-Range`; `200` means ranges are not supported. Redirects are followed here,
/// one hop at a time, each checked by the ``RequestPolicy`` (only `http`/`https`, no `https` →
/// `http` unless allowed, no loops, at most ``DownloadOptions/maximumRedirects``).
struct Probe {
    let connector: Connector
    let policy: RequestPolicy
    /// The longest wait for an answer: the probe timeout, or less when the download's time
    /// limit comes first (``ProbePhase/next(now:)``).
    var timeout: Duration
    var options: DownloadOptions { policy.options }
    /// The conditions of a conditional refresh (`If-None-Match`, `If-Modified-Since`), sent with
    /// every request of the probe. A `304` answer is then a resource marked
    /// ``RemoteResource/notModified``, with no body.
    var conditions: [String] = []

    init(connector: Connector, policy: RequestPolicy, timeout: Duration? = nil) {
        self.connector = connector
        self.policy = policy
        self.timeout = timeout ?? policy.options.timeouts.probe
    }

    /// Stops a probing `GET` after the first piece of body: the probe needs headers only.
    private final class HeadersOnlySink: TransferSink {
        func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict { .stop }
    }

    /// Performs a request, following redirects; returns the last result and the URL it came from.
    private func follow(_ url: String, method: TransferRequest.Method, range: ByteRange?,
                        sink: (any TransferSink)?) async throws(DownloadError) -> (TransferResult, String) {
        var current = url
        var visited: Set<String> = [url]
        var hops = 0
        while true {
            var request = policy.request(current, method: method, range: range)
            request.totalTimeout = timeout.seconds
            if options.integrity.useServerDigests { request.headers.append(DigestFields.wantReprDigest) }
            request.headers += conditions
            request.conditional = !conditions.isEmpty
            request.http2 = options.http2 != .never  // the probe may be the whole file
            options.logger.debug("probe request", metadata: ["method": "\(method)", "url": "\(redactedURL(current))",
                                                             "range": "\(range.map { "\($0.lowerBound)-\($0.upperBound - 1)" } ?? "none")"])
            let result = await connector.perform(request, sink: sink)
            if result.cancelled { throw DownloadError(.interrupted, "interrupted while probing \(redactedURL(url))") }
            guard let next = try nextHop(after: result, from: current, of: url, visited: &visited, hops: &hops) else {
                return (result, current)
            }
            current = next
        }
    }

    /// Where a redirect leads, checked by the policy; `nil` when `result` is no redirect.
    private func nextHop(after result: TransferResult, from current: String, of url: String, visited: inout Set<String>,
                         hops: inout Int) throws(DownloadError) -> String? {
        guard let head = result.head, [301, 302, 303, 307, 308].contains(head.status) else { return nil }
        guard let next = result.redirectURL else {
            throw DownloadError(.protocolViolation, "\(redactedURL(current)): HTTP \(head.status) without a usable Location")
        }
        if let error = policy.checkRedirect(from: current, to: next) { throw error }
        hops += 1
        if hops > options.maximumRedirects {
            throw DownloadError(.network, "\(redactedURL(url)): more than \(options.maximumRedirects) redirects")
        }
        if !visited.insert(next).inserted {
            throw DownloadError(.network, "\(redactedURL(url)): redirect loop at \(redactedURL(next))")
        }
        return next
    }

    /// - Parameter rangeOnly: skip `HEAD` and ask with a ranged `GET` only (when `HEAD` and a
    ///   `206` disagreed about the size).
    func run(rangeOnly: Bool = false) async throws(DownloadError) -> RemoteResource {
        let url = policy.url
        var fromHead: RemoteResource?
        let (head, headURL) = rangeOnly ? (TransferResult(), url) : try await follow(url, method: .head, range: nil, sink: nil)
        if !rangeOnly {
            // What the HEAD leaves to a ranged GET is the core's decision.
            let answered = head.curlCode == 0 ? head.head : nil
            var size: Int64?
            if let h = answered, (200...299).contains(h.status) {
                size = try lengthOrThrow(h, url: headURL)
                fromHead = resource(finalURL: headURL, head: h, size: size, ranges: h.first("accept-ranges")?.lowercased() == "bytes",
                                    method: "head")
            }
            if let h = answered, h.status == 304, !conditions.isEmpty { return notModified(h, finalURL: headURL) }
            // No head with no libcurl error: nothing came back, as an empty reply.
            let failure = answered == nil && head.curlCode != 0 ? CurlErrors.error(for: head, url: headURL) : nil
            let kind = answered == nil ? failure?.failure.kind ?? .network(.emptyReply) : nil
            switch ProbePhase.afterHead(status: answered?.status, failure: kind, size: size,
                                        acceptsRanges: fromHead?.acceptsRanges ?? false) {
            case .enough: return try checked(fromHead!)
            case .askRangedGet: break
            case .fail:
                if let failure { throw failure }
                throw HTTPFields.httpStatusError(answered!.status, url: headURL, head: answered)
            }
        }

        let (probe, finalURL) = try await follow(url, method: .get, range: ByteRange(0, 1), sink: HeadersOnlySink())
        return try judgeRangedAnswer(probe, finalURL: finalURL, fromHead: fromHead, method: "range-get")
    }

    /// What a ranged `GET` from byte 0 said, judged from its whole result.
    private func judgeRangedAnswer(_ probe: TransferResult, finalURL: String, fromHead: RemoteResource?,
                                   method: String) throws(DownloadError) -> RemoteResource {
        guard let h = probe.head, probe.curlCode == 0 || probe.stoppedBySink else {
            throw CurlErrors.error(for: probe, url: finalURL)
        }
        switch h.status {
        case 304 where !conditions.isEmpty:
            return notModified(h, finalURL: finalURL)
        case 206:
            let values = h.all("content-range")
            guard values.count == 1, let parsed = HTTPFields.contentRange(values[0]) else {
                throw DownloadError(.protocolViolation, "\(redactedURL(finalURL)): 206 without a valid Content-Range (\(values.first ?? "none"))")
            }
            switch parsed {
            case .range(let got, let total):
                guard got.lowerBound == 0 else {
                    throw DownloadError(.protocolViolation, "\(redactedURL(finalURL)): asked for byte 0, got Content-Range \(values[0])")
                }
                // A HEAD length that disagrees with the 206 total is not trusted.
                return try checked(resource(finalURL: finalURL, head: h, size: total, ranges: total != nil, method: method))
            case .unsatisfied(let total):
                return try checked(resource(finalURL: finalURL, head: h, size: total, ranges: true, method: method))
            }
        case 200:
            let length = try lengthOrThrow(h, url: finalURL)
            return try checked(resource(finalURL: finalURL, head: h, size: length ?? fromHead?.size, ranges: false, method: method))
        case 416:
            if let value = h.first("content-range"), case .unsatisfied(let total)? = HTTPFields.contentRange(value), total == 0 {
                return try checked(resource(finalURL: finalURL, head: h, size: 0, ranges: true, method: method))
            }
            throw HTTPFields.httpStatusError(416, url: finalURL, head: h)
        default:
            throw HTTPFields.httpStatusError(h.status, url: finalURL, head: h)
        }
    }

    /// The GET-first probe: the first segment's `GET` (`range`, from byte 0; open-ended when its
    /// upper bound is `Int64.max`), whose head tells the size, validators and range support, and
    /// whose body is not thrown away: it comes back open, for the download to adopt. Redirects are
    /// followed as by ``run(rangeOnly:)``. A response without body bytes (a redirect, an error, an
    /// empty file) is judged whole, as the ranged probe's is.
    ///
    /// A `416` is asked again once, for what exists (``rangeAfterRefusal(_:of:)``): some servers
    /// (httpbin) refuse a first range longer than a small file, and S3 refuses any range of an
    /// empty object.
    func runGetFirst(range first: ByteRange) async throws(DownloadError) -> (RemoteResource, OpenProbe?) {
        let url = policy.url
        var current = url
        var visited: Set<String> = [url]
        var hops = 0
        var range: ByteRange? = first
        var askedAgain = false
        while true {
            var request = policy.request(current, method: .get, range: range)
            if options.integrity.useServerDigests { request.headers.append(DigestFields.wantReprDigest) }
            request.headers += conditions
            request.conditional = !conditions.isEmpty
            request.wholeBodyEndsDownload = true
            request.http2 = options.http2 != .never  // the probe may be the whole file
            options.logger.debug("probe request", metadata: ["method": "get", "url": "\(redactedURL(current))",
                                                             "range": "\(range.map(Self.rangeText) ?? "none")"])
            // A 206 brings at most the range; a 200 brings the whole file while the partial file is
            // created (milliseconds): beyond 8 MiB held, the stream is asked for again.
            let sink = OpenBodySink(limit: Int(max(min(range?.count ?? .max, 64 << 20), 8 << 20)))
            // The slot is taken before the probe's clock starts: a wait for the host is not the
            // server's slowness. The transfer holds it until its body ends (when adopted, as the
            // download's first transfer).
            guard let hold = await connector.hold(for: request) else {
                throw DownloadError(.interrupted, "interrupted while probing \(redactedURL(url))")
            }
            let connector = self.connector
            let slotRequest = request
            // The transfer's task, for the timeout to cancel (a timeout before it is known leaves
            // the cancellation here for it).
            let handle = NIOLockedValueBox<(task: Task<TransferResult, Never>?, cancel: Bool)>((nil, false))
            // Timed by the transport thread from when libcurl has the request: a wait at the
            // batch's gate is not the server's slowness either.
            let giveUp: @Sendable () -> Void = {
                guard sink.giveUpWaitingForHead() else { return }
                handle.withLockedValue { handle in
                    handle.cancel = true
                    return handle.task
                }?.cancel()
            }
            let task = Task {
                let result = await connector.transport.perform(request, sink: sink, ticket: connector.ticket,
                                                               headTimeout: (timeout, giveUp))
                connector.release(hold, for: slotRequest, result: result)
                sink.ended()
                return result
            }
            if handle.withLockedValue({ handle in
                handle.task = task
                return handle.cancel
            }) { task.cancel() }
            let head = await withTaskCancellationHandler { await sink.head() } onCancel: { task.cancel() }
            if let head, head.status == 200 || head.status == 206, !sink.timedOut {
                do {
                    return try opened(head, sink: sink, task: task, requested: range ?? ByteRange(0, .max), finalURL: current)
                } catch {
                    sink.discard()
                    task.cancel()
                    throw error
                }
            }
            let result = await task.value
            if sink.timedOut {
                throw DownloadError(.network, "\(redactedURL(current)): no response within \(formatSeconds(timeout.seconds)) s",
                                    kind: .network(.timeout))
            }
            if result.cancelled { throw DownloadError(.interrupted, "interrupted while probing \(redactedURL(url))") }
            if let next = try nextHop(after: result, from: current, of: url, visited: &visited, hops: &hops) {
                current = next
                continue
            }
            if !askedAgain, let requested = range, let refused = result.head, refused.status == 416,
               let again = Self.rangeAfterRefusal(refused, of: requested) {
                options.logger.debug("probe range refused: asking for what exists", metadata: [
                    "url": "\(redactedURL(current))", "content-range": "\(refused.first("content-range") ?? "none")"])
                askedAgain = true
                range = again.range
                continue
            }
            return (try judgeRangedAnswer(result, finalURL: current, fromHead: nil, method: "get"), nil)
        }
    }

    /// What to ask for after a `416` to the first range `requested`, from byte 0: the file's bytes
    /// up to the range's end when the `416` names a size (`bytes */N`, N > 0: a server that
    /// refuses a range reaching past a short file's end); the whole resource, unranged, when it
    /// names none (S3 and moto answer any range of an empty object so). `nil`: nothing to ask
    /// again (an empty file, which the `416` itself describes, or a range the server should have
    /// served).
    static func rangeAfterRefusal(_ head: ResponseHead, of requested: ByteRange) -> AskAgain? {
        let values = head.all("content-range")
        guard !values.isEmpty else { return .unranged }
        guard values.count == 1, case .unsatisfied(let total)? = HTTPFields.contentRange(values[0]), total > 0,
              requested.lowerBound == 0, total < requested.upperBound else { return nil }
        return .range(ByteRange(0, total))
    }

    /// The request that follows a refused first range.
    enum AskAgain: Equatable {
        /// No `Range` field: the whole resource.
        case unranged
        /// A shorter range, from byte 0.
        case range(ByteRange)

        var range: ByteRange? {
            if case .range(let range) = self { return range }
            return nil
        }
    }

    private static func rangeText(_ range: ByteRange) -> String {
        "\(range.lowerBound)-\(range.upperBound == Int64.max ? "" : String(range.upperBound - 1))"
    }

    /// The resource a successful head describes, with its body open for adoption.
    private func opened(_ head: ResponseHead, sink: OpenBodySink, task: Task<TransferResult, Never>, requested: ByteRange,
                        finalURL: String) throws(DownloadError) -> (RemoteResource, OpenProbe?) {
        // Refused before the body is held, so that no other connection starts for a fault
        // that cannot clear.
        if let error = HTTPFields.codingRefusal(head, url: redactedURL(finalURL)) { throw error }
        if head.status == 200 {
            let length = try lengthOrThrow(head, url: finalURL)
            let found = try checked(resource(finalURL: finalURL, head: head, size: length, ranges: false, method: "get"))
            return (found, OpenProbe(sink: sink, task: task, range: nil))
        }
        let values = head.all("content-range")
        guard values.count == 1, case .range(let got, let total)? = HTTPFields.contentRange(values[0]), got.lowerBound == 0,
              got.upperBound <= requested.upperBound else {
            throw DownloadError(.protocolViolation,
                "\(redactedURL(finalURL)): asked for bytes from 0, got Content-Range \(values.first ?? "none")", kind: .protocolFault(.wrongRange))
        }
        // Checked before the body is held: libcurl would otherwise finish reading it by the wrong
        // count and hand the connection, with the bytes left on it, to another transfer.
        if let error = HTTPFields.lengthDisagreement(head, range: got, contentRange: values[0], url: redactedURL(finalURL)) {
            throw error
        }
        let found = try checked(resource(finalURL: finalURL, head: head, size: total, ranges: total != nil, method: "get"))
        return (found, OpenProbe(sink: sink, task: task, range: got))
    }

    /// The answer `304 Not Modified` to a conditional request: the file kept is current.
    private func notModified(_ head: ResponseHead, finalURL: String) -> RemoteResource {
        var found = RemoteResource(url: policy.url, finalURL: finalURL, size: nil, acceptsRanges: false, etag: head.first("etag"),
                                   lastModified: head.first("last-modified"), contentType: nil, contentDisposition: nil,
                                   probeMethod: "conditional", date: head.first("date"))
        found.notModified = true
        return found
    }

    /// Applies the size limit before anything is allocated.
    private func checked(_ resource: RemoteResource) throws(DownloadError) -> RemoteResource {
        if let limit = options.maximumSize, let size = resource.size, size > limit {
            throw DownloadError(.sizeLimit, "\(redactedURL(resource.url)): \(size) bytes is over the limit of \(limit) bytes",
                                remedy: .raiseMaximumSize)
        }
        return resource
    }

    private func lengthOrThrow(_ head: ResponseHead, url: String) throws(DownloadError) -> Int64? {
        switch HTTPFields.contentLength(head.all("content-length")) {
        case .success(let n): return n
        case .failure(let e): throw DownloadError(.protocolViolation, "\(redactedURL(url)): \(e.message)")
        }
    }

    private func resource(finalURL: String, head: ResponseHead, size: Int64?, ranges: Bool, method: String) -> RemoteResource {
        var found = RemoteResource(url: policy.url, finalURL: finalURL, size: size, acceptsRanges: ranges,
                                   etag: head.first("etag"), lastModified: head.first("last-modified"),
                                   contentType: head.first("content-type"), contentDisposition: head.first("content-disposition"),
                                   probeMethod: method, date: head.first("date"),
                                   digests: options.integrity.useServerDigests ? DigestFields.digests(in: head, wholeBody: Self.isWholeBody(head)) : [])
        if options.mirrors.useLinks { found.mirrors = MirrorLinks.duplicates(in: head.all("link"), base: finalURL) }
        return found
    }

    /// Whether a response is (or, to a `HEAD`, describes) the whole file as stored: a `200`
    /// without a content coding. Only then is its `Content-Digest` the file's.
    static func isWholeBody(_ head: ResponseHead) -> Bool {
        guard head.status == 200 else { return false }
        guard let encoding = head.first("content-encoding") else { return true }
        return encoding.trimmingSpaces().lowercased() == "identity"
    }
}
