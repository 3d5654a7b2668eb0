import DownloadCore
import NIOConcurrencyHelpers

/// Proves that a mirror serves the file being downloaded before it gets a segment: it must
/// answer ranges of the same size (a `206` whose `Content-Range` names the probed total), and
/// the bytes of a few small ranges at seeded random offsets (``IdentitySamples``) must equal the
/// same ranges fetched from the URL probed. ETags cannot show this: they differ between hosts.
///
/// Thread safety: a `Sendable` value; the reference bytes are fetched once, by the first check
/// that needs them, and shared.
struct IdentityCheck: Sendable {
    let connector: Connector
    let policy: RequestPolicy
    let size: Int64
    let samples: [ByteRange]
    /// The URL probed (after redirects): the reference.
    let reference: String
    /// When a failed sample request is asked again: the download's retry policy (its delays and
    /// its table of what is transient), with one retry, so a dead mirror is dropped quickly.
    let retry: RetryPolicy
    /// A slot of the reference's capped host, taken as the checks began, before the download's
    /// own connections took every slot: the reference's samples go on it, and it is given back
    /// when they end. `nil`: they wait for slots as other requests do.
    let referenceSlot: Connector.TakenSlot?
    private let seed: UInt64
    private let referenceBytes: ReferenceBytes

    init(connector: Connector, policy: RequestPolicy, size: Int64, seed: UInt64, reference: String, retry: RetryPolicy,
         referenceSlot: Connector.TakenSlot? = nil) {
        self.connector = connector
        self.referenceSlot = referenceSlot
        self.policy = policy
        self.size = size
        self.reference = reference
        self.seed = seed
        var once = retry
        once.retries = min(1, retry.retries)
        self.retry = once
        samples = IdentitySamples.ranges(size: size, seed: seed)
        referenceBytes = ReferenceBytes()
    }

    /// Checks `mirror`: the URL its requests go to after redirects when it serves the same
    /// bytes, or the error that shows it does not (or could not be asked).
    ///
    /// The mirror's samples are asked while the reference's are (the first check asks those, the
    /// others share them), so a check costs one URL's round trips, not both one after the other.
    func check(_ mirror: String) async -> Result<String, DownloadError> {
        async let asked = fetchAll(mirror)
        let expected: [[UInt8]]
        switch await referenceBytes.value(fetch: {
            defer { if let referenceSlot { connector.giveBack(referenceSlot) } }
            return await fetchAll(reference, slot: referenceSlot)
        }) {
        case .success(let fetched): expected = fetched.bytes
        case .failure(let error):
            // Returning cancels what is still asked of the mirror, and waits for it.
            return .failure(DownloadError(.network, "\(redactedURL(mirror)): not checked, the reference failed: \(error.message)"))
        }
        let got: (bytes: [[UInt8]], finalURL: String)
        switch await asked {
        case .success(let fetched): got = fetched
        case .failure(let error): return .failure(error)
        }
        for (index, range) in samples.enumerated() where got.bytes[index] != expected[index] {
            let first = zip(got.bytes[index], expected[index]).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? 0
            return .failure(DownloadError(.integrity,
                "\(redactedURL(mirror)) serves other bytes than \(redactedURL(reference)) (they differ at byte \(range.lowerBound + Int64(first)))"))
        }
        return .success(got.finalURL)
    }

    /// Every sample of `url`, one request each, asked again as ``retry`` decides; on `slot` while
    /// they go to its host.
    private func fetchAll(_ url: String, slot: Connector.TakenSlot? = nil) async -> Result<(bytes: [[UInt8]], finalURL: String), DownloadError> {
        var bytes: [[UInt8]] = []
        var finalURL = url
        var random = SplitMix64(seed: seed)
        for range in samples {
            var result = await fetch(range, from: finalURL, slot: slot)
            var attempt = 1
            while case .failure(let error) = result, case .retry(let delay) = retry.decide(error.failure, attempt: attempt, random: &random) {
                attempt += 1
                do { try await Task.sleep(for: .seconds(delay)) } catch { break }
                result = await fetch(range, from: finalURL, slot: slot)
            }
            switch result {
            case .success(let (piece, effective)):
                bytes.append(piece)
                finalURL = effective
            case .failure(let error): return .failure(error)
            }
        }
        return .success((bytes, finalURL))
    }

