import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import PostgresNIO
import Splitfetch
@testable import SplitfetchDaemon
import SystemPackage
import TestHTTPServer
import Testing
import DownloadCore
import Foundation

/// A fresh directory, removed (with everything under it) afterwards.
func withTemporaryDirectory<R>(_ body: (String) async throws -> R) async throws -> R {
    var template = Array("/tmp/splitfetch-daemon-test-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
    guard let made else { throw TestFailure("mkdtemp failed") }
    let path = String(cString: made)
    defer { removeTree(path) }
    return try await body(path)
}

/// Removes a tree this test made (no symbolic link is followed: `unlink` removes the link).
func removeTree(_ path: String) {
    if let dir = opendir(path) {
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name != ".", name != ".." else { continue }
            let child = path + "/" + name
            var info = stat()
            if lstat(child, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR { removeTree(child) } else { unlink(child) }
        }
        closedir(dir)
    }
    rmdir(path)
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

let testSecret = "0123456789abcdef0123456789abcdef"

/// A daemon on `store` (by default the SQLite file in `dir/state`), downloading to `dir/root`.
/// A fleet's command, and its stop's last writes, wait 10 s for its database, as in production, or
/// 45 s under ThreadSanitizer: there every suite runs at once, and a pause in a full run once took
/// longer than 10 s (and a stop's writes once did: the restarted daemon found a job completed
/// before the stop still waiting).
func makeDaemon(_ dir: String, maximumActive: Int = 3, store given: (any JobStore)? = nil,
                leaseSeconds: Double = 30,
                commandSeconds: Double = getenv("SPLITFETCH_UNDER_TSAN") != nil ? 45 : 10) async throws -> (Daemon, Aria2RPC) {
    mkdir(dir + "/state", 0o700)
    mkdir(dir + "/root", 0o755)
    let store = try given ?? SQLiteJobStore(path: dir + "/state/jobs.sqlite")
    let daemon = try await Daemon(store: store, root: try DownloadRoot(FilePath(dir + "/root")), maximumActive: maximumActive,
                                  leaseSeconds: leaseSeconds, commandSeconds: commandSeconds, logger: testLogger())
    return (daemon, Aria2RPC(daemon: daemon, secret: try Secret(testSecret)))
}

/// A directory and a PostgreSQL store of a database of its own, reached through a relay that can
/// stop answering (``DelayRelay/stopAnswering()``). The store is closed afterwards (its close
/// has a limit of its own).
func withDatabaseThatCanStopAnswering(_ body: (String, PostgresJobStore, DelayRelay) async throws -> Void) async throws {
    try await withTemporaryDirectory { dir in try await PostgresServer.withDatabase { address in
        let relay = try await DelayRelay(targetHost: address.host, targetPort: address.port, roundTrip: .zero)
        defer { Task { await relay.shutdown() } }
        var through = address
        through.port = relay.port
        let store = try await PostgresJobStore(through, logger: PostgresServer.quiet)
        try await body(dir, store, relay)
        await store.close()
    } }
}

/// Silent, unless `SPLITFETCH_TEST_LOG` names a level (`debug`, `info`, …): then to standard
/// error, for a failure that needs the daemon's own account.
func testLogger() -> Logger {
    guard let level = ProcessEnvironment.current["SPLITFETCH_TEST_LOG"].flatMap(Logger.Level.init(rawValue:)) else {
        return Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
    }
    var logger = Logger(label: "test", factory: { label in StreamLogHandler.standardError(label: label) })
    logger.logLevel = level
    return logger
}

extension Aria2RPC {
    /// Calls `method` with the token and `params`; the result, or the error.
    func call(_ method: String, _ params: JSONValue..., token: String = testSecret) async -> Result<JSONValue, RPCError> {
        var context = CallContext()
        return await call(method, [.string("token:" + token)] + params, &context)
    }

    func result(_ method: String, _ params: JSONValue...) async throws -> JSONValue {
        var context = CallContext()
        return try await call(method, [.string("token:" + testSecret)] + params, &context).get()
    }
}

/// Waits (at most 300 s: ThreadSanitizer runs every suite at once, slowly; a 400 KB download was
/// once seen to take more than 120 s there) until `condition` holds.
func eventually(_ what: String, _ condition: () async -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(300)
    while ContinuousClock.now < deadline {
        if await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw TestFailure("timed out waiting: \(what)")
}

@Suite("Limits on waiting for the database")
struct WithinTests {
    @Test func workThatEndsInTimeGivesItsResult() async throws {
        #expect(try await within(seconds: 60) { 7 }?.get() == 7)
    }

    @Test func workThatDoesNotEndInTimeIsCancelledAndGivesNothing() async throws {
        let cancelled = NIOLockedValueBox(false)
        let answer = await within(seconds: 0.05) { () async throws -> Int in
            do { try await Task.sleep(for: .seconds(3600)) } catch { cancelled.withLockedValue { $0 = true } }
            return 1
        }
        #expect(answer == nil)
        try await eventually("the work is cancelled") { cancelled.withLockedValue { $0 } }
    }

    /// A caller cancelled (a loop stopped) cancels the work, which ends then; the answer is the
    /// work's own, long before the limit of an hour.
    @Test func cancellingTheCallerCancelsTheWork() async {
        let caller = Task {
            await within(seconds: 3600) { () async throws -> Int in
                try await Task.sleep(for: .seconds(3600))
                return 1
            }
        }
        caller.cancel()
        let answer = await caller.value
        #expect(answer.map { result in if case .failure(let error) = result { error is CancellationError } else { false } } == true)
    }
}

@Suite("Daemon")
struct DaemonTests {
    @Test("added jobs download and survive a restart", arguments: StoreKind.available)
    func addedJobsDownloadAndSurviveARestart(kind: StoreKind) async throws {
        let server = try await TestServer(configuration: .init(rateLimit: 2 << 20))
        defer { Task { await server.shutdown() } }
        try await withTemporaryDirectory { dir in try await withStore(kind) { store, reopen in
            let sizes: [Int64] = [300_000, 1 << 20, 2_500_000, 5 << 20]
            var gids: [String] = []
            do {
                let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 1, store: store)
                for (index, size) in sizes.enumerated() {
                    let url = server.url(size: size, name: "f\(index).bin", seed: UInt64(index))
                    // The first runs at its own limit (about 3 s), and is paused the moment it is
                    // added, so that it stays paused across the restart whatever the timing of
                    // the other adds (a queue in PostgreSQL claims a job the moment it is added).
                    let options: JSONValue = index == 0 ? ["out": "f0.bin", "max-download-limit": "100K"] : ["out": .string("f\(index).bin")]
                    let gid = try await rpc.result("aria2.addUri", [.string(url)], options)
                    gids.append(gid.string!)
                    if index == 0 { _ = try await rpc.result("aria2.pause", .string(gids[0])) }
                }
                try await eventually("the second completes") { daemon.job(gids[1])?.state == .complete }
                await daemon.shutdown()
            }
            // A new daemon on the same store: the finished one in the history, the paused one
            // paused, the others back in the queue.
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 2, store: try await reopen())
            #expect(daemon.job(gids[1])?.state == .complete)
            #expect(daemon.job(gids[0])?.state == .paused)
            let waiting = try await rpc.result("aria2.tellWaiting", 0, 10, ["gid", "status"])
            #expect(waiting.array?.contains { $0.object?["gid"]?.string == gids[0] && $0.object?["status"] == "paused" } == true)
            _ = try await rpc.result("aria2.unpause", .string(gids[0]))
            try await eventually("all complete") { gids.allSatisfy { daemon.job($0)?.state == .complete } }
            for (index, size) in sizes.enumerated() {
                let file = dir + "/root/f\(index).bin"
                #expect(try sha256HexOfFile(atPath: file) == SyntheticContent(size: size, seed: UInt64(index)).sha256Hex())
            }
            let stopped = try await rpc.result("aria2.tellStopped", 0, 100, ["gid", "status", "totalLength"])
            #expect(stopped.array?.count == sizes.count)
            _ = try await rpc.result("aria2.purgeDownloadResult")
            #expect(try await rpc.result("aria2.tellStopped", 0, 100).array?.isEmpty == true)
            await daemon.shutdown()
            let reopened = try await reopen()
            #expect(try await reopened.loadAll().isEmpty)
            await reopened.close()
        } }
    }

    /// A daemon of a fleet reads the whole queue again (its listener reconnected) while an add is
    /// being committed: the read does not return the new row, and the add must not be taken for a
    /// job removed meanwhile (it was forgotten, then not written, and answered as added).
    @Test(.enabled(if: PostgresServer.url != nil)) func anAddBeingCommittedSurvivesAReadOfTheWholeQueue() async throws {
        try await addWhileTheTableIsLocked { daemon, fleet in
            daemon.heard(.missed, fleet)
            try await eventually("the queue is read again") { !fleet.state.withLockedValue { $0.reading } }
        }
    }

    /// A table locked for longer than a claim's limit (a migration, a dump, an administrator):
    /// each claim given up is ended by the server too, so the pool keeps connections for reads.
    /// Before, every wake left a claim waiting on the lock with a connection of its own; within
    /// 20 s none was left, and a read of announced changes waited until the lock went (a full
    /// ThreadSanitizer run waited 300 s so).
    @Test(.enabled(if: PostgresServer.url != nil)) func claimsGivenUpOnALockedTableLeaveThePoolItsConnections() async throws {
        // Claims give up after 1 s.
        try await addWhileTheTableIsLocked(leaseSeconds: 2) { daemon, fleet in
            // Eight claims, each given up (the pool has 6 connections; the worker name holds one,
            // the add another).
            for _ in 0..<8 {
                fleet.wake()
                try await Task.sleep(for: .milliseconds(1_300))
            }
            daemon.heard(.missed, fleet)
            let read = await within(seconds: 30) {
                try await eventually("the queue is read again") { !fleet.state.withLockedValue { $0.reading } }
            }
            guard case .success? = read else {
                Issue.record("no connection was left for the read while the table was locked")
                return
            }
        }
    }

    /// A fleet daemon's add of a file, made while another client holds the job table in SHARE
    /// mode (writes wait for it, reads do not). `whileLocked` runs once the add waits for its
    /// commit; then the lock goes, and the add must be in the copy and the table and complete
    /// with the right bytes.
    private func addWhileTheTableIsLocked(leaseSeconds: Double = 30,
                                          _ whileLocked: @escaping @Sendable (Daemon, Fleet) async throws -> Void) async throws {
        let server = try await TestServer(configuration: .init())
        defer { Task { await server.shutdown() } }
        try await withTemporaryDirectory { dir in try await PostgresServer.withDatabase { address in
            let store = try await PostgresJobStore(address, logger: PostgresServer.quiet)
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 1, store: store, leaseSeconds: leaseSeconds)
            let fleet = try #require(daemon.fleet)
            let url = server.url(size: 100_000, name: "a.bin")
            let adding = try await PostgresServer.withClient(address) { client in
                try await client.withConnection { connection in
                    _ = try await connection.query("BEGIN", logger: PostgresServer.quiet)
                    _ = try await connection.query("LOCK TABLE splitfetch_job IN SHARE MODE", logger: PostgresServer.quiet)
                    let adding = Task { try await rpc.result("aria2.addUri", [.string(url)], ["out": "a.bin"]).string }
                    do {
                        try await eventually("the add waits for its commit") { daemon.allJobs().count == 1 }
                        try await whileLocked(daemon, fleet)
                    } catch {
                        _ = try? await connection.query("COMMIT", logger: PostgresServer.quiet)
                        throw error
                    }
                    _ = try await connection.query("COMMIT", logger: PostgresServer.quiet)
                    return adding
                }
            }
            let gid = try #require(try await adding.value)
            #expect(daemon.job(gid) != nil)
            #expect(try await store.loadAll().contains { $0.gid == gid })
            try await eventually("it completes") { daemon.job(gid)?.state == .complete }
            #expect(try sha256HexOfFile(atPath: dir + "/root/a.bin") == SyntheticContent(size: 100_000).sha256Hex())
            await daemon.shutdown()
            await store.close()
        } }
    }

    /// A daemon of a fleet that takes a download off its queue without a command (stopping as it
    /// adopted a claimed job: the race a full run under ThreadSanitizer lost) records nothing:
    /// the queue's `removed` was written as the job's end, and the restarted daemon never ran it.
    @Test(.enabled(if: PostgresServer.url != nil)) func aDownloadTakenOffADaemonOfAFleetIsNotRecordedAsRemoved() async throws {
        try await withFleetRunningOneJob(bytesPerSecond: 50_000) { _, _, store, daemon, gid in
            #expect(await daemon.queue.discard(gid))
            await daemon.writer.flush()
            #expect(daemon.job(gid)?.state == .active)
            let row = try #require(try await store.load([gid]).first)
            #expect(row.job.state == .active && row.holder == daemon.fleet?.worker)
            // The stop lets its lease go: it waits for any worker.
            await daemon.shutdown()
            #expect(try await store.load([gid]).first?.job.state == .waiting)
        }
    }

    /// A claim's answer is adopted while a read of the same row may come back first (the claim's
    /// own announcement): that row says `active`, held here, but the job is not in the queue yet.
    /// The copy keeps its own record; taking the row's showed the job running (a full run saw it
    /// `active`, then `waiting` as the adoption went on) and announced its start twice.
    @Test(.enabled(if: PostgresServer.url != nil)) func aRowClaimedHereIsNotTakenAsRunningBeforeItIsAdopted() async throws {
        try await withTemporaryDirectory { dir in try await PostgresServer.withDatabase { address in
            let store = try await PostgresJobStore(address, logger: PostgresServer.quiet)
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 1, store: store)
            let fleet = try #require(daemon.fleet)
            let gid = try #require(try await rpc.result("aria2.addUri", [.string("http://127.0.0.1:9/a.bin")],
                                                        ["out": "a.bin", "pause": "true"]).string)
            var claimed = try #require(daemon.job(gid))
            claimed.state = .active
            daemon.apply([.init(job: claimed, holder: fleet.worker, version: 1 << 40)], asked: [gid], fleet)
            #expect(daemon.job(gid)?.state == .paused)
            await daemon.shutdown()
            await store.close()
        } }
    }

    /// A daemon of a fleet whose renewals went unconfirmed stops what runs, but a job that ended
    /// here still has its end written once the database takes writes again. The end waits
    /// behind a write the locked table holds up; letting the job go with the running ones
    /// dropped it, and the restarted daemon found the job unfinished.
    ///
    /// Not under ThreadSanitizer: in its full run the test took longer than 10 s to lock the
    /// table, and the job had ended (and its end been written) before the scenario was set up.
    @Test(.enabled(if: PostgresServer.url != nil && getenv("SPLITFETCH_UNDER_TSAN") == nil))
    func anEndWaitingToBeWrittenSurvivesUnconfirmedRenewals() async throws {
        // About 10 s to download: the table is locked while it runs.
        try await withFleetRunningOneJob(bytesPerSecond: 100_000, leaseSeconds: 3600) { dir, address, store, daemon, gid in
            let fleet = try #require(daemon.fleet)
            await daemon.writer.flush()
            try await PostgresServer.withClient(address) { client in
                try await client.withConnection { connection in
                    // Writes to the table wait for this transaction.
                    _ = try await connection.query("BEGIN", logger: PostgresServer.quiet)
                    _ = try await connection.query("LOCK TABLE splitfetch_job IN SHARE MODE", logger: PostgresServer.quiet)
                    try #require(daemon.job(gid)?.state == .active, "the job still runs when the table is locked")
                    daemon.writer.persistSoon([gid], whileHeld: true)
                    try await eventually("it completes here") { daemon.job(gid)?.state == .complete }
                    daemon.stopUnconfirmed(fleet, error: "a test")
                    #expect(fleet.holds(gid))
                    _ = try await connection.query("COMMIT", logger: PostgresServer.quiet)
                }
            }
            // Within a minute (the writes held up go on at the commit). Let go, the job was
            // claimed again and found complete from its file: written too, but by a second claim.
            var written = false
            for _ in 0..<3000 where !written {
                written = (try? await store.load([gid]))?.first?.job.state == .complete
                if !written { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(written, "the end of the job that ended here is written")
            #expect(fleet.state.withLockedValue { $0.statistics.claimedJobs } == 1, "written as it ended, not claimed again")
            #expect(try sha256HexOfFile(atPath: dir + "/root/a.bin") == SyntheticContent(size: 1 << 20).sha256Hex())
            await daemon.shutdown()
        }
    }

    /// A daemon of a fleet, on a database of its own, running one job (1 MiB at
    /// `bytesPerSecond`): `body` gets the directory, the database's address, the store, the
    /// daemon and the job. The store is closed after it.
    private func withFleetRunningOneJob(bytesPerSecond: Int64, leaseSeconds: Double = 30,
                                        _ body: (String, PostgresAddress, PostgresJobStore, Daemon, String) async throws -> Void) async throws {
        let server = try await TestServer(configuration: .init(rateLimit: bytesPerSecond))
        defer { Task { await server.shutdown() } }
        try await withTemporaryDirectory { dir in try await PostgresServer.withDatabase { address in
            let store = try await PostgresJobStore(address, logger: PostgresServer.quiet)
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 1, store: store, leaseSeconds: leaseSeconds)
            let gid = try #require(try await rpc.result("aria2.addUri", [.string(server.url(size: 1 << 20, name: "a.bin"))],
                                                        ["out": "a.bin"]).string)
            try await eventually("it runs") { daemon.job(gid)?.state == .active }
            try await body(dir, address, store, daemon, gid)
            await store.close()
        } }
    }

    /// A database that stopped answering (a host that froze or left the network, its
    /// connections left open: no error ever comes). A pause is answered after its limit (10 s,
    /// as in production, here under ThreadSanitizer too: nothing can answer it sooner), not
    /// made, and a claim counts as failed after its own (half a lease: 2 s here), so that
    /// claims go on once the database answers. The bound of 60 s only tells a request waiting
    /// for ever from an answer.
    @Test(.enabled(if: PostgresServer.url != nil))
    func aDaemonAnswersWhileTheDatabaseDoesNotAnswer() async throws {
        let server = try await TestServer(configuration: .init(rateLimit: 50_000))
        defer { Task { await server.shutdown() } }
        try await withDatabaseThatCanStopAnswering { dir, store, relay in
            // Room for a second job: the claim loop asks for one when woken.
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 2, store: store, leaseSeconds: 4,
                                                     commandSeconds: Self.deadDatabaseCommandSeconds)
            let fleet = try #require(daemon.fleet)
            let gid = try #require(try await rpc.result("aria2.addUri", [.string(server.url(size: 1 << 20, name: "slow.bin"))],
                                                        ["out": "slow.bin"]).string)
            try await eventually("it runs") { daemon.job(gid)?.state == .active }
            relay.stopAnswering()
            let paused = await within(seconds: 60) { await rpc.call("aria2.pause", .string(gid)) }
            guard case .success(.failure(let refusal))? = paused else {
                Issue.record("the pause was not refused in time: \(String(describing: paused))")
                return
            }
            #expect(refusal.message.contains("did not answer"))
            fleet.wake()
            try await eventually("a claim is out") { fleet.state.withLockedValue { $0.claiming } }
            try await eventually("the claim counts as failed") { fleet.state.withLockedValue { !$0.claiming && $0.claimWarned } }
            await daemon.shutdown()
        }
    }

    /// A daemon told to stop while its claim waits for a database that stopped answering still
    /// stops: the claim is left (5 s), and the database's part of the stop has its limit (the
    /// command time, 10 s). The bound of 90 s only tells that hang (the stop waited for the claim
    /// for ever) from a stop. (With the 45 s the other tests under ThreadSanitizer give a
    /// database that answers slowly, the 40 s left were once not enough in CI.)
    @Test(.enabled(if: PostgresServer.url != nil))
    func aDaemonStopsWhileItsClaimWaitsForADatabaseThatStoppedAnswering() async throws {
        try await withDatabaseThatCanStopAnswering { dir, store, relay in
            let (daemon, _) = try await makeDaemon(dir, maximumActive: 1, store: store,
                                                   commandSeconds: Self.deadDatabaseCommandSeconds)
            let fleet = try #require(daemon.fleet)
            relay.stopAnswering()
            fleet.wake()
            try await eventually("a claim is out") { fleet.state.withLockedValue { $0.claiming } }
            let stopped = await within(seconds: 90) { await daemon.shutdown() }
            // (The claim may still be out, or have ended on its cancellation: postgres-nio gives up
            // waiting for a connection when cancelled, not waiting for a query's answer.)
            #expect(stopped, "the stop waits for the database")
        }
    }

    /// A claimed job whose file is in place with no partial (its worker died as it renamed the
    /// file) is complete, unless another job of the queue completed that file. That is the
    /// database's to say: while it does not answer, the job is neither completed nor refused,
    /// but let go, to be claimed again. (Refused, such a job failed in the fleet kill loop as
    /// the database went away.)
    @Test("a claimed job found finished is complete, or let go while the database does not answer",
          .enabled(if: PostgresServer.url != nil), arguments: [true, false])
    func aClaimedJobFoundFinished(databaseAnswers: Bool) async throws {
        try await withDatabaseThatCanStopAnswering { dir, store, relay in
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 1, store: store, leaseSeconds: 4,
                                                     commandSeconds: Self.deadDatabaseCommandSeconds)
            let fleet = try #require(daemon.fleet)
            let gid = try #require(try await rpc.result("aria2.addUri", [.string("http://127.0.0.1:9/done.bin")],
                                                        ["out": "done.bin", "pause": "true"]).string)
            try #require(FileManager.default.createFile(atPath: dir + "/root/done.bin", contents: Data(count: 1000)))
            var claimed = try #require(daemon.job(gid))
            claimed.state = .active
            if !databaseAnswers { relay.stopAnswering() }
            let answered = await daemon.adopt(.init(job: claimed, holder: fleet.worker, version: 1 << 40), fleet)
            #expect(answered == databaseAnswers)
            #expect(fleet.holds(gid) == databaseAnswers)
            #expect(daemon.job(gid)?.state == (databaseAnswers ? .complete : .waiting))
            await daemon.shutdown()
        }
    }

    /// How long a command or a stop waits for a database that never answers, in the tests of
    /// one: the production value, under ThreadSanitizer too, since no load makes it answer.
    static let deadDatabaseCommandSeconds = 10.0

    /// conditional-get: a second job for a file already there asks with the validators the
    /// daemon recorded; unchanged, the file is left alone. Without it, the file is refused.
    @Test func aConditionalGetJobRefreshesWithTheRecordedValidators() async throws {
        let server = try await TestServer(configuration: .init())
        defer { Task { await server.shutdown() } }
        try await withTemporaryDirectory { dir in
            let (daemon, rpc) = try await makeDaemon(dir)
            let url = server.url(size: 400_000, name: "r.bin")
            let first = try await rpc.result("aria2.addUri", [.string(url)], ["out": "r.bin"]).string!
            try await eventually("the first completes") { daemon.job(first)?.state == .complete }
            let recorded = try #require(daemon.job(first)?.validators)
            #expect(recorded.etag == "\"sf-400000-0\"")
            let refused = await rpc.call("aria2.addUri", [.string(url)], ["out": "r.bin"])
            #expect((try? refused.get()) == nil)
            let sent = server.recordedRequests.count
            let second = try await rpc.result("aria2.addUri", [.string(url)], ["out": "r.bin", "conditional-get": "true"]).string!
            try await eventually("the refresh completes") { daemon.job(second)?.state == .complete }
            let requests = server.recordedRequests.dropFirst(sent)
            #expect(requests.count == 1 && requests.first?.header("if-none-match") == "\"sf-400000-0\"")
            #expect(daemon.job(second)?.validators == recorded)
            #expect(try sha256HexOfFile(atPath: dir + "/root/r.bin") == SyntheticContent(size: 400_000).sha256Hex())
            await daemon.shutdown()
            let stored = try await SQLiteJobStore(path: dir + "/state/jobs.sqlite").loadAll()
            #expect(stored.first { $0.gid == second }?.validators == recorded)
        }
    }

    @Test func aWrongOrMissingTokenIsRefused() async throws {
        try await withTemporaryDirectory { dir in
            let (daemon, rpc) = try await makeDaemon(dir)
            #expect(await rpc.call("aria2.getGlobalStat", token: "wrong") == .failure(.unauthorized))
            var context = Aria2RPC.CallContext()
            #expect(await rpc.call("aria2.getGlobalStat", [], &context) == .failure(.unauthorized))
            #expect(context.unauthorized)
            // Listing the methods needs no token, as in aria2.
            #expect(try await rpc.call("system.listMethods", [], &context).get().array?.contains("aria2.addUri") == true)
            let reply = await rpc.reply(to: Array("{not json".utf8))
            let answer = try JSONDecoder().decode(JSONValue.self, from: Data(reply.body))
            #expect(answer.object?["error"]?.object?["code"] == .number(-32700))
            await daemon.shutdown()
        }
    }

    @Test("options the API may not set, and paths that leave the root, are refused", arguments: [
        ["on-download-complete": "/bin/sh"],
        ["log": "/tmp/x.log"],
        ["save-session": "/tmp/session"],
        ["dir": "/etc"],
        ["dir": "../outside"],
        ["out": "../escape.bin"],
        ["out": "/etc/passwd"],
        ["dir": "link"],
        ["no-such-option": "1"],
    ])
    func refusedOptions(options: [String: String]) async throws {
        try await withTemporaryDirectory { dir in
            let (daemon, rpc) = try await makeDaemon(dir)
            // A subdirectory of the root that is a symbolic link to outside it.
            symlink("/tmp", dir + "/root/link")
            let result = await rpc.call("aria2.addUri", ["http://127.0.0.1:9/file.bin"],
                                        .object(options.mapValues { .string($0) }))
            guard case .failure(let error) = result else { Issue.record("accepted \(options)"); return }
            #expect(error.code == 1)
            #expect(daemon.allJobs().isEmpty)
            await daemon.shutdown()
        }
    }

    @Test func theWaitingWindowCountsFromEitherEnd() throws {
        let jobs = (0..<5).map { Job(gid: "g\($0)", order: Double($0), uris: ["u"], destination: "/d\($0)", options: [:],
                                     state: .waiting, addedAt: 0) }
        #expect(try Aria2RPC.window(jobs, [1, 2]).map(\.gid) == ["g1", "g2"])
        #expect(try Aria2RPC.window(jobs, [-1, 2]).map(\.gid) == ["g4", "g3"])
        #expect(try Aria2RPC.window(jobs, [9, 2]).isEmpty)
        #expect(throws: RPCError.self) { try Aria2RPC.window(jobs, [1]) }
    }
}

