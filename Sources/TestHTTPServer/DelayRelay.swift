import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP relay on loopback that adds a round trip: every byte is forwarded to the other side half
/// a round trip after it arrived, in each direction, and a new connection's first bytes wait one
/// round trip more, as a TCP handshake would cost. This kernel has no `netem`, so real servers
/// (nginx with TLS and HTTP/2, Apache) are measured at a real round-trip time through it.
///
/// Whatever the bytes are (TLS, HTTP/2), they pass unchanged and in order. A side that closes is
/// closed on the other side after the same delay.
///
/// Thread safety: all methods may be called from any thread.
public final class DelayRelay: Sendable {
    public let port: Int
    private let channel: any Channel
    private let group: MultiThreadedEventLoopGroup
    /// Connections accepted so far.
    private let accepted = NIOLockedValueBox(0)
    /// Set by ``stopAnswering()``: nothing is forwarded any more.
    private let silent = NIOLockedValueBox(false)

    /// Starts listening on `host` (loopback) at `port` (0: any free one), forwarding each
    /// connection to `target`.
    public init(host: String = "127.0.0.1", port: Int = 0, targetHost: String, targetPort: Int, roundTrip: Duration) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.group = group
        let half = TimeAmount.nanoseconds((roundTrip.components.seconds * 1_000_000_000 + roundTrip.components.attoseconds / 1_000_000_000) / 2)
        let counter = accepted
        let silent = silent
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.autoRead, value: false)
            .childChannelInitializer { inbound in
                counter.withLockedValue { $0 += 1 }
                return ClientBootstrap(group: inbound.eventLoop)
                    .channelOption(.socketOption(.tcp_nodelay), value: 1)
                    .connect(host: targetHost, port: targetPort)
                    .flatMap { outbound in
                        // The client's first bytes pay for the handshake: one round trip more.
                        let toServer = Forwarder(peer: outbound, delay: half, firstExtra: half * 2, silent: silent)
                        let toClient = Forwarder(peer: inbound, delay: half, firstExtra: .zero, silent: silent)
                        return outbound.pipeline.addHandler(toClient).flatMap {
                            inbound.pipeline.addHandler(toServer)
                        }.flatMap {
                            inbound.setOption(.autoRead, value: true)
                        }
                    }
            }
        channel = try await bootstrap.bind(host: host, port: port).get()
        self.port = channel.localAddress?.port ?? port
    }

    public var connectionsAccepted: Int { accepted.withLockedValue { $0 } }

    /// From now on forwards nothing, either way, and keeps every connection open (new ones are
    /// still accepted): a server that stopped answering without closing anything, as a database
    /// host that froze or dropped off the network. What is read from then on is discarded, so a
    /// connection used through it is not usable again.
    public func stopAnswering() {
        silent.withLockedValue { $0 = true }
    }

    public func waitUntilClosed() async throws {
        try await channel.closeFuture.get()
    }

    public func shutdown() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }
}

/// Reads one side and writes what it read to `peer` after `delay` (plus `firstExtra` for the
/// first bytes), in order: nothing is sent before what came earlier.
private final class Forwarder: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer

    let peer: any Channel
    let delay: TimeAmount
    let firstExtra: TimeAmount
    let silent: NIOLockedValueBox<Bool>
    /// When the last bytes are due; `nil` before the first.
    private let lastDue = NIOLockedValueBox<NIODeadline?>(nil)

    init(peer: any Channel, delay: TimeAmount, firstExtra: TimeAmount, silent: NIOLockedValueBox<Bool>) {
        self.peer = peer
        self.delay = delay
        self.firstExtra = firstExtra
        self.silent = silent
    }

    /// When what arrives now is due: half a round trip on, never before what came earlier.
    private func due() -> NIODeadline {
        lastDue.withLockedValue { last in
            let now = NIODeadline.now()
            let due = last.map { max($0, now + delay) } ?? now + delay + firstExtra
            last = due
            return due
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !silent.withLockedValue({ $0 }) else { return }
        let bytes = unwrapInboundIn(data)
        let peer = self.peer
        _ = context.eventLoop.scheduleTask(deadline: due()) { peer.writeAndFlush(bytes, promise: nil) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        guard !silent.withLockedValue({ $0 }) else { return context.fireChannelInactive() }
        let peer = self.peer
        _ = context.eventLoop.scheduleTask(deadline: due()) { peer.close(promise: nil) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
