import Foundation
import Logging
import Splitfetch
@testable import SplitfetchCLI
import NIOConcurrencyHelpers
import SystemPackage
import TestHTTPServer
import Testing

/// The fault table's checks (`Tests/Faults/faults.tsv`, the source of the manual's table), in
/// process: each row's arguments parsed as the command parses them, the download run by the
/// library against the in-process test server, and its end compared with the row: the right
/// SHA-256, or the exit status the command maps the error to and the text its message holds.
/// `scripts/e2e-faults` runs the same rows through the command itself, proxies included.
@Suite("Fault table")
struct FaultTableTests {
    struct Check: Sendable, CustomTestStringConvertible {
        var name: String
        var target: String
        var arguments: [String]
        /// The exit status, or `nil` for a correct file.
        var expect: Int32?
        var text: String
        var testDescription: String { name }
    }

    static let size: Int64 = (3 << 20) + 4321

    /// Every check that needs nothing but the test server (not the ones through a proxy).
    static let checks: [Check] = {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Faults/faults.tsv").path
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true).filter { !$0.hasPrefix("#") }.dropFirst()
        return lines.compactMap { line -> Check? in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 7, !fields[2].isEmpty, !line.contains("{proxy}") else { return nil }
            return Check(name: fields[2], target: fields[3], arguments: fields[4].split(separator: " ").map(String.init),
                         expect: fields[5] == "ok" ? nil : Int32(fields[5]), text: fields[6])
        }
    }()

    @Test func theTableIsRead() {
        #expect(Self.checks.count >= 40, "\(Self.checks.count) checks read from Tests/Faults/faults.tsv")
    }

    /// The download's debug log, kept so that a row ending otherwise than the table says can show
    /// what each connection asked and decided (a row that stalled only under ThreadSanitizer's
    /// load could not be told apart from a server that never answered).
    struct Transcript: LogHandler {
        let evidence: Evidence
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .debug

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let fields = (event.metadata ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            let line = String(format: "%.6f ", Date().timeIntervalSince1970) + "\(event.message) \(fields)"
            evidence.client.withLockedValue { $0.append(line) }
        }
    }

    /// Both sides of a row, for its failure message: the client's log and the server's timing log.
    final class Evidence: Sendable {
        let client = NIOLockedValueBox<[String]>([])
        let serverLog: String

        init(serverLog: String) { self.serverLog = serverLog }

        var text: String {
            let server = (try? String(contentsOfFile: serverLog, encoding: .utf8)) ?? "(no server log)"
            return "client:\n" + client.withLockedValue { $0.suffix(60).joined(separator: "\n") }
                + "\nserver:\n" + server.split(separator: "\n").suffix(60).joined(separator: "\n")
        }
    }

    @Test(arguments: checks)
    func check(_ check: Check) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("splitfetch-faults-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = TestServer.Configuration()
        configuration.timingLogPath = directory + "/server.log"
        let server = try await TestServer(configuration: configuration)
        let evidence = Evidence(serverLog: directory + "/server.log")
        func fill(_ text: String) -> String {
            text.replacingOccurrences(of: "{base}", with: server.baseURL)
                .replacingOccurrences(of: "{half}", with: String(Self.size / 2))
                .replacingOccurrences(of: "{double}", with: String(Self.size * 2))
        }
        let target = fill(check.target)
        let url = target.contains("://") ? target : server.url(size: Self.size) + "?" + target
        // As scripts/e2e-faults runs them; a loaded ThreadSanitizer run gets longer timeouts.
        let timeout = ProcessInfo.processInfo.environment["SPLITFETCH_UNDER_TSAN"] == nil ? "1" : "10"
        let arguments = ["-q", "-n", "4", "--min-segment-size", "512K", "--retries", "6", "--stall-timeout", timeout,
                         "--probe-timeout", timeout] + check.arguments.map(fill) + [url]
        let command = try #require(try SplitfetchCommand.parseAsRoot(SplitfetchCommand.splittingClusters(arguments))
            as? SplitfetchCommand)
        var options = command.makeOptions()
        options.durability.syncBeforeRename = false
        options.logger = Logger(label: "fault-table") { [evidence] _ in Transcript(evidence: evidence) }
        let path = directory + "/f"
        do {
            _ = try await Download(url, to: FilePath(path), options: options).run()
            await server.shutdown()
            #expect(check.expect == nil, "finished, but the table says exit \(check.expect ?? 0)\n\(evidence.text)")
            // The size the URL's /size/N/ names.
            let named = url.range(of: "/size/").map { url[$0.upperBound...].prefix { $0.isNumber } }
            let size = named.flatMap { Int64($0) } ?? Self.size
            #expect(try sha256HexOfFile(atPath: path) == SyntheticContent(size: size).sha256Hex())
        } catch let error as DownloadError {
            await server.shutdown()
            #expect(ExitStatus(error.code).rawValue == check.expect, "\(error.message)\n\(evidence.text)")
            #expect(error.message.contains(fill(check.text)), "\(error.message)\n\(evidence.text)")
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }
}
