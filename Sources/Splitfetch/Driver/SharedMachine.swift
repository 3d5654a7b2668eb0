import NIOConcurrencyHelpers
import DownloadCore

/// The download's ``DownloadMachine`` behind a lock, shared by the driver (events) and the
/// transport thread's write callbacks (claims and commits). Every access is a short critical
/// section with no I/O inside; actions are performed after leaving it.
final class SharedMachine: Sendable {
    private let machine: NIOLockedValueBox<DownloadMachine>
    private let origin = ContinuousClock.now

    init(_ machine: DownloadMachine) { self.machine = NIOLockedValueBox(machine) }

    /// Seconds since the download's driver started: the one clock for every time the machine is given.
    func now() -> Double { (ContinuousClock.now - origin).seconds }

    /// The instant of a machine time, for sleeping until it.
    func instant(at seconds: Double) -> ContinuousClock.Instant {
        origin + .nanoseconds(Int64((seconds * 1e9).rounded(.up)))
    }

    func withLock<R: Sendable>(_ body: (inout DownloadMachine) -> R) -> R {
        machine.withLockedValue { body(&$0) }
    }
}
