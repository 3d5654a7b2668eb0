@testable import Splitfetch
import TestHTTPServer
import Testing

/// A session's downloads start on its least busy transport thread, the first on a tie, so
/// downloads one after another keep one thread's connections and downloads side by side spread.
@Suite("Transport choice")
struct TransportChoiceTests {
    @Test func theLeastBusyTransportIsChosenAndTheFirstOnATie() async throws {
        try await withServer(.init(rateLimit: 64 << 10)) { server in
            let session = Session(threads: 2)
            #expect(session.transports.count == 2)
            #expect(session.transport(for: "http://127.0.0.1/") === session.transports[0])
            // A slow transfer under way on the first makes the second the least busy.
            let first = session.transports[0]
            let request = TransferRequest(url: server.url(size: 4 << 20), options: testOptions())
            let slow = Task { await first.perform(request, sink: nil) }
            for _ in 0..<5_000 where first.transfersUnderWay == 0 { try? await Task.sleep(for: .milliseconds(1)) }
            #expect(first.transfersUnderWay == 1)
            #expect(session.transport(for: "http://127.0.0.1/") === session.transports[1])
            slow.cancel()
            _ = await slow.value
            #expect(first.transfersUnderWay == 0)
            #expect(session.transport(for: "http://127.0.0.1/") === session.transports[0])
            await session.shutdown()
        }
    }
}
