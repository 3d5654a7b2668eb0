import ArgumentParser
import Splitfetch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Measures a rate limit changed while a download runs (for `scripts/bench --scenarios rc`):
/// one download under a shared ``RateLimit`` that starts at the first rate and moves to each
/// next one after `--interval` seconds. Prints one JSON line per interval: the rate asked for,
/// the rate measured over the interval (bytes written at its end less at its start, from the
/// download's progress events), and their ratio. The download is stopped after the last
/// interval; its data is left in a temporary directory that is removed.
@main
struct RateBenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sf-ratebench",
        abstract: "Measure a rate limit changed while a download runs.")

    @Argument(help: "The URL to download (large enough for every interval).") var url: String
    @Option(help: "The rates, in bytes per second, comma-separated.") var rates = "4194304,1048576,8388608"
    @Option(help: "Seconds each rate holds.") var interval: Double = 4
    @Option(help: "Connections.") var connections = 8

    func run() async throws {
        let targets = rates.split(separator: ",").compactMap { Int64($0) }
        guard !targets.isEmpty, targets.allSatisfy({ $0 > 0 }), interval > 0 else {
            throw ValidationError("--rates must be positive numbers and --interval positive")
        }
        var template = "/tmp/sf-ratebench-XXXXXX".utf8CString
        guard let directory = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }).map({ String(cString: $0) }) else {
            throw ValidationError("cannot make a temporary directory")
        }
        defer {
            unlink(directory + "/f.part"); unlink(directory + "/f.part.json"); unlink(directory + "/f"); rmdir(directory)
        }
        let limit = RateLimit(bytesPerSecond: targets[0])
        var options = DownloadOptions()
        options.connections = connections
        options.rateLimit = limit
        options.progressInterval = .milliseconds(50)
        options.syncBeforeRename = false
        let download = Download(url, to: FilePath(directory + "/f"), options: options)
        let work = Task { try await download.run() }
        let clock = ContinuousClock()
        let start = clock.now
        var boundaries: [Int64] = []  // bytes written at each interval's start
        var next = 0
        var last: Int64 = 0
        for await event in download.events {
            guard let progress = event.progress else { continue }
            last = progress.bytesWritten
            let elapsed = (clock.now - start)
            while next <= targets.count, elapsed >= .seconds(interval * Double(next)) {
                boundaries.append(last)
                if next < targets.count { limit.setBytesPerSecond(targets[next]) }
                next += 1
            }
            if next > targets.count { break }
        }
        work.cancel()
        _ = try? await work.value
        for (index, target) in targets.enumerated() where index + 1 < boundaries.count {
            let measured = Double(boundaries[index + 1] - boundaries[index]) / interval
            let ratio = measured / Double(target)
            print("{\"interval\":\(index),\"target\":\(target),\"measured\":\(Int64(measured)),\"ratio\":\((ratio * 10_000).rounded() / 10_000)}")
        }
    }
}
