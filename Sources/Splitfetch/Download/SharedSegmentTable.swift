import SegmentPlanning
import Synchronization

/// The download's ``SegmentTable`` behind a lock, shared by the worker tasks and the transport
/// thread's write callbacks. Every access is a short critical section with no I/O inside.
final class SharedSegmentTable: Sendable {
    private let table: Mutex<SegmentTable>
    private let origin = ContinuousClock.now

    init(_ table: SegmentTable) { self.table = Mutex(table) }

    /// Seconds since the table was made: the one clock for every time the table is given.
    func now() -> Double { (ContinuousClock.now - origin).seconds }

    func withLock<R: Sendable>(_ body: (inout SegmentTable) -> R) -> R {
        table.withLock { body(&$0) }
    }
}
