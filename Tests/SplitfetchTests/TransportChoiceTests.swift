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

extension TransportChoiceTests {
    /// Downloads that start together spread over the transports though none has a transfer yet
    /// (each choice counts from the moment it is made), and a transport whose download's network
    /// part is over is the least busy again.
    @Test func downloadsStartingTogetherSpreadOverTheTransports() async {
        let session = Session(threads: 2)
        let chosen = (0..<4).map { _ in session.assignTransport(for: "http://127.0.0.1/") }
        #expect(chosen.map { $0 === session.transports[0] } == [true, false, true, false])
        chosen[1].unassign()
        #expect(session.assignTransport(for: "http://127.0.0.1/") === session.transports[1])
        await session.shutdown()
    }
}

extension TransportChoiceTests {
    /// A batch gets a transport thread per download at once, at most 16, never fewer than the
    /// default (one per core, at most four).
    @Test func aBatchHasAThreadPerDownloadAtOnce() async {
        let byDefault = Session.defaultThreads
        #expect((1...4).contains(byDefault))
        #expect(Session.transportThreads(downloadsAtOnce: 0) == byDefault)
        #expect(Session.transportThreads(downloadsAtOnce: 1) == byDefault)
        #expect(Session.transportThreads(downloadsAtOnce: 8) == 8)
        #expect(Session.transportThreads(downloadsAtOnce: 16) == 16)
        #expect(Session.transportThreads(downloadsAtOnce: 500) == 16)
        let batch = Session(threads: Session.transportThreads(downloadsAtOnce: 6))
        #expect(batch.transports.count == 6)
        await batch.shutdown()
        let session = Session()
        #expect(session.transports.count == byDefault)
        await session.shutdown()
    }
}

/// HTTP/2 is negotiated by TLS: a request that may go over it waits for a connection to multiplex
/// on only over `https`. Over `http` it is HTTP/1.1 whatever is asked, and waiting held every
/// request to a host until the first response had come back.
@Suite("HTTP/2 only over TLS")
struct MultiplexOnlyOverTLSTests {
    @Test(arguments: [
        ("https://example.com/f", true), ("HTTPS://example.com/f", true), ("http://example.com/f", false),
        ("ftp://example.com/f", false), ("https:", false),
    ])
    func onlyAnHTTPSURLMayMultiplex(url: String, may: Bool) {
        var request = TransferRequest(url: url, options: testOptions())
        request.http2 = true
        #expect(request.mayMultiplex == may)
        request.http2 = false
        #expect(!request.mayMultiplex)
    }

    /// A transport starts its thread (and libcurl) with its first transfer: one that never
    /// transfers has none, and its shutdown returns at once; after it, a transfer fails as
    /// cancelled instead of starting one.
    @Test func aTransportStartsItsThreadWithItsFirstTransfer() async throws {
        try await withServer { server in
            let idle = CurlTransport(maximumConnections: 1)
            idle.setMaximumPerHost(2)
            #expect(!idle.hasStarted)
            await idle.shutdown()
            #expect(!idle.hasStarted)
            let late = await idle.perform(TransferRequest(url: server.url(size: 10), options: testOptions()), sink: nil)
            #expect(late.cancelled && !idle.hasStarted)

            let used = CurlTransport(maximumConnections: 1)
            #expect(!used.hasStarted)
            let result = await used.perform(TransferRequest(url: server.url(size: 1_000), options: testOptions()), sink: nil)
            #expect(result.curlCode == 0 && result.head?.status == 200)
            #expect(used.hasStarted)
            await used.shutdown()
        }
    }

    /// Four requests that may go over HTTP/2 to an `http` server at a round trip of 0.3 s, at once
    /// on one transport: all four reach the server before it ends any response (with the wait,
    /// three were sent only once the first response was back).
    @Test func requestsOverHTTPDoNotWaitForTheFirstResponse() async throws {
        try await withTemporaryDirectory { directory in
        let log = directory + "/timing.log"
        try await withServer(TestServer.Configuration(timingLogPath: log, latencyMilliseconds: 300)) { server in
            let transport = CurlTransport(maximumConnections: 8)
            await withTaskGroup(of: TransferResult.self) { group in
                for index in 0..<4 {
                    var request = TransferRequest(url: server.url(size: Int64(1_000 + index)), options: testOptions())
                    request.http2 = true
                    group.addTask { await transport.perform(request, sink: nil) }
                }
                for await result in group { #expect(result.curlCode == 0 && result.head?.status == 200) }
            }
            await transport.shutdown()
        }
        let lines = (try String(contentsOfFile: log, encoding: .utf8)).split(separator: "\n")
        let events = lines.compactMap { line in line.contains(" request ") ? "request" : line.contains(" response-end ") ? "end" : nil }
        #expect(events.count == 8)
        #expect(Array(events.prefix(4)) == ["request", "request", "request", "request"], "\(lines)")
        }
    }
}

/// Which requests may go over HTTP/2, by policy: under `auto`, whole files and the connection
/// whose last answer came over HTTP/2 (the probe's), never another range.
@Suite("HTTP/2 choice")
struct HTTP2ChoiceTests {
    @Test(arguments: [
        (HTTP2Policy.auto, false, false, true),
        (.auto, false, true, true),
        (.auto, true, false, false),
        (.auto, true, true, true),
        (.always, true, false, true),
        (.always, false, false, true),
        (.never, false, true, false),
        (.never, true, true, false),
    ])
    func aRequestMayGoOverHTTP2(policy: HTTP2Policy, ranged: Bool, lastAnswerOverHTTP2: Bool, allowed: Bool) {
        #expect(policy.allows(ranged: ranged, lastAnswerOverHTTP2: lastAnswerOverHTTP2) == allowed)
    }
}

/// libcurl is loaded at run time (dlopen), once per process, whichever asks first.
@Suite("libcurl's load")
struct LibcurlLoadTests {
    /// Tasks asking at once, with a preload under way or not, all get the one load's outcome,
    /// without a thread of Swift's pool waiting on the loader; the loaded libcurl then parses URLs.
    @Test func tasksAskingAtOnceShareOneLoad() async {
        Libcurl.preload()
        let outcomes = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<16 { group.addTask { await Libcurl.ready() } }
            var all: [String?] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        #expect(outcomes.count == 16)
        #expect(outcomes.allSatisfy { $0 == nil })
        #expect(CurlGlobal.failure == nil)
        let url = CurlURL("http://user:pw@Example.org:8080/a%2Fb")
        #expect(url?.host == "example.org")
        #expect(url?.port == 8080)
        #expect(url?.user == "user")
    }
}
