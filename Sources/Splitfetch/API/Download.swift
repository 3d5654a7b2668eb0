public import SystemPackage
import NIOConcurrencyHelpers
import Synchronization

/// One file to download over several connections.
///
/// ```swift
/// let download = Download("https://example.org/big.iso", to: "/tmp/big.iso")
/// Task { for await event in download.events { print(event) } }
/// let statistics = try await download.run()
/// ```
///
/// `run()` probes the server, plans byte ranges, fetches them in parallel into `destination +
/// ".part"`, and renames the finished file to `destination`. The partial file never sits under the
/// final name. Cancelling the task that runs `run()` stops every connection promptly and throws a
/// ``DownloadError`` with code ``DownloadError/Code/interrupted``.
///
/// Thread safety: a `Download` is `Sendable`; `run()` may be called once.
public final class Download: Sendable {
    /// The URL to fetch (`http` or `https`).
    public let url: String
    /// The final path of the file.
    public let destination: FilePath
    /// The settings in force.
    public let options: DownloadOptions
    /// Progress and lifecycle events. One consumer; finishes when `run()` returns. When the
    /// consumer is slow, the oldest undelivered events are dropped. For more consumers, or one
    /// that must never miss a lifecycle event, use ``subscribe(keepingProgress:)``.
    public let events: AsyncStream<DownloadEvent>

    private let continuation: AsyncStream<DownloadEvent>.Continuation
    /// The subscribers of ``subscribe(keepingProgress:)``.
    private let broadcast = EventBroadcast()
    private let started = Atomic<Bool>(false)
    private let session: Session?
    /// Takes the file in order instead of ``destination`` (a download read in order).
    let consumer: (any ByteConsumer)?
    /// Sees every event as it is emitted, before any subscriber, never dropping one: a
    /// ``DownloadQueue`` keeps its snapshots and forwards the events with it. It must not block.
    let tap: (@Sendable (DownloadEvent) -> Void)?
    /// Whether the network part is over, who waits for it (``transferred()``), and the session's
    /// transport this download was given, counted busier until then.
    private let network = NIOLockedValueBox<(over: Bool, waiters: [CheckedContinuation<Void, Never>], transport: CurlTransport?)>(
        (false, [], nil))

    /// Describes a download; nothing happens until ``run()``.
    ///
    /// - Parameters:
    ///   - url: an `http` or `https` URL.
    ///   - destination: where the finished file goes; its directory must exist.
    ///   - options: connection count, timeouts, retries and the rest.
    ///   - session: a ``Session`` to share connections with other downloads; by default the
    ///     download has a transport of its own.
    public convenience init(_ url: String, to destination: FilePath, options: DownloadOptions = DownloadOptions(), session: Session? = nil) {
        self.init(url, destination: destination, consumer: nil, options: options, session: session)
    }

    /// Describes a download read in order into `descriptor` (a pipe, a socket, standard output):
    /// the file's bytes are written there from the first to the last, while several connections
    /// fetch ranges inside a window of ``DownloadOptions/window`` bytes ahead of what was written.
    ///
    /// When the reader is slow, the writes block and the connections pause: the bytes held
    /// never exceed the window, and they wait in an anonymous temporary file, not in memory. A
    /// reader that goes away (`EPIPE`) ends the download with
    /// ``DownloadError/Code/outputClosed``. Nothing can be resumed, and nothing is written under
    /// a file name; ``destination`` is `-`. The caller owns `descriptor` and closes it.
    public convenience init(_ url: String, writingTo descriptor: FileDescriptor, options: DownloadOptions = DownloadOptions(),
                            session: Session? = nil) {
        let name = descriptor == .standardOutput ? "standard output" : "file descriptor \(descriptor.rawValue)"
        self.init(url, destination: "-", consumer: DescriptorConsumer(descriptor: descriptor, name: name), options: options,
                  session: session)
    }

    /// Describes a download of one file from several sources (mirrors): the first is probed
    /// and is the reference; the others each prove they serve the same bytes before they get a
    /// range, and get ``DownloadOptions/connections`` connections of their own. A source that
    /// serves other bytes, answers 404, or keeps failing is dropped; the download fails only
    /// when every source did. The same as `Download(sources[0], to:)` with the rest in
    /// ``DownloadOptions/Mirrors-swift.struct/urls``.
    ///
    /// - Precondition: `sources` is not empty.
    public convenience init(sources: [String], to destination: FilePath, options: DownloadOptions = DownloadOptions(),
                            session: Session? = nil) {
        precondition(!sources.isEmpty, "a download needs at least one source")
        var options = options
        options.mirrors.urls = Array(sources.dropFirst()) + options.mirrors.urls
        self.init(sources[0], destination: destination, consumer: nil, options: options, session: session)
    }

    /// Its claim on its batch's ``NetworkGate`` (``DownloadQueue``'s batches): given back when its
    /// network part is over.
    let ticket: NetworkTicket?

