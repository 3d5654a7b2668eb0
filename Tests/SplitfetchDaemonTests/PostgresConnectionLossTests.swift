import PostgresNIO
@testable import SplitfetchDaemon
import Testing

/// The store's requests end when their connection closes, answered or not: postgres-nio was seen
/// to leave a query sent as the server shut down without an answer for ever, and one such write
/// held every later write of a daemon.
@Suite struct PostgresConnectionLossTests {
    private static func connect() async throws -> PostgresConnection {
        let address = try PostgresAddress.parse(try #require(PostgresServer.url))
        return try await PostgresConnection.connect(
            configuration: .init(host: address.host, port: address.port, username: address.user, password: address.password,
                                 database: address.database, tls: .disable),
            id: 1, logger: PostgresServer.quiet)
    }

    @Test(.enabled(if: PostgresServer.url != nil)) func aRequestNeverAnsweredEndsWhenItsConnectionCloses() async throws {
        let connection = try await Self.connect()
        // The request waits for this gate, as for an answer that never comes. Should the close
        // not end it, the gate opens after 60 s so that the test ends with the wrong answer.
        let (gate, open) = AsyncStream<Void>.makeStream()
        let watchdog = Task {
            try? await Task.sleep(for: .seconds(60))
            open.finish()
        }
        let watch = ConnectionWatch()
        let request = Task {
            try await watch.until(connection) { _ in
                for await _ in gate {}
                return "answered"
            }
        }
        try await connection.close()
        let result = await request.result
        open.finish()
        watchdog.cancel()
        #expect(throws: ConnectionLost.self) { try result.get() }
        #expect(watch.underWay == 0)
    }

    @Test(.enabled(if: PostgresServer.url != nil)) func theCallersCancellationReachesTheRequest() async throws {
        let connection = try await Self.connect()
        let watch = ConnectionWatch()
        let (started, didStart) = AsyncStream<Void>.makeStream()
        let request = Task {
            try await watch.until(connection) { _ in
                didStart.yield()
                // Ends early only if cancelled.
                try await Task.sleep(for: .seconds(60))
                return "slept"
            }
        }
        for await _ in started { break }
        request.cancel()
        let result = await request.result
        #expect(throws: CancellationError.self) { try result.get() }
        #expect(watch.underWay == 0)
        try await connection.close()
    }

    @Test(.enabled(if: PostgresServer.url != nil)) func aRequestAnsweredKeepsItsAnswer() async throws {
        let connection = try await Self.connect()
        let watch = ConnectionWatch()
        // Many requests on one connection: each answered, none left behind.
        for round in 0..<50 {
            let value = try await watch.until(connection) { connection in
                var total: Int64 = 0
                for try await value in try await connection.query("SELECT \(Int64(round)) + 1", logger: PostgresServer.quiet).decode(Int64.self) {
                    total += value
                }
                return total
            }
            #expect(value == Int64(round) + 1)
        }
        #expect(watch.underWay == 0)
        try await connection.close()
    }
}
