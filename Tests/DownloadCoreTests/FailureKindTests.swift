import DownloadCore
import Testing

/// The one table of what is transient: each kind of failure, and what a retry policy does with it.
@Suite("Failure kinds")
struct FailureKindTests {
    @Test(arguments: [
        (FailureKind.http(408), true), (.http(429), true), (.http(500), true), (.http(503), true), (.http(599), true),
        (.http(400), false), (.http(401), false), (.http(403), false), (.http(404), false), (.http(410), false),
        (.http(416), false), (.http(200), false), (.http(206), false),
        (.network(.connect), true), (.network(.timeout), true), (.network(.send), true), (.network(.receive), true),
        (.network(.emptyReply), true), (.network(.partialBody), true), (.network(.http2Stream), true),
        (.network(.stalled), true), (.network(.bufferFull), true), (.network(.tls), false), (.network(.other), false),
        (.network(.serverFull), true), (.loginRefused, false),
        (.protocolFault(.noResponse), true), (.protocolFault(.malformedOnReusedConnection), true),
        (.protocolFault(.malformed), false), (.protocolFault(.wrongRange), true), (.protocolFault(.bodyOverrun), true),
        (.protocolFault(.lengthMismatch), true), (.protocolFault(.ignoredIfRange), true), (.protocolFault(.rangeIgnored), false),
        (.fatal, false),
    ])
    func whatIsTransient(kind: FailureKind, transient: Bool) {
        #expect(RetryPolicy.isTransient(kind) == transient)
        // The retry policy follows the table: a transient failure is retried, any other given up.
        var random = SplitMix64(seed: 1)
        let decision = RetryPolicy(retries: 3).decide(DownloadMachine.TransferFailure(kind: kind), attempt: 1, random: &random)
        #expect((decision != .giveUp) == transient)
    }

    /// A failure with a status and no kind is that status's.
    @Test func aStatusAloneIsItsKind() {
        #expect(DownloadMachine.TransferFailure(httpStatus: 503).kind == .http(503))
        #expect(DownloadMachine.TransferFailure(httpStatus: 503).isTransient)
        #expect(!DownloadMachine.TransferFailure(httpStatus: 404).isTransient)
        #expect(DownloadMachine.TransferFailure(httpStatus: 206, kind: .protocolFault(.wrongRange)).isTransient)
    }
}
