import FoundationEssentials
import Hummingbird
import HummingbirdWebSocket
public import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle

/// The daemon's HTTP and WebSocket front: `POST /jsonrpc` and a WebSocket on `/jsonrpc`, both
/// behind the same checks (``RequestGuard``): the `Host` must be the daemon's, an `Origin` must
/// be allowed, bodies and messages are bounded, and every call but the two that list names
/// carries the token.
public enum DaemonServer {
    public struct Configuration: Sendable {
        public var host: String
        public var port: Int
        /// Extra names the daemon may be reached by (`Host`), besides its address and `localhost`.
        public var allowedHosts: [String] = []
        /// Origins allowed besides the daemon's own (`chrome-extension://…`, a web UI's address).
        public var allowedOrigins: [String] = []
        /// The largest request body or WebSocket message, in bytes.
        public var maximumMessage = 1 << 20
        /// An idle connection is closed after this long.
        public var idleTimeout: Duration = .seconds(60)
        /// How often a client that called `splitfetch.watchProgress` gets `splitfetch.onProgress`.
        public var progressInterval: Duration = .milliseconds(500)

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }
    }

    /// Serves until SIGTERM or SIGINT, or until a client calls `aria2.shutdown`; then stops the
    /// daemon's downloads (each keeps its data) and returns. `onListening` gets the bound port.
    public static func run(daemon: Daemon, rpc: Aria2RPC, configuration: Configuration, logger: Logger,
                           onListening: @escaping @Sendable (Int) async -> Void = { _ in }) async throws {
        let guardian = RequestGuard(configuration: configuration)
        let throttle = FailureThrottle()
        let shutdown = AsyncStream<Void>.makeStream()
        let router = Router(context: BasicWebSocketRequestContext.self)
        let maximum = configuration.maximumMessage
        router.post("jsonrpc") { request, context -> Response in
            if let refusal = guardian.refusal(request.head) { return refusal }
            let body: ByteBuffer
            do {
                body = try await request.body.collect(upTo: maximum)
            } catch {
                return RequestGuard.error(.contentTooLarge, RPCError.invalidRequest("the body exceeds \(maximum) bytes"))
            }
            let reply = await rpc.reply(to: Array(buffer: body))
            if reply.unauthorized {
                logger.notice("a call was refused: wrong or missing token")
                await throttle.wait()
            }
            if reply.shutdown { shutdown.continuation.yield() }
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: reply.body)))
        }
        // The web page (``WebPage``): the same Host check as the API; no token is needed to load
        // it, since it holds nothing but code.
        for asset in WebPage.assets {
            router.get(RouterPath(stringLiteral: asset.path)) { request, _ -> Response in
                if let refusal = guardian.refusal(request.head) { return refusal }
                return WebPage.response(asset)
            }
        }
        router.ws("jsonrpc") { request, _ in
            guardian.refusal(request.head) == nil ? .upgrade([:]) : .dontUpgrade
        } onUpgrade: { inbound, outbound, _ in
            // Notifications go only to a socket that has made a call with the token.
            let trusted = NIOLockedValueBox(false)
            let forward = Task {
                for await notification in daemon.notifications() where trusted.withLockedValue({ $0 }) {
                    let message: JSONValue = ["jsonrpc": "2.0", "method": .string(notification.method),
                                              "params": [["gid": .string(notification.gid)]]]
                    try? await outbound.write(.text(String(decoding: message.serialized(), as: UTF8.self)))
                }
            }
            var progress: Task<Void, Never>?
            defer {
                forward.cancel()
                progress?.cancel()
            }
            for try await message in inbound.messages(maxSize: maximum) {
                let bytes: [UInt8] = switch message {
                case .text(let text): Array(text.utf8)
                case .binary(let buffer): Array(buffer: buffer)
                }
                let reply = await rpc.reply(to: bytes)
                if reply.unauthorized {
                    await throttle.wait()
                } else {
                    trusted.withLockedValue { $0 = true }
                }
                if reply.shutdown { shutdown.continuation.yield() }
                try await outbound.write(.text(String(decoding: reply.body, as: UTF8.self)))
                if reply.watchProgress, progress == nil {
                    progress = Task { await pushProgress(rpc, to: outbound, every: configuration.progressInterval) }
                }
            }
        }
        let idle = TimeAmount.seconds(configuration.idleTimeout.components.seconds)
        let app = Application(
            router: router,
            server: .http1WebSocketUpgrade(webSocketRouter: router, configuration: .init(
                http1: .init(idleTimeout: idle), ws: .init(maxFrameSize: maximum))),
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: nil),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? configuration.port) },
            logger: logger
        )
        // The stop watcher is told of SIGTERM or SIGINT first (services stop in reverse order):
        // requests that wait for the queue's database are answered then, so the server's
        // graceful stop does not wait for a database that is away.
        let services = ServiceGroup(configuration: .init(
            services: [app, StopWatcher { daemon.stopRequested() }], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        let loop = EventLoopTaskExecutor(app.eventLoopGroup.any())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await withTaskExecutorPreference(loop) { try await services.run() } }
            group.addTask {
                for await _ in shutdown.stream { return }
            }
            // Either the service ended (a signal) or a client asked to shut down.
            _ = try await group.next()
            group.cancelAll()
        }
        logger.info("stopping: pausing downloads and saving their progress")
        await daemon.shutdown()
    }
}

