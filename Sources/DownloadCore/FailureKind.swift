/// What went wrong with a request, as the transport and the HTTP layer saw it: a fact, not a
/// judgement. Whether the same request may succeed later is the core's decision, in one table
/// (``RetryPolicy/isTransient(_:)``).
public enum FailureKind: Sendable, Hashable {
    /// A response with this HTTP status.
    case http(Int)
    /// The network failed.
    case network(NetworkFailure)
    /// The server's reply broke the protocol.
    case protocolFault(ProtocolFault)
    /// A file-transfer server (FTP, SFTP) refused the login: a wrong user name, password or
    /// key, or, once other connections logged in, a cap on sessions (then the download goes on
    /// with fewer connections).
    case loginRefused
    /// A failure whose nature no retry changes: a bad URL or option, a file that cannot be
    /// written, a refused TLS certificate or proxy.
    case fatal
}

/// How the network failed.
public enum NetworkFailure: String, Sendable, Hashable, CaseIterable {
    /// No connection could be made.
    case connect
    /// An operation passed its time limit.
    case timeout
    /// Sending the request failed.
    case send
    /// Receiving the response failed (a reset, say).
    case receive
    /// The server closed the connection without a reply.
    case emptyReply
    /// The body ended before its length.
    case partialBody
    /// An HTTP/2 stream failed or was closed by the peer.
    case http2Stream
    /// The connection received nothing for too long (the machine's stall rule).
    case stalled
    /// More of a response arrived than could be held while its file was made (the probe's
    /// first response); a new request starts where the file is.
    case bufferFull
    /// TLS failed (a certificate, a handshake).
    case tls
    /// The server refused another connection: FTP's `421` (too many connections from this
    /// address, too many users, or the service closing). Server policy, not a fault: the
    /// download goes on with fewer connections.
    case serverFull
    /// Any other network error.
    case other
}

/// How a reply broke the protocol.
public enum ProtocolFault: String, Sendable, Hashable, CaseIterable {
    /// No response head at all.
    case noResponse
    /// A reply that is not HTTP, on a reused connection: most likely bytes an earlier response
    /// left behind.
    case malformedOnReusedConnection
    /// A reply that is not HTTP, on a new connection: the server answers that way.
    case malformed
    /// A `206` with another range than the one asked for, or without a valid `Content-Range`,
    /// or a multipart answer.
    case wrongRange
    /// A body that runs past the range or length it announced.
    case bodyOverrun
    /// A body length other than the one announced or probed.
    case lengthMismatch
    /// A `200` with the whole file to a request with `If-Range` although the file did not
    /// change.
    case ignoredIfRange
    /// A `200` with the whole file to a range request.
    case rangeIgnored
}

extension RetryPolicy {
    /// The HTTP statuses a later request may not get: timeouts, throttling, server errors.
    public static let transientStatuses: Set<Int> = Set([408, 429]).union(500...599)

    /// Whether the same request may succeed later: the one table of what is transient.
    public static func isTransient(_ kind: FailureKind) -> Bool {
        switch kind {
        case .http(let status):
            transientStatuses.contains(status)
        case .network(let failure):
            failure != .tls && failure != .other
        case .protocolFault(let fault):
            fault != .malformed && fault != .rangeIgnored
        case .fatal, .loginRefused:
            false
        }
    }
}
