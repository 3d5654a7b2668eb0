import Synchronization

/// Live counters of one connection, updated by the transport thread and the worker task and read
/// by the progress ticker.
final class WorkerCounters: Sendable {
    let id: Int
    let bytes = Atomic<Int64>(0)
    let received = Atomic<Int64>(0)
    let requests = Atomic<Int>(0)
    let retries = Atomic<Int>(0)
    let state = Atomic<Int>(ConnectionProgress.State.idle.rawValue)

    init(id: Int) { self.id = id }

    func set(_ s: ConnectionProgress.State) { state.store(s.rawValue, ordering: .relaxed) }

    var progress: ConnectionProgress {
        ConnectionProgress(id: id, state: ConnectionProgress.State(rawValue: state.load(ordering: .relaxed)) ?? .idle,
                           bytes: bytes.load(ordering: .relaxed))
    }

    var statistics: DownloadStatistics.Connection {
        .init(id: id, bytes: bytes.load(ordering: .relaxed), requests: requests.load(ordering: .relaxed),
              retries: retries.load(ordering: .relaxed))
    }
}