@Suite("Daemon parts")
struct DaemonPartTests {
    @Test func theSecretMatchesOnlyItself() throws {
        let secret = try Secret(testSecret)
        #expect(secret.matches(testSecret))
        #expect(!secret.matches(testSecret + "x"))
        #expect(!secret.matches(String(testSecret.dropLast())))
        #expect(!secret.matches(""))
        #expect("\(secret)" == "<secret>")
        #expect(throws: RPCError.self) { try Secret("short") }
    }

    @Test func aGeneratedSecretIsReadableByItsOwnerOnly() async throws {
        try await withTemporaryDirectory { dir in
            let first = try Secret.load(file: nil, stateDirectory: FilePath(dir))
            var info = stat()
            #expect(stat(dir + "/secret", &info) == 0 && info.st_mode & 0o777 == 0o600)
            let second = try Secret.load(file: nil, stateDirectory: FilePath(dir))
            let text = try String(decoding: readAll(dir + "/secret"), as: UTF8.self).trimmingWhitespace
            #expect(first.matches(text) && second.matches(text))
            chmod(dir + "/secret", 0o644)
            #expect(throws: RPCError.self) { try Secret.load(file: FilePath(dir + "/secret"), stateDirectory: FilePath(dir)) }
        }
    }

    @Test("aria2 options map onto Splitfetch's", arguments: [
        (["split": "4"], 4, nil as Int64?, false),
        (["split": "16", "max-connection-per-server": "2"], 2, nil, false),
        (["max-download-limit": "512K"], 8, Int64(512 << 10), false),
        (["max-download-limit": "0", "pause": "true"], 8, nil, true),
        (["allow-overwrite": "true", "bt-max-peers": "3"], 8, nil, false),
    ])
    func optionsMap(values: [String: String], connections: Int, rate: Int64?, paused: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let parsed = try Aria2Options.parse(values, base: DownloadOptions(), root: DownloadRoot(FilePath(dir)), resolvingPaths: true)
            #expect(parsed.options.connections == connections)
            #expect(parsed.bytesPerSecond == rate)
            #expect(parsed.paused == paused)
            #expect(parsed.reported == values)
        }
    }

    @Test func aChecksumAndHeadersAreTyped() async throws {
        try await withTemporaryDirectory { dir in
            let hex = String(repeating: "ab", count: 32)
            let parsed = try Aria2Options.parse(["checksum": "sha-256=" + hex, "header": "X-A: 1\nX-B: 2", "min-split-size": "2M"],
                                                base: DownloadOptions(), root: DownloadRoot(FilePath(dir)), resolvingPaths: true)
            #expect(parsed.options.integrity.expectedDigests.first?.digest.hex == hex)
            #expect(parsed.options.headers.map(\.name) == ["X-A", "X-B"])
            #expect(parsed.options.minimumSegmentSize == 2 << 20)
            #expect(throws: RPCError.self) {
                try Aria2Options.parse(["checksum": "sha-256=zz"], base: DownloadOptions(), root: DownloadRoot(FilePath(dir)), resolvingPaths: true)
            }
        }
    }

    @Test("Splitfetch's own options: priority and content-disposition (not with out)", arguments: [
        (["priority": "5"], 5, false),
        (["priority": "-3", "content-disposition": "true"], -3, true),
        (["content-disposition": "true", "out": "x.bin"], 0, false),
    ])
    func ownOptions(values: [String: String], priority: Int, contentDisposition: Bool) async throws {
        try await withTemporaryDirectory { dir in
            let parsed = try Aria2Options.parse(values, base: DownloadOptions(), root: DownloadRoot(FilePath(dir)), resolvingPaths: true)
            #expect(parsed.priority == priority)
            #expect(parsed.options.useContentDisposition == contentDisposition)
            for bad in [["priority": "1001"], ["priority": "high"], ["content-disposition": "yes"]] {
                #expect(throws: RPCError.self) {
                    try Aria2Options.parse(bad, base: DownloadOptions(), root: DownloadRoot(FilePath(dir)), resolvingPaths: true)
                }
            }
        }
    }

    /// A priority set through `changeOption` reorders the queue, shows in `tellStatus`, and is
    /// kept across a restart; `splitfetch.onProgress` carries the active download's segment map.
    @Test func aPriorityReordersTheQueueAndSurvivesARestart() async throws {
        let server = try await TestServer(configuration: .init(rateLimit: 1 << 20))
        defer { Task { await server.shutdown() } }
        try await withTemporaryDirectory { dir in
            var gids: [String] = []
            do {
                let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 1)
                for index in 0..<3 {
                    let url = server.url(size: 8 << 20, name: "p\(index).bin", seed: UInt64(index))
                    gids.append(try await rpc.result("aria2.addUri", [.string(url)], ["split": "2"]).string!)
                }
                try await eventually("the first is active") { daemon.job(gids[0])?.state == .active }
                _ = try await rpc.result("aria2.changeOption", .string(gids[2]), ["priority": "7"])
                let waiting = try await rpc.result("aria2.tellWaiting", 0, 10, ["gid", "splitfetch.priority"])
                #expect(waiting.array?.compactMap { $0.object?["gid"]?.string } == [gids[2], gids[1]])
                #expect(waiting.array?.first?.object?["splitfetch.priority"] == "7")
                if case .success = await rpc.call("aria2.changeOption", .string(gids[1]), ["priority": "x"]) {
                    Issue.record("a priority that is not a number was taken")
                }
                try await eventually("the map arrives") {
                    let progress = rpc.progressNotification().object?["downloads"]?.array?.first?.object
                    let segments = progress?["segments"]?.array ?? []
                    return progress?["gid"]?.string == gids[0] && segments.first?.array?.first == 0
                        && segments.last?.array?[1].integer == 8 << 20 && progress?["connections"]?.array?.count == 2
                }
                await daemon.shutdown()
            }
            let (daemon, rpc) = try await makeDaemon(dir, maximumActive: 0)
            #expect(daemon.job(gids[2])?.priority == 7)
            let order = try await rpc.result("aria2.tellWaiting", 0, 10, ["gid"]).array?.compactMap { $0.object?["gid"]?.string }
            #expect(order?.first == gids[2])
            await daemon.shutdown()
        }
    }

    @Test func directoriesStayUnderTheRoot() async throws {
        try await withTemporaryDirectory { dir in
            let root = try DownloadRoot(FilePath(dir))
            #expect(try root.directory("a/b").string == root.path.string + "/a/b")
            #expect(try root.directory(root.path.string + "/a").string == root.path.string + "/a")
            #expect(try root.file("x/y.bin", in: root.path).string == root.path.string + "/x/y.bin")
            symlink("/", dir + "/up")
            #expect(throws: RPCError.self) { try root.directory("up") }
            #expect(throws: RPCError.self) { try root.directory("up/etc") }
            #expect(throws: RPCError.self) { try root.directory("a/../../etc") }
            #expect(throws: RPCError.self) { try root.file("../x", in: root.path) }
            #expect(throws: RPCError.self) { try root.file("up/x", in: root.path) }
        }
    }

    @Test func theStoreKeepsEveryFieldAndRefusesADamagedFile() async throws {
        try await withTemporaryDirectory { dir in
            let path = dir + "/jobs.sqlite"
            let (job, failed) = (sampleJobs()[0], sampleJobs()[1])
            do {
                let store = try SQLiteJobStore(path: path)
                // Every commit syncs the log: FULL, not the NORMAL GRDB sets for WAL.
                #expect(try store.synchronousLevel() == 2)
                try await store.save(upserting: [job, failed], deleting: [])
                try await store.save(upserting: [], deleting: [failed.gid])
            }
            let loaded = try await SQLiteJobStore(path: path).loadAll()
            #expect(loaded == [job])
            // Not a database: refused, and the file is left as it was.
            let junk = dir + "/junk.sqlite"
            let fd = open(junk, O_WRONLY | O_CREAT, 0o600)
            _ = write(fd, String(repeating: "not a database ", count: 400), 6000)
            close(fd)
            #expect(throws: StoreError.self) { try SQLiteJobStore(path: junk) }
            #expect(try readAll(junk).count == 6000)
        }
    }
}