/// Sends `splitfetch.onProgress` every `interval` until the socket closes (the task is
/// cancelled). With nothing active, one message says so and none follows until a download is.
private func pushProgress(_ rpc: Aria2RPC, to outbound: WebSocketOutboundWriter, every interval: Duration) async {
    var idle = false
    while !Task.isCancelled {
        let params = rpc.progressNotification()
        let nothingActive = params.object?["downloads"]?.array?.isEmpty ?? true
        if !(idle && nothingActive) {
            let message: JSONValue = ["jsonrpc": "2.0", "method": "splitfetch.onProgress", "params": [params]]
            do {
                try await outbound.write(.text(String(decoding: message.serialized(), as: UTF8.self)))
            } catch {
                return
            }
        }
        idle = nothingActive
        try? await Task.sleep(for: interval)
    }
}

/// Refuses requests that did not come from where the daemon expects: a `Host` that is not the
/// daemon's (DNS rebinding), an `Origin` that is not allowed (a web page in a browser).
struct RequestGuard: Sendable {
    let hosts: Set<String>
    let origins: Set<String>

    init(configuration: DaemonServer.Configuration) {
        let port = String(configuration.port)
        var names = ["127.0.0.1", "localhost", "[::1]", configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host]
        names += configuration.allowedHosts
        var hosts = Set<String>()
        for name in names {
            hosts.insert(name.lowercased() + ":" + port)
            if configuration.port == 80 { hosts.insert(name.lowercased()) }
        }
        self.hosts = hosts
        var origins = Set(hosts.map { "http://" + $0 })
        origins.formUnion(configuration.allowedOrigins.map { $0.lowercased() })
        self.origins = origins
    }

    /// A response refusing the request, or `nil` to let it through.
    func refusal(_ head: HTTPRequest) -> Response? {
        guard let host = head.authority?.lowercased(), hosts.contains(host) else {
            return Self.error(.forbidden, RPCError.forbidden("the Host header must name this daemon (127.0.0.1, localhost or an allowed name, with its port)"))
        }
        if let origin = head.headerFields[.origin] {
            guard origins.contains(origin.lowercased()) else {
                return Self.error(.forbidden, RPCError.forbidden("requests from the origin \(origin.prefix(100)) are not allowed; see --allow-origin"))
            }
        }
        return nil
    }

    static func error(_ status: HTTPResponse.Status, _ error: RPCError) -> Response {
        let bytes = Aria2RPC.response(id: .null, .failure(error)).serialized()
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
    }
}

/// Slows refused calls down: they are answered one at a time, half a second apart, so guessing
/// the token is slow while callers with the token are never held.
final class FailureThrottle: Sendable {
    private let next = NIOLockedValueBox(ContinuousClock.now)
    static let spacing = Duration.milliseconds(500)

    func wait() async {
        let slot = next.withLockedValue { next -> ContinuousClock.Instant in
            let slot = max(next, .now)
            next = slot + Self.spacing
            return slot
        }
        try? await Task.sleep(until: slot, clock: .continuous)
    }
}

/// Waits for the service group's graceful stop, then runs `stopping`.
private struct StopWatcher: Service {
    let stopping: @Sendable () -> Void

    func run() async throws {
        try? await gracefulShutdown()
        stopping()
    }
}

/// Runs Swift tasks on a NIO event loop (the server's one): a request is read, handled and
/// answered on the loop's thread, without a hop to Swift's cooperative pool and back for each
/// call. Only the server's own tasks prefer it (`withTaskExecutorPreference` is inherited by
/// child tasks alone); the downloads run on the pool.
final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    init(_ loop: any EventLoop) {
        self.loop = loop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
