import PercentEncoding
import NIOCore
import NIOHTTP1

/// The test server's answers that are not the synthetic file: outages, a proxy that wants
/// credentials, 503s to the first requests, signed and plain redirects, redirect loops and
/// chains, and the statistics. Decided from the request and the server's counters alone; the
/// ``RequestHandler`` writes what is decided.
enum ScriptedAnswer {
    /// Drop the connection without an answer.
    case close
    /// A short answer with this status, body and extra headers.
    case answer(HTTPResponseStatus, body: String, headers: [(String, String)])
    /// Serve the file at this path (a redirect chain's end names it).
    case file(path: String)

    static func decide(head: HTTPRequestHead, path: String, query: [String: String], counters: TestServer.Counters,
                       proxyAuthentication: Bool) -> ScriptedAnswer {
        if let until = counters.outageUntil.withLockedValue({ $0 }), NIODeadline.now() < until {
            return .close  // down: no answer at all
        }
        if proxyAuthentication, head.method == .CONNECT || head.uri.hasPrefix("http://"),
           head.headers.first(name: "Proxy-Authorization") == nil {
            return .answer(.proxyAuthenticationRequired, body: "credentials, please\n",
                           headers: [("Proxy-Authenticate", "Basic realm=\"test proxy\"")])
        }
        // `outageafter=N&outagems=MS`: when the N-th range request of this URI arrives, the whole
        // server goes down for MS milliseconds (3000 unless given): responses being sent are cut
        // and new connections get no answer, as when a backend restarts.
        if let after = query["outageafter"].flatMap(Int.init), head.headers.first(name: "Range").map({ $0 != "bytes=0-0" }) == true,
           count("outage " + head.uri, in: counters) == after {
            let milliseconds = query["outagems"].flatMap { Int64($0) } ?? 3000
            counters.outageUntil.withLockedValue { $0 = .now() + .milliseconds(milliseconds) }
            return .close
        }
        // `firstfail=N`: the first N requests to this URI, the probe included, get 503 with
        // `Retry-After` (`retryafter=S` seconds, or `retryafter=date:S` as an HTTP-date S s ahead).
        if let first = query["firstfail"].flatMap(Int.init), count(head.uri, in: counters) <= first {
            var extra: [(String, String)] = []
            if let after = query["retryafter"] {
                extra.append(("Retry-After", after.hasPrefix("date:") ? httpDate(secondsFromNow: Int64(after.dropFirst(5)) ?? 0) : after))
            }
            return .answer(.serviceUnavailable, body: "starting up\n", headers: extra)
        }
        // `redirectbody=1`: a redirect carries a small HTML page, as many servers' do.
        let redirectBody = query["redirectbody"] == "1" ? "<html><body><a href=\"elsewhere\">Found</a></body></html>\n" : ""
        // `signredirect=K`: a signed-URL service. Each request is redirected to a fresh signature
        // (`signed=N`) that serves K requests and then answers 403, as an expired S3 presigned URL.
        // `rate` and `nohead` carry over to the signed URL.
        if let lifetime = query["signredirect"] {
            let n = count("sign " + path, in: counters)
            let carried = ["rate", "nohead"].compactMap { key in query[key].map { "&\(key)=\($0)" } }.joined()
            return .answer(.found, body: redirectBody, headers: [("Location", "\(path)?signed=\(n)&expireafter=\(lifetime)\(carried)")])
        }
        if let lifetime = query["expireafter"].flatMap(Int.init), count("signed " + head.uri, in: counters) > lifetime {
            return .answer(.forbidden, body: "Request has expired\n", headers: [])
        }
        if let target = query["redirect"] {
            return .answer(.found, body: redirectBody, headers: [("Location", percentDecoded(Substring(target)))])
        }
        if path.hasPrefix("/loop/") {
            return .answer(.found, body: "", headers: [("Location", head.uri)])
        }
        var path = path
        if path.hasPrefix("/hops/") {
            let parts = path.split(separator: "/", maxSplits: 2)
            if parts.count == 3, let n = Int(parts[1]) {
                let rest = head.uri.firstIndex(of: "?").map { String(head.uri[$0...]) } ?? ""
                if n > 0 {
                    return .answer(.found, body: "", headers: [("Location", "/hops/\(n - 1)/\(parts[2])\(rest)")])
                }
                path = "/" + parts[2]
            }
        }
        if path == "/__stats" {
            let body = "{\"connections\":\(counters.connections.load(ordering: .relaxed)),"
                + "\"peakConnections\":\(counters.peakOpen.load(ordering: .relaxed)),"
                + "\"requests\":\(counters.requests.load(ordering: .relaxed)),"
                + "\"bodyBytes\":\(counters.bodyBytes.load(ordering: .relaxed))}\n"
            return .answer(.ok, body: body, headers: [])
        }
        return .file(path: path)
    }

    /// Counts one more request under `key` and returns the count.
    private static func count(_ key: String, in counters: TestServer.Counters) -> Int {
        counters.allRequests.withLockedValue { counts in
            counts[key, default: 0] += 1
            return counts[key]!
        }
    }
}