    private func fetch(_ range: ByteRange, from url: String, slot: Connector.TakenSlot?) async -> Result<([UInt8], String), DownloadError> {
        let sink = SampleSink(requested: range, total: size, url: url)
        var request = policy.request(url, range: range)
        request.knownTotal = size  // SFTP names no total with a range: the samples vouch
        let result: TransferResult
        if let slot, Connector.host(of: url) == slot.host {
            result = await connector.performOnTakenSlot(request, sink: sink, slot: slot)
        } else {
            result = await connector.perform(request, sink: sink)
        }
        let effective = result.effectiveURL ?? url
        if let error = sink.error { return .failure(error) }
        if result.cancelled { return .failure(DownloadError(.interrupted, "\(redactedURL(url)): interrupted")) }
        if result.curlCode != 0 { return .failure(CurlErrors.error(for: result, url: effective)) }
        guard let head = result.head, head.status == 206 else {
            let status = result.head?.status ?? 0
            if status >= 300 || status == 0 { return .failure(HTTPFields.httpStatusError(status, url: effective, head: result.head)) }
            return .failure(DownloadError(.protocolViolation, "\(redactedURL(effective)): does not serve ranges (HTTP \(status))"))
        }
        let bytes = sink.bytes
        guard bytes.count == Int(range.count) else {
            return .failure(DownloadError(.protocolViolation, "\(redactedURL(effective)): \(bytes.count) bytes for a range of \(range.count)",
                                          kind: .protocolFault(.lengthMismatch)))
        }
        return .success((bytes, effective))
    }
}

/// The reference's samples, fetched once for every mirror's check.
private actor ReferenceBytes {
    private var task: Task<Result<(bytes: [[UInt8]], finalURL: String), DownloadError>, Never>?

    func value(fetch: @escaping @Sendable () async -> Result<(bytes: [[UInt8]], finalURL: String), DownloadError>)
        async -> Result<(bytes: [[UInt8]], finalURL: String), DownloadError> {
        if let task { return await task.value }
        let made = Task { await fetch() }
        task = made
        return await made.value
    }
}

/// Keeps a sample range's body in memory, once its head shows a `206` for the range asked of a
/// file of the probed size.
///
/// Thread safety: `receive` runs on the transport thread; the owner reads after the transfer
/// ended. A lock guards both (swift-nio's, which ThreadSanitizer sees, as elsewhere).
final class SampleSink: TransferSink, Sendable {
    let requested: ByteRange
    let total: Int64
    let url: String
    private let state = NIOLockedValueBox<(bytes: [UInt8], error: DownloadError?)>(([], nil))

    init(requested: ByteRange, total: Int64, url: String) {
        self.requested = requested
        self.total = total
        self.url = url
    }

    var bytes: [UInt8] { state.withLockedValue { $0.bytes } }
    var error: DownloadError? { state.withLockedValue { $0.error } }

    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
        guard head.status == 206 else {
            guard (200..<300).contains(head.status) else { return .proceed }  // an error page: judged by its status
            let error = DownloadError(.protocolViolation, "\(redactedURL(url)): does not serve ranges (HTTP \(head.status))")
            state.withLockedValue { $0.error = error }
            return .fail(error)
        }
        return state.withLockedValue { state in
            if state.bytes.isEmpty, case .reject(let error) = HTTPFields.checkRangeResponse(head, requested: requested, total: total, url: url) {
                state.error = error
                return .fail(error)
            }
            let room = Int(requested.count) - state.bytes.count
            guard body.count <= room else {
                let error = DownloadError(.protocolViolation, "\(redactedURL(url)): body runs past the range asked for", kind: .protocolFault(.bodyOverrun))
                state.error = error
                return .fail(error)
            }
            state.bytes.append(contentsOf: body)
            return .proceed
        }
    }
}
