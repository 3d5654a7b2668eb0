import Synchronization

/// Live counters of one connection, updated by the transport thread and the worker task and read
/// by the progress ticker.
final class ConnectionCounters: Sendable {
    let id: Int
    /// The source it fetches from, when the download has mirrors.
    let source: Int?
    let bytes = Atomic<Int64>(0)
    let received = Atomic<Int64>(0)
    let requests = Atomic<Int>(0)
    let retries = Atomic<Int>(0)
    let state = Atomic<Int>(ConnectionProgress.State.idle.rawValue)
    /// Whether its current response came over HTTP/2: a stream of a connection that other
    /// transfers (other files) may share; and whether any did.
    private let http2 = Atomic<Bool>(false)
    private let anyHTTP2 = Atomic<Bool>(false)

    /// A response began on this connection, over HTTP/2 or not.
    func responded(http2 isHTTP2: Bool) {
        http2.store(isHTTP2, ordering: .relaxed)
        if isHTTP2 { anyHTTP2.store(true, ordering: .relaxed) }
    }
    /// Whether its last response came over HTTP/2.
    var lastAnswerOverHTTP2: Bool { http2.load(ordering: .relaxed) }
    /// The range being fetched, for progress (`-1`: none). Two atomics: a reader may see one
    /// range's start with the next one's end for a moment, which progress can afford.
    private let rangeStart = Atomic<Int64>(-1)
    private let rangeEnd = Atomic<Int64>(-1)

    init(id: Int, source: Int? = nil) {
        self.id = id
        self.source = source
    }

    func set(_ s: ConnectionProgress.State) {
        state.store(s.rawValue, ordering: .relaxed)
        if s != .receiving { setRange(nil) }
    }

    func setRange(_ range: Range<Int64>?) {
        rangeStart.store(range?.lowerBound ?? -1, ordering: .relaxed)
        rangeEnd.store(range?.upperBound ?? -1, ordering: .relaxed)
    }

    var progress: ConnectionProgress {
        let (start, end) = (rangeStart.load(ordering: .relaxed), rangeEnd.load(ordering: .relaxed))
        return ConnectionProgress(id: id, state: ConnectionProgress.State(rawValue: state.load(ordering: .relaxed)) ?? .idle,
                                  bytes: bytes.load(ordering: .relaxed), range: start >= 0 && end >= start ? start..<end : nil,
                                  source: source, http2: http2.load(ordering: .relaxed) ? true : nil)
    }

    var statistics: DownloadStatistics.Connection {
        var connection = DownloadStatistics.Connection(id: id, bytes: bytes.load(ordering: .relaxed), requests: requests.load(ordering: .relaxed),
                                                       retries: retries.load(ordering: .relaxed), source: source ?? 0)
        connection.http2 = anyHTTP2.load(ordering: .relaxed) ? true : nil
        return connection
    }
}
