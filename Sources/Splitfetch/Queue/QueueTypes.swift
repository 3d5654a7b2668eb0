public import SystemPackage

/// A queued download's state.
///
/// A struct with a fixed set of values, so that a value added later does not break a `switch`
/// (switch with a `default`). Its JSON form is its name.
public struct DownloadState: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// In the queue, waiting for a slot.
    public static let waiting = DownloadState(rawValue: "waiting")
    /// Started: probing, transferring, or syncing its file.
    public static let active = DownloadState(rawValue: "active")
    /// Not to start until resumed; its data is kept.
    public static let paused = DownloadState(rawValue: "paused")
    /// The file is under its final name.
    public static let complete = DownloadState(rawValue: "complete")
    /// It failed (``DownloadSnapshot/error``); it may be resumed, which tries again.
    public static let failed = DownloadState(rawValue: "failed")
    /// Taken out of the queue.
    public static let removed = DownloadState(rawValue: "removed")

    /// Nothing more happens to it unless a caller resumes it: complete, failed or removed.
    public var isFinal: Bool { self == .complete || self == .failed || self == .removed }
}

/// A download of a ``DownloadQueue`` at one moment.
public struct DownloadSnapshot: Sendable, Equatable, Codable {
    /// Its identifier in the queue.
    public var id: String
    /// The URL (credentials removed).
    public var url: String
    public var destination: FilePath
    public var state: DownloadState
    /// Higher starts first.
    public var priority: Int
    /// Its place in the queue, from 0.
    public var position: Int
    /// The latest progress: bytes, speed, and each connection's state, range and speed. `nil`
    /// before the first progress of its current run.
    public var progress: DownloadProgress?
    /// The download's own rate limit, if it has one.
    public var bytesPerSecondLimit: Int64?
    /// Why it failed (a failed download), or its last run's error.
    public var error: DownloadError?
    /// A complete download's statistics.
    public var statistics: DownloadStatistics?
}

/// Something that happened in a ``DownloadQueue``: a download's state changed, or a download
/// reported an event.
///
/// Its JSON form is the download event's (``DownloadEvent``), with `id`, or
/// `{"event": "state", "id": …, "state": …}` for a state change.
public struct QueueEvent: Sendable, Equatable, Codable {
    /// The download it is about.
    public var id: String
    /// The new state, for a state change.
    public var state: DownloadState?
    /// The download's event, otherwise.
    public var event: DownloadEvent?

    public init(id: String, state: DownloadState) {
        self.id = id
        self.state = state
    }

    public init(id: String, event: DownloadEvent) {
        self.id = id
        self.event = event
    }

    enum CodingKeys: String, CodingKey {
        case id, event, state
    }

    public func encode(to encoder: any Encoder) throws {
        if let event { try event.encode(to: encoder) }
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        if let state {
            try c.encode("state", forKey: .event)
            try c.encode(state, forKey: .state)
        }
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        if try c.decode(String.self, forKey: .event) == "state" {
            state = try c.decode(DownloadState.self, forKey: .state)
        } else {
            event = try DownloadEvent(from: decoder)
        }
    }

    /// Whether it is a progress event, the only kind a slow subscriber may lose.
    var isProgress: Bool { event?.kind == .progress }
}

/// A subscriber's stream of a queue's events (``DownloadQueue/subscribe(to:keepingProgress:statesOnly:endsOnly:)``).
///
/// The queue never waits for it. A subscriber that falls behind loses its own oldest progress
/// events beyond its allowance, never a state change or another kind of event.
///
/// Thread safety: `Sendable`; iterate it from one task.
public struct QueueEvents: AsyncSequence, Sendable {
    public typealias Element = QueueEvent
    let subscriber: EventSubscriber<QueueEvent>

    public struct AsyncIterator: AsyncIteratorProtocol {
        let subscriber: EventSubscriber<QueueEvent>

        public mutating func next() async -> QueueEvent? {
            await subscriber.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(subscriber: subscriber) }
}
