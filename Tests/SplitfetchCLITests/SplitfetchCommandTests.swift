import ArgumentParser
import Foundation
import Splitfetch
@testable import SplitfetchCLI
import Testing

/// The command line as swift-argument-parser and the getopt pre-pass read it: values, defaults,
/// conventions curl, wget and aria2 users know, and the checks that make a usage error.
@Suite("Command-line parsing")
struct CommandParsingTests {
    /// Parses as the command does: the cluster pre-pass, then swift-argument-parser.
    static func parse(_ arguments: [String]) throws -> SplitfetchCommand {
        let parsed = try SplitfetchCommand.parseAsRoot(SplitfetchCommand.splittingClusters(arguments))
        return try #require(parsed as? SplitfetchCommand)
    }

    @Test("getopt clusters ending in an option with its value are split", arguments: [
        (["-qfn4", "u"], ["-q", "-f", "-n4", "u"]),
        (["-qkj", "2"], ["-q", "-k", "-j", "2"]),
        (["-n16"], ["-n16"]),
        (["-qk"], ["-qk"]),
        (["--", "-qfn4"], ["--", "-qfn4"]),
        (["--connections=4", "-xq"], ["--connections=4", "-xq"]),
    ] as [([String], [String])])
    func clusters(arguments: [String], expected: [String]) {
        #expect(SplitfetchCommand.splittingClusters(arguments) == expected)
    }

    /// An unknown option or a stray value is the error reported, even when a check of the
    /// command (a missing URL, a bad --jobs) would have failed first.
    @Test("the first usage error is the parser's", arguments: [
        (["--bogus"], "Unknown option '--bogus'"),
        (["--jobs", "0", "--bogus", "u"], "Unknown option '--bogus'"),
        ([], "missing URL"),
        (["--jobs", "0", "u"], "--jobs must be between"),
    ] as [([String], String)])
    func firstUsageError(arguments: [String], expected: String) throws {
        let split = SplitfetchCommand.splittingClusters(arguments)
        let thrown: any Error
        do {
            _ = try SplitfetchCommand.parseAsRoot(split)
            Issue.record("\(arguments) parsed")
            return
        } catch {
            thrown = error
        }
        let message = SplitfetchCommand.message(for: SplitfetchCommand.firstUsageError(thrown, split))
        #expect(message.contains(expected), "\(message)")
    }

    @Test func valuesAndDefaultsReachTheOptions() throws {
        let command = try Self.parse(["-qfn16", "--min-segment-size", "512K", "--limit-rate=8M", "--stall-timeout", "2.5",
                                      "-H", "A: 1", "-H", "B: 2", "--retries", "3", "https://example.org/f.iso"])
        #expect(command.urls == ["https://example.org/f.iso"])
        #expect(command.output.quiet && command.output.force)
        let options = command.makeOptions()
        #expect(options.connections == 16)
        #expect(options.minimumSegmentSize == 512 << 10)
        #expect(options.rateLimit?.bytesPerSecond == 8 << 20)
        #expect(options.timeouts.stall == .milliseconds(2500))
        #expect(options.headers == [HTTPHeader("A", "1"), HTTPHeader("B", "2")])
        #expect(options.retry.maximumRetries == 3)
        let defaults = try Self.parse(["https://example.org/f.iso"]).makeOptions()
        #expect(defaults.connections == DownloadOptions().connections && defaults.retry.maximumRetries == DownloadOptions().retry.maximumRetries)
    }

    /// The value after an option that takes one is that value, even when it starts with `-`.
    @Test func aValueMayStartWithADash() throws {
        let command = try Self.parse(["-o", "-dash.bin", "https://example.org/f"])
        #expect(command.output.output == "-dash.bin")
    }

    @Test("usage errors are refused before anything runs", arguments: [
        [],
        ["-n", "0", "u"],
        ["-n", "65", "u"],
        ["--jobs", "0", "u"],
        ["-o", "x", "u1", "u2"],
        ["--retries", "-1", "u"],
        ["--min-segment-size", "0", "u"],
        ["--limit-rate", "0", "u"],
        ["--stall-timeout", "0", "u"],
        ["-u", "nopassword", "u"],
        ["--checksum", "sha-256=00", "u1", "u2"],
        ["--mirror", "m", "u1", "u2"],
        ["--bogus", "u"],
        ["--min-segment-size", "12Q", "u"],
    ] as [[String]])
    func usageErrors(arguments: [String]) {
        #expect(throws: (any Error).self) { _ = try Self.parse(arguments) }
        do {
            _ = try Self.parse(arguments)
        } catch {
            #expect(SplitfetchCommand.exitCode(for: error) != .success, "\(arguments)")
        }
    }
}

