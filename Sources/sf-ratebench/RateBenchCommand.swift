import ArgumentParser
import DownloadCore
import Splitfetch
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Measures what a long-running service feels: a rate limit changed while a download runs
/// (`change`, the default), and the CPU an idle queue costs (`idle`).
@main
struct RateBenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sf-ratebench",
        abstract: "Measure a rate limit changed while running, an idle queue's CPU, and a large queue's operations and decisions.",
        subcommands: [RateChange.self, IdleQueue.self, QueueScale.self, ScheduleDrain.self],
        defaultSubcommand: RateChange.self)
}

/// Makes a temporary directory, or throws.
func temporaryDirectory() throws -> String {
    var template = "/tmp/sf-ratebench-XXXXXX".utf8CString
    guard let directory = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }).map({ String(cString: $0) }) else {
        throw ValidationError("cannot make a temporary directory")
    }
    return directory
}

/// Removes `directory` and what is in it (one level).
func removeDirectory(_ directory: String) {
    if let handle = opendir(directory) {
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
            if name != "." && name != ".." { unlink(directory + "/" + name) }
        }
        closedir(handle)
    }
    rmdir(directory)
}

/// Measures a rate limit changed while a download runs (for `scripts/bench --scenarios rc`):
/// one download under a shared ``RateLimit`` that starts at the first rate and moves to each
/// next one after `--interval` seconds. Prints one JSON line per interval: the rate asked for,
/// the rate measured over the interval (bytes written at its end less at its start, from the
/// download's progress events), and their ratio. The download is stopped after the last
/// interval; its data is left in a temporary directory that is removed.
struct RateChange: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "change",
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
        let directory = try temporaryDirectory()
        defer { removeDirectory(directory) }
        let limit = RateLimit(bytesPerSecond: targets[0])
        var options = DownloadOptions()
        options.connections = connections
        options.rateLimit = limit
        options.progressInterval = .milliseconds(50)
        options.durability.syncBeforeRename = false
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

/// Measures an idle queue (for `scripts/bench --scenarios idle`): `--downloads` downloads of
/// `URL` start in a ``DownloadQueue``, are paused once each has written some bytes, and the
/// queue then sits idle for `--seconds`. Prints one JSON line: the process's CPU time over the
/// idle stretch (user + system, from `/proc/self/stat`), the wall time, and their ratio as a
/// percentage of one core.
struct IdleQueue: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idle",
        abstract: "Measure the CPU of an idle queue with paused downloads.")

    @Argument(help: "The URL to download (slow enough that the downloads are under way when paused).") var url: String
    @Option(help: "Downloads in the queue, all paused.") var downloads = 20
    @Option(help: "Seconds the idle queue is measured.") var seconds: Double = 30

    func run() async throws {
        let directory = try temporaryDirectory()
        defer { removeDirectory(directory) }
        let queue = DownloadQueue(maximumActive: downloads)
        var options = DownloadOptions()
        options.connections = 2
        options.durability.syncBeforeRename = false
        let events = queue.subscribe(keepingProgress: 1)
        for index in 0..<downloads {
            try queue.add(url + (url.contains("?") ? "&" : "?") + "n=\(index)", to: FilePath("\(directory)/f\(index)"), options: options,
                          id: "d\(index)")
        }
        // Paused once each has written something, so each has a partial file and a manifest.
        var moving = Set<String>()
        for await event in events where event.event?.progress.map({ $0.bytesWritten > 0 }) == true {
            moving.insert(event.id)
            if moving.count == downloads { break }
        }
        queue.pauseAll()
        await queue.waitUntilIdle()
        let paused = queue.snapshots().filter { $0.state == .paused }.count
        let clock = ContinuousClock()
        let (cpuBefore, wallBefore) = (Self.processCPUSeconds(), clock.now)
        try await Task.sleep(for: .seconds(seconds))
        let (cpuAfter, wall) = (Self.processCPUSeconds(), (clock.now - wallBefore))
        let wallSeconds = wall.seconds
        let cpu = cpuAfter - cpuBefore
        print("{\"paused\":\(paused),\"cpuSeconds\":\(cpu),\"wallSeconds\":\((wallSeconds * 1000).rounded() / 1000),"
            + "\"percentOfACore\":\((cpu / wallSeconds * 100 * 1000).rounded() / 1000)}")
        await queue.shutdown()
    }

    /// This process's user and system CPU time, from `/proc/self/stat` (fields 14 and 15, in
    /// clock ticks).
    static func processCPUSeconds() -> Double {
        guard let file = fopen("/proc/self/stat", "r") else { return 0 }
        defer { fclose(file) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = fread(&buffer, 1, buffer.count, file)
        let text = String(decoding: buffer.prefix(count), as: UTF8.self)
        // The command name may hold spaces: fields are counted after its closing parenthesis.
        guard let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state): utime is field 14, stime field 15.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// Measures a queue of many waiting downloads (nothing is fetched: every one is added paused):
/// the time to add them, to take a snapshot of all, to resume and pause them all, and to move
/// one from the end to the front. Prints one JSON line, in seconds.
struct QueueScale: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "Measure the operations of a queue of many waiting downloads.")

    @Option(help: "Downloads in the queue.") var downloads = 20_000

    func run() async throws {
        let queue = DownloadQueue(maximumActive: 5)
        let clock = ContinuousClock()
        let add = try clock.measure {
            for index in 0..<downloads {
                try queue.add("http://127.0.0.1:9/f\(index)", to: FilePath("/nonexistent/f\(index)"), id: "d\(index)", paused: true)
            }
        }
        var count = 0
        let snapshot = clock.measure { count = queue.snapshots().count }
        let move = clock.measure { queue.move("d\(downloads - 1)", to: 0) }
        let pause = clock.measure { for index in 0..<100 { queue.setPriority("d\(index)", 1) } }
        await queue.shutdown()
        print("{\"downloads\":\(count),\"addSeconds\":\(add.seconds),\"snapshotsSeconds\":\(snapshot.seconds),"
            + "\"moveSeconds\":\(move.seconds),\"hundredPrioritiesSeconds\":\(pause.seconds)}")
    }
}

