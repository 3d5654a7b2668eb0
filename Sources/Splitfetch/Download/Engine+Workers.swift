import SegmentPlanning
import Synchronization

extension Engine {
    /// One connection: take a range, fetch it, repeat; retry failures with backoff.
    func segmentWorker(_ counters: WorkerCounters, resource: RemoteResource, ifRange: String?, total: Int64,
                       file: OutputFile, table: SharedSegmentTable, crew: Crew) async throws {
        let url = resource.finalURL
        var lastRate: Double?
        var failures = 0
        defer {
            counters.set(.done)
            crew.idle.wakeAll()
        }
        while true {
            try Task.checkCancellation()
            let generation = crew.idle.generation
            let t = table.now()
            let assignment = table.withLock { $0.assign(transfer: counters.id, now: t, rate: lastRate) }
            guard let assignment else {
                let (complete, anyActive) = table.withLock { ($0.isComplete, !$0.activeSegments.isEmpty) }
                if complete || !anyActive && table.withLock({ $0.segments.allSatisfy { $0.remaining == 0 } }) { return }
                counters.set(.idle)
                await crew.idle.wait(since: generation, timeout: .milliseconds(100))
                continue
            }
            counters.set(.receiving)
            counters.requests.wrappingAdd(1, ordering: .relaxed)
            let sink = SegmentSink(table: table, file: file, counters: counters, segment: assignment.segment,
                                   requested: assignment.range, total: total, url: url,
                                   etag: resource.etag, lastModified: resource.lastModified)
            var request = policy.request(url, range: assignment.range)
            if let ifRange { request.headers.append("If-Range: \(ifRange)") }
            if let stalled = assignment.stalledOwner { crew.abortTransfer(of: stalled) }
            let began = clock.now
            // The transfer runs in a task of its own so a worker that takes over this stalled
            // segment can stop it at once, instead of waiting for libcurl's low-speed timeout.
            let transport = self.transport
            let transfer = Task { await transport.perform(request, sink: sink) }
            crew.register(worker: counters.id, transfer: transfer)
            let result = await withTaskCancellationHandler { await transfer.value } onCancel: { transfer.cancel() }
            crew.unregister(worker: counters.id)
            let (complete, written) = table.withLock { t -> (Bool, Int64) in
                t.release(segment: assignment.segment)
                let s = t.segments[assignment.segment]
                return (s.isComplete, s.written - assignment.range.lowerBound)
            }
            crew.idle.wakeAll()
            let elapsed = (clock.now - began).seconds
            if elapsed > 0.2 && written > 0 { lastRate = Double(written) / elapsed }
            if result.cancelled {
                if Task.isCancelled { throw CancellationError() }
                continue  // stopped because another worker took the stalled remainder
            }

            guard let error = segmentError(result, sink: sink, complete: complete, requested: assignment.range, url: url) else {
                failures = 0
                continue
            }
            if error.observedTotal != nil && crew.mayRestartOnSizeMismatch && table.withLock({ $0.writtenBytes == 0 }) {
                throw SizeMismatch(observed: error.observedTotal!)
            }
            // The server refuses more connections: this one leaves, the others carry on.
            if error.httpStatus == 503 || error.httpStatus == 429, table.withLock({ !$0.activeSegments.isEmpty }),
               let remaining = crew.leave() {
                emit(.connectionsReduced(to: remaining, reason: error.message))
                return
            }
            guard error.isTransient else { throw error }
            failures = written > 0 ? 1 : failures + 1
            if failures > options.retries {
                throw DownloadError(error.code, "\(error.message) (gave up after \(options.retries) retries)",
                                    httpStatus: error.httpStatus)
            }
            counters.retries.wrappingAdd(1, ordering: .relaxed)
            let delay = retryDelay(attempt: failures, head: result.head)
            emit(.retrying(connection: counters.id, error: error, delay: delay))
            counters.set(.waitingToRetry)
            try await Task.sleep(for: .milliseconds(Int(delay * 1000)))
        }
    }

