import Foundation
import Logging
import Splitfetch

/// The commands run when a download finishes (`--on-complete`, `--on-error`), set only in the
/// daemon's own configuration. A hook is the command's words (split at spaces; no shell ever
/// reads them), run directly with the download's details in environment variables, never in
/// its arguments: `SPLITFETCH_ID`, `SPLITFETCH_URL`, `SPLITFETCH_PATH`, `SPLITFETCH_SIZE`,
/// `SPLITFETCH_SHA256` (when computed), `SPLITFETCH_STATUS` (`complete` or `error`),
/// `SPLITFETCH_ERROR_CODE`, `SPLITFETCH_ERROR_MESSAGE`. Its standard streams go nowhere. One
/// that runs longer than the timeout is terminated (SIGTERM, then SIGKILL 5 s later).
public struct Hooks: Sendable {
    public var onComplete: [String]?
    public var onError: [String]?
    public var timeout: Duration

    public init(onComplete: String? = nil, onError: String? = nil, timeout: Duration = .seconds(60)) {
        self.onComplete = onComplete.map(Self.words).flatMap { $0.isEmpty ? nil : $0 }
        self.onError = onError.map(Self.words).flatMap { $0.isEmpty ? nil : $0 }
        self.timeout = timeout
    }

    static func words(_ command: String) -> [String] { command.split(separator: " ").map(String.init) }

    /// The command for a job that ended in `state`, if one is set.
    func command(for state: DownloadState) -> [String]? {
        switch state {
        case .complete: onComplete
        case .failed: onError
        default: nil
        }
    }

    /// The environment a hook gets for `job`: the daemon's own, with the download's details.
    static func environment(for job: Job) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: Secret.environmentVariable)
        environment["SPLITFETCH_ID"] = job.gid
        environment["SPLITFETCH_URL"] = redactedURL(job.uris.first ?? "")
        environment["SPLITFETCH_PATH"] = job.destination
        environment["SPLITFETCH_SIZE"] = job.totalLength.map(String.init) ?? ""
        environment["SPLITFETCH_SHA256"] = job.sha256 ?? ""
        environment["SPLITFETCH_STATUS"] = job.state == .complete ? "complete" : "error"
        environment["SPLITFETCH_ERROR_CODE"] = job.errorCode ?? ""
        environment["SPLITFETCH_ERROR_MESSAGE"] = job.errorMessage ?? ""
        return environment
    }

    /// Runs `command` for `job` and returns when it has exited or been terminated.
    static func run(_ command: [String], for job: Job, timeout: Duration, logger: Logger) async {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.environment = environment(for: job)
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let ended = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { ended.continuation.yield($0.terminationStatus) }
        do {
            try process.run()
        } catch {
            logger.error("a hook could not start", metadata: ["gid": "\(job.gid)", "command": "\(command[0])", "error": "\(error)"])
            return
        }
        let watchdog = Task {
            try await Task.sleep(for: timeout)
            logger.warning("a hook ran past its timeout: terminated", metadata: ["gid": "\(job.gid)", "command": "\(command[0])"])
            process.terminate()
            try await Task.sleep(for: .seconds(5))
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        var iterator = ended.stream.makeAsyncIterator()
        let status = await iterator.next()
        watchdog.cancel()
        if let status, status != 0 {
            logger.warning("a hook exited with a failure", metadata: ["gid": "\(job.gid)", "command": "\(command[0])", "status": "\(status)"])
        }
    }
}
