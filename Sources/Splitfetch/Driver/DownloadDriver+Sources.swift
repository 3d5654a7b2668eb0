import Logging
import DownloadCore

/// Mirrors: each proves it serves the same bytes before the machine gives it a range; a dropped
/// source is reported with its reason; the statistics give each source's share.
extension DownloadDriver {
    /// Where requests to `source` go.
    func url(ofSource source: Int) -> String {
        source == 0 ? resource.finalURL : sourceURLs[source]
    }

    /// Starts every mirror's identity check, in tasks of their own, once the machine has decided
    /// on a segmented download (a stream takes nothing from mirrors: the machine dropped them).
    func startIdentityChecks() {
        guard sourceURLs.count > 1, case .segmented(let size)? = mode else { return }
        // Taken now, before this download's connections start: under a per-host cap they would
        // take every slot of the reference's host, and the samples would wait until a range ended.
        let slot = setup.connector.takeFreeSlot(for: resource.finalURL)
        let check = IdentityCheck(connector: setup.connector, policy: setup.policy, size: size,
                                  seed: UInt64.random(in: .min ... .max), reference: resource.finalURL, retry: setup.retryPolicy,
                                  referenceSlot: slot)
        let (queue, logger) = (queue, options.logger)
        for source in sourceURLs.indices.dropFirst() {
            let mirror = sourceURLs[source]
            identityChecks.append(Task {
                let result = await check.check(mirror)
                logger.debug("identity check", metadata: ["mirror": "\(redactedURL(mirror))", "passed": "\((try? result.get()) != nil)"])
                queue.post(.sourceChecked(source, result))
            })
        }
    }

    func sourceChecked(_ source: Int, _ result: Result<String, DownloadError>, now: Double) -> [DownloadMachine.Action] {
        switch result {
        case .success(let finalURL):
            sourceURLs[source] = finalURL
            return shared.withLock { $0.sourceChecked(source, passed: true, now: now) }
        case .failure(let error):
            sourceErrors[source] = error
            return shared.withLock { $0.sourceChecked(source, passed: false, now: now) }
        }
    }

    /// Reports a dropped source: an event and a warning in the log, with the error that shows why.
    func sourceDropped(_ source: Int, transfer: DownloadMachine.TransferID?) {
        let name = redactedURL(sourceURLs[source])
        let unused: DownloadError
        if case .stream? = mode {
            unused = DownloadError(.usage, "\(name): not used, the file comes as one stream from the first URL (it has no ranges or no length)")
        } else {
            unused = DownloadError(.remoteChanged, "\(name): not checked again after the file changed size")
        }
        var reason = transfer.map { error(of: $0) } ?? sourceErrors[source] ?? unused
        if transfer != nil { reason.message += " (source dropped: it keeps failing)" }
        sourceErrors[source] = reason
        failures.lastSourceError = reason
        options.logger.warning("source dropped", metadata: ["source": "\(name)", "reason": "\(reason.message)"])
        setup.emit(.sourceDropped(url: name, error: reason))
    }

    /// Each source's figures, when there were mirrors.
    func sourceStatistics() -> [DownloadStatistics.Source] {
        guard sourceURLs.count > 1 else { return [] }
        var sources = sourceURLs.indices.map { index in
            DownloadStatistics.Source(url: redactedURL(index == 0 ? setup.url : sourceURLs[index]), bytes: 0, requests: 0, errors: 0,
                                      dropped: sourceErrors[index]?.message)
        }
        let owners = counters.map { $0.source ?? 0 }
        for (counter, source) in zip(counters, owners) {
            let figures = counter.statistics
            sources[source].bytes += figures.bytes
            sources[source].requests += figures.requests
            sources[source].errors += figures.retries
        }
        for (source, _) in sourceErrors where owners.contains(source) {
            sources[source].errors += 1  // the failure that dropped it was not retried
        }
        return sources
    }
}
