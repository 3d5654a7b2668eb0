import DownloadCore

/// What went wrong in a download, kept as it happens, and the one error its end reports.
///
/// The driver records each transfer's and each checkpoint's error; when the machine fails the
/// download, ``error(for:finalCheckpointFailed:at:)`` picks the error that explains it and says
/// what was kept for a rerun.
struct FailureRecord {
    /// Where the download stood when it ended, for the message.
    struct Standing {
        /// The URL given, credentials and query secrets removed.
        var url: String
        /// Where requests went at the end, redacted the same way.
        var finalURL: String
        /// Segmented with a named partial file: a rerun resumes it.
        var resumable: Bool
        /// Written share of the file, as text (`42.1`).
        var percent: String
        var partialPath: String
        var manifestPath: String
    }

    var transfers: [DownloadMachine.TransferID: DownloadError] = [:]
    var checkpoints: [Int: DownloadError] = [:]
    /// Why the last source to be dropped was (a mirror's failed identity check).
    var lastSourceError: DownloadError?
    /// The download's time limit, for the message when it passes.
    var timeLimit: Duration?

    /// The error of `transfer`; a transfer that ended without one ended before its range did.
    func error(of transfer: DownloadMachine.TransferID, finalURL: String) -> DownloadError {
        transfers[transfer] ?? DownloadError(.protocolViolation, "\(finalURL): the response ended before its range did",
                                             kind: .protocolFault(.lengthMismatch))
    }

    /// The error that ends the download: the cause of `failure`, or the failed final checkpoint's
    /// error when saving the progress failed too, with what was kept for a rerun.
    func error(for failure: DownloadMachine.Failure, finalCheckpointFailed: Bool, at standing: Standing) -> DownloadError {
        var error: DownloadError
        switch failure {
        case .cancelled:
            if standing.resumable {
                return DownloadError(.interrupted, "paused at \(standing.percent)%, kept in \(standing.partialPath)", remedy: .resume)
            }
            return DownloadError(.interrupted, "\(standing.url): interrupted")
        case .transfer(let id, let gaveUpAfter):
            error = self.error(of: id, finalURL: standing.finalURL)
            if let retries = gaveUpAfter { error = error.givenUp(after: retries) }
        case .checkpoint(let id):
            error = checkpoints[id] ?? DownloadError(.fileIO, "\(standing.manifestPath): checkpoint failed")
        case .timedOut:
            let limit = timeLimit.map { " of \(formatSeconds($0.seconds)) s" } ?? ""
            error = DownloadError(.timedOut, "\(standing.url): the time limit\(limit) passed")
        case .noSourceLeft:
            error = lastSourceError ?? DownloadError(.network, "\(standing.url): every source failed")
        case .incomplete:
            error = DownloadError(.protocolViolation, "\(standing.url): transfers ended with bytes missing")
        }
        if finalCheckpointFailed, error.code != .fileIO, let saving = checkpoints.max(by: { $0.key < $1.key })?.value {
            return saving
        }
        if standing.resumable && error.code != .remoteChanged && error.code != .interrupted {
            error.message += "; \(standing.percent)% kept in \(standing.partialPath)"
            if error.remedy == nil { error.remedy = .resume }
        }
        return error
    }
}
