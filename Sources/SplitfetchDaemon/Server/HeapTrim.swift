import CShims
import Dispatch
import NIOConcurrencyHelpers

/// Gives the heap's free pages back to the system after a large request.
///
/// A request of many calls (a `system.multicall` of 1,000 adds) makes as many short-lived values,
/// freed among the jobs' long-lived records: the allocator keeps the pages they leave free, and
/// the daemon's resident memory stays that much higher (2.2 MiB after 20,000 adds; measured in
/// `Benchmarks/JOURNAL.md`, "The daemon"). The trim walks the heap (a few milliseconds), on a
/// queue of its own, never on the cooperative pool, and one at a time: requests that come while
/// one is due share it.
enum HeapTrim {
    /// The smallest request body that is followed by a trim.
    static let requestBytes = 64 * 1024

    private static let queue = DispatchQueue(label: "splitfetch.heap-trim", qos: .utility)
    private static let due = NIOLockedValueBox(false)

    static func soon() {
        let first = due.withLockedValue { due in
            defer { due = true }
            return !due
        }
        guard first else { return }
        queue.async {
            due.withLockedValue { $0 = false }
            sf_trim_heap()
        }
    }
}