func readAll(_ path: String) throws -> [UInt8] {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw TestFailure("cannot open \(path)") }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(fd, &buffer, buffer.count)
        if count <= 0 { break }
        bytes += buffer[..<count]
    }
    return bytes
}

@Suite("JSON values")
struct JSONValueTests {
    @Test("serialized JSON reads back as the same value", arguments: [
        JSONValue.null, true, 0, -12, .number(1.5), .number(1e20), "plain", "quote \" backslash \\ newline \n tab \t bell \u{7} é ✓",
        [1, "two", [true, .null]], ["a": 1, "b": ["c": "d"], "": ""],
    ] as [JSONValue])
    func roundTrip(value: JSONValue) throws {
        let text = value.serialized()
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(text)) == value)
        // The parser the daemon uses tells booleans from the numbers 1 and 0.
        #expect(try JSONValue.parse(text) == value)
    }

    @Test func theParserKeepsBooleansAndNumbersApart() throws {
        #expect(try JSONValue.parse(Array(#"[true,false,1,0,1.5,"1",null]"#.utf8))
                == [true, false, 1, 0, .number(1.5), "1", .null])
        #expect(throws: (any Error).self) { try JSONValue.parse(Array("{not json".utf8)) }
    }
}

@Suite("Job store text")
struct StoreTextTests {
    @Test("URI lists read back, with or without the fast path", arguments: [
        #"["http://a/x"]"#, #"["http://a/x","http://b/x"]"#, #"["http://a/x?q=\"quoted\""]"#, #"["http://a/\\x"]"#, "[]",
        // As JSONEncoder writes them (slashes escaped), other short escapes, UTF-8, and what the
        // fast reader leaves to the decoder (white space, \u escapes).
        #"["http:\/\/a\/x","b\tc\nd\re\bf\fg"]"#, #"["café ✓"]"#, #"["é\u00e9"]"#, #"[ "a" , "b" ]"#, #"[""]"#,
    ])
    func uris(text: String) throws {
        #expect(try SQLiteJobStore.strings(text) == JSONDecoder().decode([String].self, from: Data(text.utf8)))
    }