    init(_ url: String, destination: FilePath, consumer: (any ByteConsumer)?, options: DownloadOptions, session: Session?,
         tap: (@Sendable (DownloadEvent) -> Void)? = nil, ticket: NetworkTicket? = nil) {
        self.consumer = consumer
        self.tap = tap
        self.ticket = ticket
        self.session = session
        self.url = url
        self.destination = destination
        self.options = options
        (events, continuation) = AsyncStream.makeStream(of: DownloadEvent.self, bufferingPolicy: .bufferingNewest(1024))
    }

    /// A stream of this download's events for one more consumer: any number may follow one
    /// download, each at its own pace, and none slows it. A subscriber that falls behind loses
    /// only its own oldest progress events beyond `keepingProgress`, never another kind. It gets
    /// the events from the moment it subscribes (subscribe before ``run()`` to see them all), and
    /// its stream ends after the download's last event.
    ///
    /// - Parameter keepingProgress: progress events held for this subscriber at most (at least 1).
    public func subscribe(keepingProgress: Int = 64) -> DownloadEvents {
        DownloadEvents(subscriber: broadcast.subscribe(keepingProgress: keepingProgress))
    }

    /// Returns once the download needs the network no more: every byte has arrived and only
    /// the sync and the rename are left, or it ended (also before ``run()`` is called, never).
    /// A caller fetching many files can start the next one while this one reaches the disk:
    /// the durability of each file is kept, and no file waits for another's `fsync`.
    public func transferred() async {
        await withCheckedContinuation { continuation in
            network.withLockedValue { state in
                if state.over { continuation.resume() } else { state.waiters.append(continuation) }
            }
        }
    }

    private func networkOver() {
        let (waiters, transport) = network.withLockedValue { state -> ([CheckedContinuation<Void, Never>], CurlTransport?) in
            guard !state.over else { return ([], nil) }
            state.over = true
            defer { state.waiters = [] }
            return (state.waiters, state.transport)
        }
        transport?.unassign()
        // Its permit goes on to the download waiting longest, which is sent to this download's
        // transport: a connection there was most likely just freed.
        ticket?.release(freedOn: transport)
        for waiter in waiters { waiter.resume() }
    }

    /// Downloads the file.
    ///
    /// - Returns: the final statistics (also sent as ``DownloadEvent/finished(_:)``).
    /// - Throws: ``DownloadError``; on any error the partial file is removed and nothing exists
    ///   under the final name that was not there before.
    public func run() async throws(DownloadError) -> DownloadStatistics {
        guard !started.exchange(true, ordering: .relaxed) else {
            throw DownloadError(.usage, "a Download can run only once")
        }
        defer {
            networkOver()
            continuation.finish()
            broadcast.finish()
        }
        do throws(DownloadError) {
            return try await perform()
        } catch {
            tap?(.failed(error))
            continuation.yield(.failed(error))  // the last event, never dropped: the newest is kept
            broadcast.emit(.failed(error))
            throw error
        }
    }

    private func perform() async throws(DownloadError) -> DownloadStatistics {
        // Loaded off the pool (options and URLs are read by libcurl's parser).
        if let failure = await Libcurl.ready() { throw DownloadError(.network, failure) }
        try options.validate()
        if let path = options.caCertificatePath?.string, !FileSystem.exists(path) {
            throw DownloadError(.usage, "CA certificate file \(path) does not exist")
        }
        try RemoteScheme.check(url)
        // Connections kept for reuse: each source's (mirrors a server announces may add more).
        let chosen = session?.assignTransport(for: url)
        network.withLockedValue { $0.transport = chosen }
        let transport = chosen
            ?? CurlTransport(maximumConnections: options.connections * (1 + min(options.mirrors.urls.count, options.mirrors.maximum)))
        var setup = DownloadSetup(url: url, destination: destination.string, options: options,
                            connector: Connector(transport: transport, limiter: session?.limiter, shared: session?.sharedCap,
                                                 ticket: ticket),
                            policy: RequestPolicy(url: url, options: options),
                            emit: { [continuation, broadcast, tap] in
                                tap?($0)
                                continuation.yield($0)
                                broadcast.emit($0)
                            },
                            transferred: { [weak self] in self?.networkOver() })
        setup.consumer = consumer
        let result: Result<DownloadStatistics, DownloadError>
        do {
            result = .success(try await setup.run())
        } catch let error as DownloadError {
            result = .failure(error.naming(proxy: options.proxy.url))
        } catch is CancellationError {
            result = .failure(DownloadError(.interrupted, "\(redactedURL(url)): interrupted"))
        } catch {
            result = .failure(DownloadError(.fileIO, "\(redactedURL(url)): \(error)"))
        }
        // A transport of its own ends with the download, before `run()` returns.
        if session == nil { await transport.shutdown() }
        return try result.get()
    }
}
