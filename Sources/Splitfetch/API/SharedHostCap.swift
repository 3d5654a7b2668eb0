/// A per-host cap on connections that other processes share: many daemons on one queue, whose
/// connections to one server must stay under one number together (``Session/init(maximumConnectionsPerHost:maximumConnections:threads:sharedHostCap:)``).
///
/// The session asks for a slot of the request's host before each request (after its own
/// per-host cap, if any, granted one), and gives it back when the request's transfer has ended
/// and its connection is closed: a session with a shared cap keeps no idle connection, since an
/// idle connection is still a connection the server counts.
public protocol SharedHostCap: Sendable {
    /// Waits for a slot of `host` (`host:port`). Returns `false`, holding nothing, when the task
    /// is cancelled while waiting.
    func acquire(host: String) async -> Bool
    /// Gives back a slot of `host` that ``acquire(host:)`` granted, once its connection is
    /// closed. `early`: the transfer stopped before its response ended, so the server may take a
    /// moment to see the connection go (a response that ends, with `Connection: close`, is
    /// closed by the server itself).
    func release(host: String, early: Bool)
}