    @Test("option maps read back, with or without the fast path", arguments: [
        "{}", #"{"out":"a.bin"}"#, #"{"out":"a.bin","pause":"true"}"#, #"{"header":"X-A: 1\nX-B: 2","out":"b"}"#,
        #"{"out":"q\"uote","split":"4"}"#, #"{"a":"","b":""}"#, #"{"x":"1,2:3"}"#,
        #"{"dir":"a\/b","header":"X: \"1\""}"#, #"{ "a" : "1" }"#, #"{"\u0061":"b"}"#,
    ])
    func options(text: String) throws {
        #expect(try SQLiteJobStore.dictionary(text) == JSONDecoder().decode([String: String].self, from: Data(text.utf8)))
    }

    @Test("what the store writes reads back, by the fast reader and by the decoder", arguments: [
        [], [""], ["http://a/x?y=1&z=\"2\""], ["a\\b", "tab\there", "nl\ncr\rbs\u{8}ff\u{C}", "bell\u{7}\u{1F}end", "é ✓ 🎉"],
    ] as [[String]])
    func written(strings: [String]) throws {
        let list = FlatJSON.encode(strings)
        #expect(try SQLiteJobStore.strings(list) == strings)
        #expect(try JSONDecoder().decode([String].self, from: Data(list.utf8)) == strings)
        let object = Dictionary(uniqueKeysWithValues: strings.enumerated().map { ("k\($0.offset)\($0.element)", $0.element) })
        let text = FlatJSON.encode(object)
        #expect(try SQLiteJobStore.dictionary(text) == object)
        #expect(try JSONDecoder().decode([String: String].self, from: Data(text.utf8)) == object)
    }

