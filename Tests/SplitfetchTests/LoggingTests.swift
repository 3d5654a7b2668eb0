import Logging
import NIOConcurrencyHelpers
@testable import Splitfetch
import SystemPackage
import TestHTTPServer
import Testing

/// The library logs its decisions through swift-log, at debug level, and never prints.
@Suite("Logging")
struct LoggingTests {
    /// Keeps every message and its metadata, rendered, for the test to read.
    struct Capture: LogHandler {
        let lines: NIOLockedValueBox<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            lines.withLockedValue { $0.append("\(event.level) \(event.message) \(fields)") }
        }
    }

    @Test func requestsRetriesAndTheEndAreLoggedWithoutSecrets() async throws {
        try await withServer { server in
            try await withTemporaryDirectory { dir in
                let lines = NIOLockedValueBox<[String]>([])
                var options = testOptions(connections: 4)
                options.logger = Logger(label: "test") { _ in Capture(lines: lines) }
                // The first request gets a 503: the probe is retried.
                let size: Int64 = 3 << 20
                let url = server.url(size: size, query: ["firstfail": "1", "retryafter": "0"])
                    .replacingFirst("http://", with: "http://dave:pa55word@")
                let (_, digest) = try await download(url, to: dir + "/f", options: options)
                #expect(digest == SyntheticContent(size: size).sha256Hex())
                let log = lines.withLockedValue { $0 }
                #expect(log.allSatisfy { $0.hasPrefix("debug ") })
                #expect(log.contains { $0.hasPrefix("debug probe request method=get") })
                #expect(log.contains { $0.hasPrefix("debug retrying the probe attempt=1") && $0.contains("503") })
                #expect(log.filter { $0.hasPrefix("debug request ") }.count >= 3, "\(log)")
                #expect(log.last?.hasPrefix("debug finished ") == true)
                #expect(!log.contains { $0.contains("pa55word") || $0.contains("dave") }, "a secret in the log")
            }
        }
    }

    @Test(arguments: [(20.0, "20"), (1.5, "1.5"), (0.26725, "0.267"), (0.0005, "0.001"), (2.0004, "2"), (0.05, "0.05")])
    func secondsAreShownToTheMillisecond(value: Double, shown: String) {
        #expect(formatSeconds(value) == shown)
    }

    @Test func byDefaultNothingIsLogged() {
        // The default handler discards: the library prints nothing unless given a logger.
        let options = DownloadOptions()
        #expect(options.logger.handler is SwiftLogNoOpLogHandler)
    }
}