/// The exit statuses: one for each error code, documented in `--help`.
@Suite("Progress lines")
struct ProgressLineTests {
    /// A stream of a shared HTTP/2 connection says so; a connection of its own does not.
    /// An input file's lines, read on bytes when ASCII and on characters otherwise, to the same
    /// sources: tabs between mirrors, spaces and blank lines and `#` comments dropped, every kind of
    /// line end.
    @Test("an input file's lines and their mirrors", arguments: [
        ("http://a/1\nhttp://a/2\n", [["http://a/1"], ["http://a/2"]]),
        ("  http://a/1 \t http://b/1\t\thttp://c/1  \r\n\r\n# comment\n\t\n  #x\n", [["http://a/1", "http://b/1", "http://c/1"]]),
        ("http://a/1\rhttp://a/2\u{0B}http://a/3\u{0C}http://a/4", [["http://a/1"], ["http://a/2"], ["http://a/3"], ["http://a/4"]]),
        ("", []),
        ("\n\n", []),
    ])
    func inputLines(text: String, expected: [[String]]) {
        #expect(SplitfetchCommand.inputSources(text) == expected)
        // The same text with one non-ASCII line takes the other path, to the same lines.
        #expect(SplitfetchCommand.inputSources(text + "\n# caf\u{e9}\n") == expected)
        #expect(SplitfetchCommand.inputSources(text + "\nhttp://h/caf\u{e9}\n") == expected + [["http://h/caf\u{e9}"]])
    }

    @Test func anHTTP2StreamIsMarked() {
        let stream = ProgressRenderer.connectionLine(ConnectionProgress(id: 2, state: .receiving, bytes: 1 << 20, http2: true))
        let own = ProgressRenderer.connectionLine(ConnectionProgress(id: 3, state: .receiving, bytes: 1 << 20))
        #expect(stream.hasSuffix("h2 stream") && stream.hasPrefix("  #2 receiving"))
        #expect(!own.contains("h2"))
    }
}

@Suite("Exit statuses")
struct ExitStatusTests {
    @Test("each error code has its status", arguments: [
        (DownloadError.Code.usage, Int32(2)), (.network, 3), (.http, 4), (.protocolViolation, 5), (.fileIO, 6),
        (.outputExists, 7), (.resumeConflict, 8), (.badManifest, 9), (.remoteChanged, 10), (.sizeLimit, 11), (.proxy, 12),
        (.integrity, 13), (.outputClosed, 14), (.timedOut, 15), (.interrupted, 130),
    ] as [(DownloadError.Code, Int32)])
    func statusOfCode(code: DownloadError.Code, status: Int32) {
        #expect(ExitStatus(code).rawValue == status)
    }

    @Test func everyStatusIsInTheHelpTable() {
        let lines = ExitStatus.table.split(separator: "\n")
        #expect(lines.count == ExitStatus.allCases.count)
        for status in ExitStatus.allCases {
            #expect(lines.contains { $0.hasPrefix("  \(status.rawValue) ") && $0.hasSuffix(status.meaning) }, "\(status)")
        }
        #expect(Set(ExitStatus.allCases.map(\.rawValue)).count == ExitStatus.allCases.count)
    }

    @Test func aRemedyBecomesTheOptionThatHelps() {
        #expect(ExitStatus.hint(for: .restart).contains("--restart"))
        #expect(ExitStatus.hint(for: .allowOverwrite).contains("--force"))
        #expect(ExitStatus.hint(for: .raiseMaximumSize).contains("--max-size"))
        #expect(ExitStatus.hint(for: .resume).contains("run the same command"))
        #expect(ExitStatus.hint(for: nil).isEmpty)
    }
}

/// The JSON the command writes: `--events` lines and `--stats-json` of a batch.
@Suite("JSON outputs")
struct JSONOutputTests {
    static func object(_ value: some Encodable) throws -> [String: Any] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = try encoder.encode(value)
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func line(_ event: DownloadEvent, download: Int = 0) throws -> [String: Any] {
        try object(EventLine(event: event, download: download, elapsed: 1.5))
    }

    @Test func aSplitLineNamesItsConnectionAndRange() throws {
        let json = try Self.line(.split(connection: 3, range: 100..<200), download: 2)
        #expect(json["event"] as? String == "split")
        #expect(json["schema"] as? Int == EventLog.schema)
        #expect(json["download"] as? Int == 2)
        #expect(json["connection"] as? Int == 3)
        #expect(json["range"] as? [Int] == [100, 200])
        // Fields of other kinds are left out, not written as null.
        #expect(json["statistics"] == nil && json["error"] == nil && json["url"] == nil)
    }

