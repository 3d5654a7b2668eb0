import Logging
import DownloadCore

/// Transfers: each started transfer gets a sink (a range's or the stream's) and a task on the
/// transport whose outcome comes back as an event; the probe's open body becomes a transfer too.
extension DownloadDriver {
    /// Counts a request on the connection of `start` and makes its sink: a range's, or the
    /// stream's.
    func makeSink(for start: DownloadMachine.TransferStart, sentIfRange: Bool) -> any TransferSink {
        beginReporting()
        let counter = counters[start.connection]
        counter.set(.receiving)
        counter.requests.wrappingAdd(1, ordering: .relaxed)
        counter.setRange(start.range.map { $0.lowerBound..<$0.upperBound })
        if start.isSplit, let range = start.range {
            options.logger.debug("split", metadata: ["connection": "\(start.connection)", "range": "\(range.lowerBound)-\(range.upperBound - 1)"])
            setup.emit(.split(connection: start.connection, range: range.lowerBound..<range.upperBound))
        }
        connectionOf[start.id] = start.connection
        let url = url(ofSource: start.source)
        let target = SinkTarget(machine: shared, transfer: start.id, file: file!, counters: counter, reader: reader,
                                rateLimit: options.rateLimit)
        if let range = start.range {
            // A mirror's validators are its own: its identity check and each 206's total vouch for it.
            let mirror = start.source != 0
            return SegmentSink(target, requested: range, total: shared.withLock { $0.table?.size ?? 0 }, url: url,
                               etag: mirror ? nil : resource.etag, lastModified: mirror ? nil : resource.lastModified,
                               sentIfRange: sentIfRange, startsWriteback: options.durability.syncBeforeRename)
        }
        counter.bytes.store(0, ordering: .relaxed)
        return StreamSink(target, expectedSize: resource.size, url: url, maximumSize: options.maximumSize)
    }

    func begin(_ start: DownloadMachine.TransferStart) {
        var request = setup.policy.request(url(ofSource: start.source), range: start.range)
        request.knownTotal = resource.size
        let ifRange = start.range != nil && start.useIfRange
            ? HTTPFields.ifRangeValue(etag: resource.etag, lastModified: resource.lastModified, date: resource.date) : nil
        if let ifRange { request.headers.append("If-Range: \(ifRange)") }
        let sink = makeSink(for: start, sentIfRange: ifRange != nil)
        // A stream without a range is the whole file in one request; a range keeps a connection,
        // the probe's HTTP/2 one too (``HTTP2Policy/allows(ranged:lastAnswerOverHTTP2:)``). The
        // counters exist from the first sink on.
        request.http2 = options.http2.allows(ranged: start.range != nil, lastAnswerOverHTTP2: counters[start.connection].lastAnswerOverHTTP2)
        let (connector, queue, id, shared, logger) = (setup.connector, queue, start.id, shared, options.logger)
        logger.debug("request", metadata: ["transfer": "\(id)", "connection": "\(start.connection)", "url": "\(redactedURL(request.url))",
                                           "range": "\(start.range.map { "\($0.lowerBound)-\($0.upperBound - 1)" } ?? "all")",
                                           "if-range": "\(ifRange != nil)"])
        transfers[id] = Task {
            // Waiting for a slot of the host (a session's per-host cap), the transfer is queued:
            // not started, so neither stalled nor slow.
            let result = await connector.perform(request, sink: sink) { waiting in
                if waiting { logger.debug("waiting for a slot of the host", metadata: ["transfer": "\(id)"]) }
                let now = shared.now()
                shared.withLock { $0.queued(id, waiting, now: now) }
            }
            let (end, error, length) = TransferOutcome.of(result, sink: sink)
            queue.post(.transferEnded(id, end, error, streamLength: length))
        }
    }

    /// Makes the probe's open body the transfer `start`: its held bytes and the rest go through a
    /// sink like any started transfer's.
    ///
    /// The driver waits for the held bytes to be written (on the I/O queue, not on Swift's
    /// cooperative pool) before it goes on: until then the machine would see the transfer's
    /// segment without progress, and an idle connection could take it over whole from byte 0,
    /// fetching those bytes a second time (seen under ThreadSanitizer when the wait was dropped).
    func adopt(_ start: DownloadMachine.TransferStart) async {
        guard let open else { return }
        let inner = makeSink(for: start, sentIfRange: false)
        await io.run { open.sink.attach(inner) }
    }

    /// Reports the end of the probe's open body as transfer `id`, once it is adopted (or
    /// discarded: then as stopped).
    func watch(_ open: OpenProbe, as id: DownloadMachine.TransferID) {
        let queue = self.queue
        transfers[id] = Task {
            let result = await withTaskCancellationHandler { await open.task.value } onCancel: { open.discard() }
            let inner = await open.sink.settled()
            // After the attach: what the sink said of the bytes held before it counts too.
            let (end, error, length) = TransferOutcome.of(open.sink.adjusted(result), sink: inner)
            queue.post(.transferEnded(id, end, error, streamLength: length))
        }
    }
}
