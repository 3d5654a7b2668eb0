import DownloadCore
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import Splitfetch
import SystemPackage

/// What follows a change of a job's state: its record, its store row, its hooks and webhook.
extension Daemon {
    /// The queue reported a state change: record the download's state as it is now.
    func stateChanged(_ gid: String) {
        // In a fleet, only the jobs this daemon holds are its to record.
        if let fleet, !fleet.holds(gid) { return }
        guard let snapshot = queue.snapshot(gid) else { return }
        // In a fleet a job is removed in the database (an API command); the queue's own
        // `removed` is a download taken off this daemon (the daemon stopping as it adopted a
        // claimed job, say), never the job's end. Recorded, it lost the job: a restart found it
        // removed, never to run again.
        if fleet != nil, snapshot.state == .removed { return }
        let (changed, notification) = state.withLockedValue { state -> (Bool, String?) in
            guard var job = state.jobs[gid], job.state != snapshot.state else { return (false, nil) }
            job.state = snapshot.state
            job.priority = snapshot.priority
            if let total = snapshot.progress?.totalBytes { job.totalLength = total }
            if let done = snapshot.progress?.bytesWritten { job.completedLength = done }
            switch snapshot.state {
            case .complete:
                job.totalLength = snapshot.statistics?.size ?? job.totalLength
                job.completedLength = job.totalLength
                job.sha256 = snapshot.statistics?.digests.first { $0.algorithm == .sha256 }?.hex
                if let path = snapshot.statistics?.path.string { job.destination = path }
                job.validators = snapshot.statistics?.validators
                job.finishedAt = Date().timeIntervalSince1970
            case .failed:
                job.errorCode = snapshot.error?.code.description
                job.errorMessage = snapshot.error?.message
                job.finishedAt = Date().timeIntervalSince1970
            case .removed:
                job.finishedAt = Date().timeIntervalSince1970
            default:
                break
            }
            if hooks.command(for: snapshot.state) != nil { job.hookPending = true }
            if webhook != nil, snapshot.state == .complete || snapshot.state == .failed { job.webhookPending = true }
            state.store(job)
            return (true, Self.notification(for: snapshot.state))
        }
        guard changed else { return }
        writer.persistSoon([gid], whileHeld: fleet != nil)
        if snapshot.state.isFinal {
            queue.forget(gid)
            // In a fleet the job stays held until its end is read back from the database: until
            // then its row still names this daemon, and a claim must not take it again. Its slot
            // is free at once: the next claim goes out while the end is written.
            if let fleet {
                fleet.state.withLockedValue { state in
                    if state.held.contains(gid) { state.ended.insert(gid) }
                }
                fleet.wake()
            }
        }
        if hooks.command(for: snapshot.state) != nil { runHook(gid) }
        if webhook != nil, snapshot.state == .complete || snapshot.state == .failed { sendWebhook(gid) }
        if let notification { notify(Notification(method: notification, gid: gid)) }
    }

    /// Runs a finished job's hook once: the pending mark is cleared and committed first, so a
    /// kill during the hook never runs it again (the hook itself is not killed with the daemon).
    func runHook(_ gid: String) {
        let (hooks, logger) = (hooks, logger)
        Task {
            guard let job = self.job(gid), job.hookPending, let command = hooks.command(for: job.state) else { return }
            do {
                try await self.update(gid) { $0.hookPending = false }
            } catch {
                logger.error("a hook's start could not be recorded; it is not run", metadata: ["gid": "\(gid)", "error": "\(error)"])
                return
            }
            await Hooks.run(command, for: job, timeout: hooks.timeout, logger: logger)
        }
    }

    /// Delivers a finished job's webhook, then records it delivered.
    func sendWebhook(_ gid: String) {
        guard let webhook else { return }
        let logger = logger
        Task {
            guard let job = self.job(gid), job.webhookPending else { return }
            await webhook.deliver(job, logger: logger)
            try? await self.update(gid) { $0.webhookPending = false }
        }
    }

    static func notification(for state: DownloadState) -> String? {
        switch state {
        case .active: "aria2.onDownloadStart"
        case .paused: "aria2.onDownloadPause"
        case .complete: "aria2.onDownloadComplete"
        case .failed: "aria2.onDownloadError"
        case .removed: "aria2.onDownloadStop"
        default: nil
        }
    }

}