    /// The error of a finished segment transfer, or `nil` when it did its job (the segment is
    /// complete, or the transfer stopped at a split point).
    private func segmentError(_ result: TransferResult, sink: SegmentSink, complete: Bool, requested: ByteRange,
                              url: String) -> DownloadError? {
        if let error = result.sinkError { return error }
        if result.stoppedBySink { return nil }
        if result.curlCode != 0 { return CurlErrors.error(for: result, url: url) }
        guard let head = result.head else {
            return DownloadError(.protocolViolation, "\(redactedURL(url)): no response", isTransient: true)
        }
        if !sink.accepted, let error = HTTPFields.validateRangeResponse(head, requested: requested, total: sink.total, url: url,
                                                                        etag: sink.etag, lastModified: sink.lastModified) {
            return error
        }
        if !complete {
            return DownloadError(.protocolViolation,
                "\(redactedURL(url)): body ended at byte \(sink.offset) of range \(requested.lowerBound)-\(requested.upperBound - 1)",
                isTransient: true)
        }
        return nil
    }

    /// Fetches the whole file on one connection (no range support, or no length); retries start
    /// over from byte 0. Returns the size written.
    func runStream(resource: RemoteResource, file: OutputFile, counters: WorkerCounters) async throws -> Int64 {
        var failures = 0
        let url = resource.finalURL
        while true {
            try Task.checkCancellation()
            counters.set(.receiving)
            counters.requests.wrappingAdd(1, ordering: .relaxed)
            counters.bytes.store(0, ordering: .relaxed)
            let sink = StreamSink(file: file, counters: counters, expectedSize: resource.size, url: url,
                                  maximumSize: options.maximumSize)
            let result = await transport.perform(policy.request(url), sink: sink)
            if result.cancelled { throw CancellationError() }
            var failure: DownloadError?
            if let e = result.sinkError {
                failure = e
            } else if result.curlCode != 0 {
                failure = CurlErrors.error(for: result, url: url)
            } else if let head = result.head {
                if let e = StreamSink.validate(head, expectedSize: resource.size, url: url) {
                    failure = e
                } else if let size = resource.size, sink.offset != size {
                    failure = DownloadError(.protocolViolation, "\(redactedURL(url)): body ended after \(sink.offset) of \(size) bytes", isTransient: true)
                }
            } else {
                failure = DownloadError(.protocolViolation, "\(redactedURL(url)): no response", isTransient: true)
            }
            guard let error = failure else {
                if resource.size == nil { try file.truncate(to: sink.offset) }
                counters.set(.done)
                return sink.offset
            }
            guard error.isTransient else { throw error }
            failures += 1
            if failures > options.retries {
                throw DownloadError(error.code, "\(error.message) (gave up after \(options.retries) retries)", httpStatus: error.httpStatus)
            }
            counters.retries.wrappingAdd(1, ordering: .relaxed)
            let delay = retryDelay(attempt: failures, head: result.head)
            emit(.retrying(connection: counters.id, error: error, delay: delay))
            counters.set(.waitingToRetry)
            try await Task.sleep(for: .milliseconds(Int(delay * 1000)))
        }
    }
}

/// The workers of one download, how many are still running, and their transfers in flight.
final class Crew: Sendable {
    private let live: Atomic<Int>
    private let transfers = Mutex<[Int: Task<TransferResult, Never>]>([:])
    /// Whether a size disagreement may restart a fresh download (nothing written yet).
    let mayRestartOnSizeMismatch: Bool
    /// Where workers with nothing to do wait for the others.
    let idle = IdleWaiters()

    init(size: Int, mayRestartOnSizeMismatch: Bool) {
        live = Atomic(size)
        self.mayRestartOnSizeMismatch = mayRestartOnSizeMismatch
    }

    func register(worker: Int, transfer: Task<TransferResult, Never>) {
        transfers.withLock { $0[worker] = transfer }
    }

    func unregister(worker: Int) {
        _ = transfers.withLock { $0.removeValue(forKey: worker) }
    }

    /// Stops the transfer a worker is waiting on (its segment was taken over).
    func abortTransfer(of worker: Int) {
        transfers.withLock { $0[worker] }?.cancel()
    }

    /// Lets a worker leave unless it is the last; returns how many remain, or `nil` if it must stay.
    func leave() -> Int? {
        var current = live.load(ordering: .relaxed)
        while current > 1 {
            let (exchanged, original) = live.compareExchange(expected: current, desired: current - 1, ordering: .relaxed)
            if exchanged { return current - 1 }
            current = original
        }
        return nil
    }
}

/// A `206` named a different total than the probe: the download restarts with a ranged probe.
struct SizeMismatch: Error {
    var observed: Int64
}
