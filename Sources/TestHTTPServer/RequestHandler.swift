import PercentEncoding
import NIOCore
import NIOHTTP1

/// Serves one connection: parses the request, then streams the body at the connection's rate.
final class RequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let counters: TestServer.Counters
    private let defaultRate: Int64
    private let slowed: Bool
    let timing: TimingLog?
    private let latency: TimeAmount
    private let proxyAuthentication: Bool
    /// The close of the connection is counted by this handler: at once when idle, at the next
    /// paced write during a response (``TestServer/Configuration/closeNoticedAtWrite``).
    let closeNoticedAtWrite: Bool
    var closeCounted = false
    /// A response body is being paced out: its next step is scheduled.
    var sending = false
    private var head: HTTPRequestHead?
    var busy = false
    /// Token bucket with no burst: the earliest time the next byte may leave this connection.
    var nextSend: NIODeadline = .now()

    init(counters: TestServer.Counters, defaultRate: Int64, slowed: Bool, timing: TimingLog?, latency: TimeAmount = .zero,
         proxyAuthentication: Bool = false, closeNoticedAtWrite: Bool = false) {
        self.closeNoticedAtWrite = closeNoticedAtWrite
        self.latency = latency
        self.proxyAuthentication = proxyAuthentication
        self.counters = counters
        self.defaultRate = defaultRate
        self.slowed = slowed
        self.timing = timing
    }

    func channelInactive(context: ChannelHandlerContext) {
        // During a response, the send loop's next step notices (noticeClose()).
        if !sending { noticeClose() }
        context.fireChannelInactive()
    }

    /// Counts the connection's close once, when this handler counts closes.
    func noticeClose() {
        guard closeNoticedAtWrite, !closeCounted else { return }
        closeCounted = true
        counters.open.wrappingSubtract(1, ordering: .relaxed)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
        case .body:
            break
        case .end:
            guard let h = head, !busy else { return }
            head = nil
            counters.requests.wrappingAdd(1, ordering: .relaxed)
            timing?.record("request \(h.method) \(h.uri)" + (h.headers.first(name: "Range").map { " \($0)" } ?? ""))
            guard latency > .zero else { return respond(context: context, head: h) }
            busy = true  // until the delayed answer starts
            let waiting = counters.delayed.wrappingAdd(1, ordering: .relaxed).newValue
            if waiting > counters.peakDelayed.load(ordering: .relaxed) { counters.peakDelayed.store(waiting, ordering: .relaxed) }
            context.eventLoop.assumeIsolated().scheduleTask(in: latency) {
                self.counters.delayed.wrappingSubtract(1, ordering: .relaxed)
                self.busy = false
                self.respond(context: context, head: h)
            }
        }
    }

    /// The last byte a `bytes=a-b` range names (`b`), when it names one.
    static func lastByte(_ header: String) -> Int64? {
        guard header.hasPrefix("bytes="), let dash = header.firstIndex(of: "-") else { return nil }
        return Int64(header[header.index(after: dash)...])
    }

    private struct Parsed {
        var path: String
        var query: [String: String]
    }

    private func parse(_ uri: String) -> Parsed {
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var query: [String: String] = [:]
        if parts.count > 1 {
            for item in parts[1].split(separator: "&") {
                let kv = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                query[String(kv[0])] = kv.count > 1 ? String(kv[1]) : ""
            }
        }
        return Parsed(path: String(parts[0]), query: query)
    }

    private func simple(context: ChannelHandlerContext, status: HTTPResponseStatus, body: String,
                        headers extra: [(String, String)] = [], keepAlive: Bool, isHead: Bool = false) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Length", value: String(body.utf8.count))
        headers.add(name: "Content-Type", value: "text/plain")
        for (n, v) in extra { headers.add(name: n, value: v) }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if !isHead {
            var buffer = context.channel.allocator.buffer(capacity: body.utf8.count)
            buffer.writeString(body)
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive {
            done.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    /// Whether a request's conditions say the client's copy is current.
    static func notModified(_ fields: HTTPHeaders, etag: String?, lastModified: String?) -> Bool {
        let tags = fields[canonicalForm: "If-None-Match"]
        if !tags.isEmpty {
            guard let etag else { return false }
            let opaque = { (tag: Substring) in tag.hasPrefix("W/") ? tag.dropFirst(2) : tag }
            return tags.contains { $0 == "*" || opaque($0) == opaque(Substring(etag)) }
        }
        guard let since = fields.first(name: "If-Modified-Since"), let lastModified else { return false }
        return since == lastModified
    }

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead) {
        var request = parse(head.uri)
        let keepAlive = head.isKeepAlive
        let isHead = head.method == .HEAD
        counters.recorded.withLockedValue {
            $0.append(.init(method: head.method.rawValue, uri: head.uri,
                            headers: head.headers.map { ($0.name.lowercased(), $0.value) }))
        }
        switch ScriptedAnswer.decide(head: head, path: request.path, query: request.query, counters: counters,
                                     proxyAuthentication: proxyAuthentication) {
        case .close:
            context.close(promise: nil)
            return
        case .answer(let status, let body, let headers):
            simple(context: context, status: status, body: body, headers: headers, keepAlive: keepAlive, isHead: isHead)
            return
        case .file(let path):
            request.path = path
        }
        let components = request.path.split(separator: "/")
        guard components.count >= 2, components[0] == "size", let size = Int64(components[1]), size >= 0 else {
            simple(context: context, status: .notFound, body: "not found\n", keepAlive: keepAlive, isHead: isHead)
            return
        }
        guard head.method == .GET || head.method == .HEAD else {
            simple(context: context, status: .methodNotAllowed, body: "method not allowed\n", keepAlive: keepAlive)
            return
        }
        // `/size/N/seed/S/NAME` puts the seed in the path, for tools that keep a query in file names.
        var seed = request.query["seed"].flatMap { UInt64($0) } ?? 0
        if components.count >= 5, components[2] == "seed", let pathSeed = UInt64(components[3]) { seed = pathSeed }
        var q = request.query
        // `lm=DATE`: the `Last-Modified` (percent-decoded); a changed file's is a day later.
        var lastModified = q["lm"].map { percentDecoded(Substring($0)) } ?? "Mon, 02 Nov 2026 10:00:00 GMT"
        if let variant = counters.variants.withLockedValue({ $0[request.path] }) {
            seed = variant.seed
            q["etag"] = variant.etag
            lastModified = "Tue, 03 Nov 2026 10:00:00 GMT"
        }
        let content = SyntheticContent(size: size, seed: seed)
        if isHead && q["nohead"] == "1" {
            simple(context: context, status: .methodNotAllowed, body: "", keepAlive: keepAlive, isHead: true)
            return
        }
        if isHead && q["headhang"] == "1" { return }  // never answered; the connection stays open
        var rate = defaultRate
        if let r = q["rate"].flatMap({ Int64($0) }) { rate = slowed ? max(1, r / 16) : r }
        let noLength = q["nolength"]
        // `weaketag=1`: a weak ETag, as Apache sends for a file modified within the last second.
        let etag = (q["weaketag"] == "1" ? "W/" : "") + "\"" + (q["etag"] ?? "sf-\(size)-\(seed)") + "\""
        // `noetag=1`, `nolm=1`: no `ETag`, no `Last-Modified`.
        let sentETag = q["noetag"] == "1" ? nil : etag
        let sentLastModified = q["nolm"] == "1" ? nil : lastModified
        // Conditional requests (RFC 9110 §13.2.2): `If-None-Match` decides when present (weak
        // comparison), else `If-Modified-Since`, compared exactly as nginx does by default.
        // `ignoreconditions=1`: a server that ignores both.
        if q["ignoreconditions"] != "1", Self.notModified(head.headers, etag: sentETag, lastModified: sentLastModified) {
            var fields: [(String, String)] = []
            if let sentETag { fields.append(("ETag", sentETag)) }
            if let sentLastModified { fields.append(("Last-Modified", sentLastModified)) }
            simple(context: context, status: .notModified, body: "", headers: fields, keepAlive: keepAlive, isHead: true)
            return
        }
        // If-Range (RFC 9110 §13.1.5): only a strong validator can match; anything else gets the
        // whole file. `ifrangebroken=1` answers every If-Range with the whole file.
        let ifRange = head.headers.first(name: "If-Range")
        let ifRangeMatches = ifRange.map { $0 == etag && !etag.hasPrefix("W/") && q["ifrangebroken"] != "1" } ?? true
        var honourRanges = q["norange"] != "1" && ifRangeMatches
        if let after = q["rangeafter"].flatMap(Int.init), counters.rangeRequests.withLockedValue({ $0[head.uri] ?? 0 }) >= after {
            honourRanges = false  // ranges worked for the first requests only
        }

        // Scripted faults apply to range requests other than a `bytes=0-0` probe.
        let rangeHeader = head.headers.first(name: "Range")
        var fault: String?
        if !isHead, let rangeHeader, rangeHeader != "bytes=0-0" {
            let index = counters.rangeRequests.withLockedValue { counts in
                counts[head.uri, default: 0] += 1
                return counts[head.uri]!
            }
            let every = q["faultevery"].flatMap(Int.init) ?? 1
            let skip = q["faultskip"].flatMap(Int.init) ?? 0
            // Only the first `faultuntil` range requests of this URI fault: the rest are healthy.
            let until = q["faultuntil"].flatMap(Int.init) ?? Int.max
            if let f = q["fault"], index > skip, index <= until, every > 0, (index - skip) % every == 0 {
                // A comma-separated list mixes faults: each faulted request takes the next one.
                let kinds = f.split(separator: ",").map(String.init)
                fault = kinds.isEmpty ? nil : kinds[((index - skip) / every) % kinds.count]
            }
            if let limit = q["maxconn"].flatMap(Int.init), counters.inflight.load(ordering: .relaxed) >= limit { fault = "busy" }
        }
        switch fault {
        case "busy", "503":
            simple(context: context, status: .serviceUnavailable, body: "busy\n",
                   headers: [("Retry-After", q["retryafter"] ?? "1")], keepAlive: keepAlive)
            return
        case "429":
            simple(context: context, status: .tooManyRequests, body: "slow down\n",
                   headers: [("Retry-After", q["retryafter"] ?? "1")], keepAlive: keepAlive)
            return
        case "416":
            simple(context: context, status: .rangeNotSatisfiable, body: "",
                   headers: [("Content-Range", "bytes */\(size)")], keepAlive: keepAlive)
            return
        case "html200":
            simple(context: context, status: .ok, body: "<html><body>Request has expired</body></html>\n",
                   headers: [("Content-Type", "text/html")], keepAlive: keepAlive)
            return
        case "full200":
            honourRanges = false
        default:
            break
        }

        var status = HTTPResponseStatus.ok
        var range = 0..<size
        var headers = HTTPHeaders()
        // `shortrange416=1`: a range reaching past the end gets 416 with the size, as httpbin's
        // does; `emptyrange416=1`: any range of an empty file gets 416 with no Content-Range, as
        // S3's (and moto's) does.
        if honourRanges, let rangeHeader, !isHead {
            if q["emptyrange416"] == "1", size == 0 {
                simple(context: context, status: .rangeNotSatisfiable, body: "", keepAlive: keepAlive)
                return
            }
            if q["shortrange416"] == "1", let last = Self.lastByte(rangeHeader), last >= size {
                simple(context: context, status: .rangeNotSatisfiable, body: "", headers: [("Content-Range", "bytes */\(size)")],
                       keepAlive: keepAlive)
                return
            }
        }
        if honourRanges, let rangeHeader {
            switch parseRange(rangeHeader, size: size) {
            case .whole:
                break
            case .unsatisfiable:
                simple(context: context, status: .rangeNotSatisfiable, body: "",
                       headers: [("Content-Range", "bytes */\(size)")], keepAlive: keepAlive, isHead: isHead)
                return
            case .range(let r) where q["wholerange200"] == "1" && r == 0..<size:
                break  // httpbin: a range covering the whole file gets 200 and the whole body
            case .range(var r):
                // `rangecap=N`: at most N bytes per range response, as some servers cap them.
                if let cap = q["rangecap"].flatMap({ Int64($0) }), cap > 0, Int64(r.count) > cap {
                    r = r.lowerBound..<(r.lowerBound + cap)
                }
                status = .partialContent
                range = r
                var first = r.lowerBound, total = size
                if fault == "shift" { first += 1 }
                if fault == "total" { total += 1 }
                headers.add(name: "Content-Range", value: "bytes \(first)-\(first + Int64(r.count) - 1)/\(total)")
            }
        }
        if honourRanges && q["noacceptranges"] != "1" { headers.add(name: "Accept-Ranges", value: "bytes") }
        if let sentETag { headers.add(name: "ETag", value: sentETag) }
        if let sentLastModified { headers.add(name: "Last-Modified", value: sentLastModified) }
        headers.add(name: "Content-Type", value: fault == "multipart" ? "multipart/byteranges; boundary=X" : "application/octet-stream")
        if fault == "gzip" { headers.add(name: "Content-Encoding", value: "gzip") }
        if let disposition = q["cd"] { headers.add(name: "Content-Disposition", value: percentDecoded(Substring(disposition))) }
        // `mirrors=URL|URL`: RFC 6249 links to mirrors of the file, in priority order.
        if let mirrors = q["mirrors"] {
            let links = percentDecoded(Substring(mirrors)).split(separator: "|").enumerated().map { "<\($0.element)>; rel=duplicate; pri=\($0.offset + 1)" }
            headers.add(name: "Link", value: links.joined(separator: ", "))
        }
        // `digestchange=head`: a HEAD states the digest of other bytes (same size and ETag), as
        // if the file had changed: a resumed download (which probes with HEAD) must notice.
        let stated = isHead && q["digestchange"] == "head" ? SyntheticContent(size: size, seed: seed &+ 1) : content
        for (name, value) in DigestHeaders.fields(query: q, content: stated, range: range, status: status, cache: counters.digests) {
            headers.add(name: name, value: value)
        }
        var closeAfter = !keepAlive
        var chunked = false
        let extra: Int64 = fault == "long" ? 1000 : 0
        if let cl = q["cl"] {
            headers.add(name: "Content-Length", value: percentDecoded(Substring(cl)))
            if let cl2 = q["cl2"] { headers.add(name: "Content-Length", value: percentDecoded(Substring(cl2))) }
            closeAfter = true
        } else if isHead, let length = q["headlength"] {
            headers.add(name: "Content-Length", value: length)
        } else {
            switch noLength {
            case "chunked" where !isHead:
                headers.add(name: "Transfer-Encoding", value: "chunked")
                chunked = true
            case "close" where !isHead:
                closeAfter = true
            case "chunked", "close":
                break
            default:
                if extra > 0 {
                    headers.add(name: "Transfer-Encoding", value: "chunked")
                    chunked = true
                } else {
                    // `badlength`: a Content-Length that disagrees with the Content-Range.
                    headers.add(name: "Content-Length", value: String(range.count - (fault == "badlength" ? 1 : 0)))
                }
            }
        }
        _ = chunked
        if closeAfter { headers.add(name: "Connection", value: "close") }
        context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        if isHead {
            finish(context: context, close: closeAfter)
            return
        }
        busy = true
        counters.inflight.wrappingAdd(1, ordering: .relaxed)
        let faultBytes = q["faultbytes"].flatMap { Int64($0) } ?? (64 * 1024)
        var plan = SendPlan(content: content, from: range.lowerBound, to: range.upperBound, rate: rate, close: closeAfter)
        plan.extraBytes = extra
        plan.target = head.uri
        plan.corrupt = q["corrupt"].flatMap { Int64($0) }
        plan.dieAfter = q["dieafter"].flatMap { Int64($0) }
        switch fault {
        case "reset": plan.stopAfter = (faultBytes, .close)
        case "stall": plan.stopAfter = (faultBytes, .stall)
        default: break
        }
        sending = true
        send(context: context, plan: plan, sent: 0)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