/// Measures the queue's decisions alone (``QueueSchedule``, no download): a list of
/// `--downloads` added at the end, then run through `--slots` slots readied ahead as `-i` runs
/// one, each download admitted, its network part over, then ended, the last started first.
/// Prints one JSON line, in seconds.
struct ScheduleDrain: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedule",
        abstract: "Measure a queue's decisions for a long list, without downloading.")

    @Option(help: "Downloads in the list.") var downloads = 100_000
    @Option(help: "Downloads at once.") var slots = 8

    func validate() throws {
        guard downloads >= 0 else { throw ValidationError("--downloads must be 0 or more") }
        guard slots >= 1 else { throw ValidationError("--slots must be 1 or more") }
    }

    func run() throws {
        var schedule = QueueSchedule(maximumActive: slots, readiesAhead: true)
        var started: [String] = []
        func collect(_ actions: [QueueSchedule.Action]) {
            for case .start(let id) in actions { started.append(id) }
        }
        let clock = ContinuousClock()
        let add = clock.measure {
            for index in 0..<downloads { collect(schedule.add("d\(index)")) }
        }
        var ended = 0
        let drain = clock.measure {
            while let id = started.popLast() {
                collect(schedule.admitted(id))
                collect(schedule.transferred(id))
                collect(schedule.ended(id, .completed))
                ended += 1
            }
        }
        // A broken schedule, not bad input: said without the usage a ValidationError prints.
        guard ended == downloads, schedule.isIdle else { throw DrainIncomplete(ended: ended, downloads: downloads, idle: schedule.isIdle) }
        print("{\"downloads\":\(downloads),\"slots\":\(slots),\"addSeconds\":\(add.seconds),\"drainSeconds\":\(drain.seconds)}")
    }
}

/// The schedule did not end every download of the list it was given.
struct DrainIncomplete: Error, CustomStringConvertible {
    let ended: Int
    let downloads: Int
    let idle: Bool

    var description: String { "the schedule ended \(ended) of \(downloads) downloads" + (idle ? "" : " and is not idle") }
}
