import NIOConcurrencyHelpers
import DownloadCore

/// The download's ``DownloadMachine`` behind a lock, shared by the driver (events) and the
/// transport thread's write callbacks (claims and commits). Every access is a short critical
/// section with no I/O inside; actions are performed after leaving it.
final class SharedMachine: Sendable {
    private let machine: NIOLockedValueBox<DownloadMachine>
    /// When the download started (before its probe): the machine's clock counts from here, so
    /// its deadline is the time limit itself.
    private let origin: ContinuousClock.Instant

    init(_ machine: DownloadMachine, origin: ContinuousClock.Instant = .now) {
        self.machine = NIOLockedValueBox(machine)
        self.origin = origin
    }

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