    @Test func aFailedLineCarriesTheErrorAndTheExitStatus() throws {
        let json = try Self.line(.failed(DownloadError(.http, "http://h/f: HTTP 404 Not Found", httpStatus: 404)))
        #expect(json["event"] as? String == "failed")
        #expect(json["exitStatus"] as? Int == 4)
        let error = try #require(json["error"] as? [String: Any])
        #expect(error["httpStatus"] as? Int == 404)
        #expect(error["message"] as? String == "http://h/f: HTTP 404 Not Found")
        #expect(error["code"] as? String == DownloadError.Code.http.description)
        let interrupted = try Self.line(.failed(DownloadError(.interrupted, "stopped")))
        #expect(interrupted["exitStatus"] as? Int == 130)
    }

    @Test func aStartedLineSaysHowAndWithHowMany() throws {
        let json = try Self.line(.started(mode: .segmented, connections: 8, size: 1 << 20))
        #expect(json["event"] as? String == "started")
        #expect(json["mode"] as? String == "segmented")
        #expect(json["connectionCount"] as? Int == 8)
        #expect(json["size"] as? Int == 1 << 20)
    }

    @Test func aBatchsStatisticsCountItsFailures() throws {
        let failure = FailedDownload(url: "http://h/f", path: "/d/f",
                                     error: .init(DownloadError(.integrity, "digest differs")), exitStatus: 13)
        let batch = BatchStatistics(files: [], fileCount: 1, failed: 1, unchanged: 0, failures: [failure], size: 0, seconds: 2,
                                    averageBytesPerSecond: 0)
        let json = try Self.object(batch)
        #expect(json["fileCount"] as? Int == 1 && json["failed"] as? Int == 1 && json["unchanged"] as? Int == 0)
        let failures = try #require(json["failures"] as? [[String: Any]])
        #expect(failures.first?["exitStatus"] as? Int == 13)
        #expect(failures.first?["url"] as? String == "http://h/f")
        #expect((failures.first?["error"] as? [String: Any])?["message"] as? String == "digest differs")
    }
}

/// A batch's counts, kept as its files end in whatever order they end, decide its summary and
/// its exit status as a pass over the list in order would.
@Suite("Batch tally")
struct BatchTallyTests {
    typealias Outcome = Result<DownloadStatistics, DownloadError>

    static func finished(size: Int64, unchanged: Bool = false) -> Outcome {
        var statistics = DownloadStatistics(url: "http://h/f", finalURL: "http://h/f", path: "f", mode: .single, size: size,
                                            duration: .seconds(1), averageBytesPerSecond: 0, connectionCount: 1, connections: [],
                                            requests: 1, retries: 0, splits: 0, bytesReceived: size, resumedBytes: 0)
        statistics.unchanged = unchanged
        return .success(statistics)
    }

    static func failed(_ code: DownloadError.Code) -> Outcome { .failure(DownloadError(code, "\(code)")) }

    /// The files' results in the order they end (index in the list, result), and what the tally
    /// must then say.
    struct Case: Sendable {
        var ends: [(index: Int, result: Outcome)]
        var ended: Int, done: Int, unchanged: Int, bytes: Int64
        /// The exit status of the failure earliest in the list.
        var failure: SplitfetchCLI.ExitStatus?
    }

    static let cases: [Case] = [
        Case(ends: [(0, finished(size: 10)), (1, finished(size: 5, unchanged: true)), (2, finished(size: 7))],
             ended: 3, done: 3, unchanged: 1, bytes: 17, failure: nil),
        Case(ends: [(2, failed(.http)), (0, finished(size: 1)), (1, failed(.network))],
             ended: 3, done: 1, unchanged: 0, bytes: 1, failure: .network),
        Case(ends: [(1, failed(.interrupted)), (3, failed(.fileIO))],
             ended: 2, done: 0, unchanged: 0, bytes: 0, failure: .interrupted),
        Case(ends: [(0, finished(size: 3, unchanged: true)), (1, finished(size: 4, unchanged: true))],
             ended: 2, done: 2, unchanged: 2, bytes: 0, failure: nil),
    ]

    @Test("counts and the earliest failure in the list, whatever the order of ending", arguments: cases)
    func tally(_ expected: Case) {
        var tally = SplitfetchCommand.BatchTally(count: 4)
        for (index, result) in expected.ends { tally.record(result, of: "http://h/\(index)", at: index) }
        #expect(tally.ended == expected.ended)
        #expect(tally.done == expected.done)
        #expect(tally.unchanged == expected.unchanged)
        #expect(tally.bytes == expected.bytes)
        #expect(tally.firstFailure?.status == expected.failure)
        let recorded = tally.results.compactMap { $0?.0 }
        #expect(recorded == expected.ends.map(\.index).sorted().map { "http://h/\($0)" })
    }
}
