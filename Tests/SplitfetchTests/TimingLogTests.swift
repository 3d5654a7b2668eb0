import Splitfetch
import TestHTTPServer
import Testing

/// The test server's timing log, which the benchmark's timeline figures come from.
@Suite struct TimingLogTests {
    @Test func everyRequestAndEveryResponseBodyIsLoggedWithItsTime() async throws {
        try await withTemporaryDirectory { dir in
            let log = dir + "/timing.log"
            let size: Int64 = (3 << 20) + 777
            var options = testOptions(connections: 4)
            options.minimumSplitSize = size  // no splits of a running range: its body runs to its end
            // HEAD first: one planned range per connection and no connection left idle to take a
            // slow one over (under ThreadSanitizer everything is slow).
            options.probe = .head
            let statistics = try await withServer(.init(timingLogPath: log)) { server in
                let (statistics, digest) = try await download(server.url(size: size), to: dir + "/f.bin", options: options)
                #expect(digest == SyntheticContent(size: size, seed: 0).sha256Hex())
                return statistics
            }
            let text = String(decoding: try #require(readBytes(log)), as: UTF8.self)
            let lines = text.split(separator: "\n").map { $0.split(separator: " ") }
            let requests = lines.filter { $0.count >= 3 && $0[1] == "request" }
            let ends = lines.filter { $0.count == 4 && $0[1] == "response-end" }
            #expect(requests.count == statistics.requests + 1)  // the HEAD probe too
            #expect(ends.count == statistics.requests)
            #expect(requests.first?[2] == "HEAD")
            // The logged GET bodies cover the file, and every line has a time. Exactly once, unless
            // a connection starved of CPU for the stall threshold (a loaded CI machine) had its
            // remainder taken over: the server had sent it all by then, so the bodies overlap.
            let ranges = ends.map { $0[2].split(separator: "-").compactMap { Int64($0) } }.sorted { $0[0] < $1[0] }
            #expect(ranges.allSatisfy { $0.count == 2 && $0[0] < $0[1] })
            #expect(ranges.first?[0] == 0 && ranges.map { $0[1] }.max() == size)
            if statistics.splits == 0 {
                #expect(zip(ranges, ranges.dropFirst()).allSatisfy { $0[1] == $1[0] })
            } else {
                var covered: Int64 = 0
                for range in ranges where range[0] <= covered { covered = max(covered, range[1]) }
                #expect(covered == size, "a gap at \(covered) in \(ranges)")
            }
            #expect(lines.allSatisfy { Double($0[0]) != nil })
        }
    }
}