    @Test("what is not JSON is refused, as the decoder refuses it", arguments: [
        #"["a""#, #"["a\x"]"#, "[\"a\u{1}\"]", #"{"a":1}"#, #"{"a"}"#, #"["a"]x"#, "",
    ])
    func refused(text: String) {
        #expect(FlatJSON.strings(text) == nil)
        #expect(FlatJSON.object(text) == nil)
        #expect(throws: (any Error).self) { try SQLiteJobStore.strings(text) }
        #expect(throws: (any Error).self) { try SQLiteJobStore.dictionary(text) }
    }
}

@Suite("Schedule in the daemon")
struct ScheduleRunnerTests {
    static func berlin() -> Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "Europe/Berlin")!
        return calendar
    }

    /// 2026-03-29 in Berlin: 02:00 CET becomes 03:00 CEST; 2026-10-25: 03:00 CEST becomes 02:00
    /// CET, so 02:00-03:00 happens twice. The schedule sees the wall clock.
    @Test("daylight-saving changes are the calendar's", arguments: [
        ("2026-03-29T00:59:00Z", 7, 1 * 60 + 59),   // Sunday 01:59 CET
        ("2026-03-29T01:00:00Z", 7, 3 * 60),        // Sunday 03:00 CEST: 02:xx never happens
        ("2026-10-25T00:30:00Z", 7, 2 * 60 + 30),   // Sunday 02:30 CEST
        ("2026-10-25T01:30:00Z", 7, 2 * 60 + 30),   // Sunday 02:30 CET, again
        ("2026-11-25T23:30:00Z", 4, 30),            // Thursday 00:30 (UTC Wednesday 23:30): midnight crossed
    ])
    func localTime(instant: String, weekday: Int, minute: Int) throws {
        let date = try Date(instant, strategy: .iso8601)
        #expect(ScheduleRunner.localTime(date, calendar: Self.berlin()) == .init(weekday: weekday, minute: minute))
    }

    @Test func theSkippedHourNeverHoldsAndTheRepeatedOneHoldsTwice() throws {
        let schedule = try BandwidthSchedule(parsing: "02:00-03:00=pause")
        let calendar = Self.berlin()
        let spring = [0, 15, 30, 45, 60, 75].map { try! Date("2026-03-29T00:00:00Z", strategy: .iso8601).addingTimeInterval(Double($0) * 60) }
        #expect(spring.allSatisfy { schedule.setting(at: ScheduleRunner.localTime($0, calendar: calendar)) == nil })
        let autumn = [0, 30, 60, 90].map { try! Date("2026-10-25T00:10:00Z", strategy: .iso8601).addingTimeInterval(Double($0) * 60) }
        #expect(autumn.map { schedule.setting(at: ScheduleRunner.localTime($0, calendar: calendar)) } == [.pause, .pause, .pause, .pause])
    }

    @Test func theNextLookIsTheNextChangeOrAQuarterOfAnHour() throws {
        let schedule = try BandwidthSchedule(parsing: "Mon-Fri 08:00-18:00=1M")
        let calendar = Self.berlin()
        // Wednesday 2026-11-25 07:58:30 in Berlin (06:58:30 UTC): 90 s to 08:00.
        let date = try Date("2026-11-25T06:58:30Z", strategy: .iso8601)
        #expect(ScheduleRunner.secondsUntilLook(schedule, at: date, calendar: calendar) == 90)
        #expect(ScheduleRunner.secondsUntilLook(schedule, at: date.addingTimeInterval(3600), calendar: calendar) == 900)
    }

    @Test func theSettingReachesTheQueue() throws {
        let queue = DownloadQueue(maximumActive: 4, bytesPerSecond: 1000)
        let runner = ScheduleRunner(queue: queue, bytesPerSecond: 1000, maximumActive: 4, calendar: Self.berlin())
        let rules = try BandwidthSchedule(parsing: "Wed 08:00-09:00=pause, Wed 09:00-10:00=2M, Wed 10:00-11:00=0")
        runner.state.withLockedValue { $0.schedule = rules }
        func at(_ utc: String) throws { runner.applyNow(at: try Date(utc, strategy: .iso8601)) }
        try at("2026-11-25T07:30:00Z")  // 08:30 in Berlin
        #expect(queue.maximumActive == 0)
        try at("2026-11-25T08:30:00Z")
        #expect(queue.maximumActive == 4 && queue.bytesPerSecond == 2 << 20)
        try at("2026-11-25T09:30:00Z")
        #expect(queue.bytesPerSecond == nil)
        try at("2026-11-25T10:30:00Z")  // outside every window: the daemon's own limit
        #expect(queue.bytesPerSecond == 1000 && queue.maximumActive == 4)
        runner.stop()
    }
}
