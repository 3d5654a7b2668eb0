import FoundationEssentials
import Logging
import NIOCore
import PostgresNIO

/// Hearing of other workers' changes: `LISTEN` on a connection of its own.
extension PostgresJobStore {
    /// What a worker hears.
    public enum Change: Sendable, Equatable {
        /// These jobs were added, changed or deleted.
        case jobs([String])
        /// Listening (again): changes made before now may not have been heard.
        case missed
        /// A worker gave back a connection slot of this host.
        case slotFreed(String)
    }

    /// The changes of jobs, announced by the table's trigger, until the stream is dropped. A
    /// lost connection is made again with backoff (0.25 s doubling to 8 s); each new connection
    /// first yields ``Change/missed``.
    public func changes() -> AsyncStream<Change> {
        let (stream, continuation) = AsyncStream<Change>.makeStream(bufferingPolicy: .bufferingNewest(65536))
        let (address, logger) = (address, logger)
        let configuration = PostgresConnection.Configuration(host: address.host, port: address.port, username: address.user,
                                                             password: address.password, database: address.database, tls: .disable)
        let task = Task {
            var delay = 0.25
            while !Task.isCancelled {
                do {
                    let connection = try await PostgresConnection.connect(configuration: configuration, id: 1, logger: logger)
                    delay = 0.25
                    // Closed however listening ends: a connection dropped unclosed is a bug
                    // postgres-nio asserts against (a server going away ends `listen` with an error).
                    defer { Task { try? await connection.close() } }
                    try await withTaskCancellationHandler {
                        try await connection.listen(on: Self.channel) { notifications in
                            logger.debug("listening for queue changes")
                            continuation.yield(.missed)
                            for try await notification in notifications {
                                if notification.payload.hasPrefix("slot:") {
                                    continuation.yield(.slotFreed(String(notification.payload.dropFirst(5))))
                                } else {
                                    continuation.yield(.jobs([notification.payload]))
                                }
                            }
                        }
                    } onCancel: {
                        _ = connection.close() as EventLoopFuture<Void>
                    }
                } catch {
                    if !Task.isCancelled {
                        logger.warning("listening for queue changes failed; trying again", metadata: ["error": "\(Self.describe(error))"])
                    }
                }
                try? await Task.sleep(for: .seconds(delay))
                delay = min(delay * 2, 8)
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}
