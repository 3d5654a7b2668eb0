import NIOCore
import NIOHTTP1

/// Serves one connection: parses the request, then streams the body at the connection's rate.
final class RequestHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let counters: TestServer.Counters
    private let defaultRate: Int64
    private let slowed: Bool
    private let timing: TimingLog?
    private var head: HTTPRequestHead?
    private var busy = false
    /// Token bucket with no burst: the earliest time the next byte may leave this connection.
    private var nextSend: NIODeadline = .now()

    init(counters: TestServer.Counters, defaultRate: Int64, slowed: Bool, timing: TimingLog?) {
        self.counters = counters
        self.defaultRate = defaultRate
        self.slowed = slowed
        self.timing = timing
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
            timing?.record("request \(h.method) \(h.uri)")
            respond(context: context, head: h)
        }
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

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead) {
        var request = parse(head.uri)
        let keepAlive = head.isKeepAlive
        let isHead = head.method == .HEAD
        counters.recorded.withLockedValue {
            $0.append(.init(method: head.method.rawValue, uri: head.uri,
                            headers: head.headers.map { ($0.name.lowercased(), $0.value) }))
        }
        if let target = request.query["redirect"] {
            simple(context: context, status: .found, body: "", headers: [("Location", percentDecode(target))],
                   keepAlive: keepAlive, isHead: isHead)
            return
        }
        if request.path.hasPrefix("/loop/") {
            simple(context: context, status: .found, body: "", headers: [("Location", head.uri)], keepAlive: keepAlive, isHead: isHead)
            return
        }
        if request.path.hasPrefix("/hops/") {
            let parts = request.path.split(separator: "/", maxSplits: 2)
            if parts.count == 3, let n = Int(parts[1]) {
                let query = head.uri.firstIndex(of: "?").map { String(head.uri[$0...]) } ?? ""
                if n > 0 {
                    simple(context: context, status: .found, body: "",
                           headers: [("Location", "/hops/\(n - 1)/\(parts[2])\(query)")], keepAlive: keepAlive, isHead: isHead)
                    return
                }
                request.path = "/" + parts[2]
            }
        }
        if request.path == "/__stats" {
            let s = "{\"connections\":\(counters.connections.load(ordering: .relaxed)),\"requests\":\(counters.requests.load(ordering: .relaxed)),\"bodyBytes\":\(counters.bodyBytes.load(ordering: .relaxed))}\n"
            simple(context: context, status: .ok, body: s, keepAlive: keepAlive)
            return
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
        var seed = request.query["seed"].flatMap { UInt64($0) } ?? 0
        var q = request.query
        if let variant = counters.variants.withLockedValue({ $0[request.path] }) {
            seed = variant.seed
            q["etag"] = variant.etag
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
        let etag = "\"" + (q["etag"] ?? "sf-\(size)-\(seed)") + "\""
        // If-Range (RFC 9110 §13.1.5): a validator that no longer matches gets the whole new file.
        let ifRangeMatches = head.headers.first(name: "If-Range").map { $0 == etag } ?? true
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
        if honourRanges, let rangeHeader {
            switch parseRange(rangeHeader, size: size) {
            case .whole:
                break
            case .unsatisfiable:
                simple(context: context, status: .rangeNotSatisfiable, body: "",
                       headers: [("Content-Range", "bytes */\(size)")], keepAlive: keepAlive, isHead: isHead)
                return
            case .range(let r):
                status = .partialContent
                range = r
                var first = r.lowerBound, total = size
                if fault == "shift" { first += 1 }
                if fault == "total" { total += 1 }
                headers.add(name: "Content-Range", value: "bytes \(first)-\(first + Int64(r.count) - 1)/\(total)")
            }
        }
        if honourRanges && q["noacceptranges"] != "1" { headers.add(name: "Accept-Ranges", value: "bytes") }
        headers.add(name: "ETag", value: etag)
        headers.add(name: "Last-Modified", value: "Mon, 02 Nov 2026 10:00:00 GMT")
        headers.add(name: "Content-Type", value: fault == "multipart" ? "multipart/byteranges; boundary=X" : "application/octet-stream")
        if fault == "gzip" { headers.add(name: "Content-Encoding", value: "gzip") }
        if let disposition = q["cd"] { headers.add(name: "Content-Disposition", value: percentDecode(disposition)) }
        var closeAfter = !keepAlive
        var chunked = false
        let extra: Int64 = fault == "long" ? 1000 : 0
        if let cl = q["cl"] {
            headers.add(name: "Content-Length", value: percentDecode(cl))
            if let cl2 = q["cl2"] { headers.add(name: "Content-Length", value: percentDecode(cl2)) }
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
                    headers.add(name: "Content-Length", value: String(range.count))
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
        switch fault {
        case "reset": plan.stopAfter = (faultBytes, .close)
        case "stall": plan.stopAfter = (faultBytes, .stall)
        default: break
        }
        send(context: context, plan: plan, sent: 0)
    }

    /// What one response body consists of and how it ends.
    struct SendPlan {
        enum Stop { case close, stall }
        var content: SyntheticContent
        var from: Int64
        var to: Int64
        var rate: Int64
        var close: Bool
        /// When the response started, for the timing log.
        var began = NIODeadline.now()
        /// Garbage sent after the range (a body longer than announced).
        var extraBytes: Int64 = 0
        /// After this many body bytes: drop the connection, or go silent with it open.
        var stopAfter: (Int64, Stop)?
    }

    private func finish(context: ChannelHandlerContext, close: Bool) {
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close {
            done.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    /// Streams the plan's bytes; with a rate, each piece waits until the token bucket allows it.
    private func send(context: ChannelHandlerContext, plan: SendPlan, sent: Int64) {
        guard context.channel.isActive else { done(); return }
        let position = plan.from + sent
        let total = plan.to - plan.from + plan.extraBytes
        if let (limit, stop) = plan.stopAfter, sent >= limit {
            counters.inflight.wrappingAdd(-1, ordering: .relaxed)
            switch stop {
            case .close: context.close(promise: nil)
            case .stall: break  // say nothing more; the client must give up
            }
            return
        }
        if sent >= total {
            if let timing {
                let milliseconds = Double((NIODeadline.now() - plan.began).nanoseconds) / 1e6
                timing.record("response-end \(plan.from)-\(plan.to) \(milliseconds)")
            }
            done()
            finish(context: context, close: plan.close)
            return
        }
        let now = NIODeadline.now()
        if plan.rate > 0 && nextSend > now {
            context.eventLoop.assumeIsolated().scheduleTask(deadline: nextSend) {
                self.send(context: context, plan: plan, sent: sent)
            }
            return
        }
        // Pieces of about 1/50 s at the capped rate, so the cap holds with no burst.
        var piece: Int64 = 256 * 1024
        if plan.rate > 0 { piece = max(1024, min(piece, plan.rate / 50)) }
        if let (limit, _) = plan.stopAfter { piece = min(piece, limit - sent) }
        let n = Int(min(piece, total - sent))
        var buffer = context.channel.allocator.buffer(capacity: n)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: n) { raw in
            let fromContent = Int(max(0, min(Int64(n), plan.to - position)))
            if fromContent > 0 {
                plan.content.fill(UnsafeMutableRawBufferPointer(rebasing: raw[0..<fromContent]), from: position)
            }
            for i in fromContent..<n { raw[i] = 0x5A }  // garbage past the range
            return n
        }
        if plan.rate > 0 {
            let base = max(nextSend, now)
            nextSend = base + .nanoseconds(Int64(n) * 1_000_000_000 / plan.rate)
        }
        let written = context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(buffer))))
        counters.bodyBytes.wrappingAdd(Int64(n), ordering: .relaxed)
        written.assumeIsolated().whenComplete { result in
            switch result {
            case .success:
                self.send(context: context, plan: plan, sent: sent + Int64(n))
            case .failure:
                self.done()
                context.close(promise: nil)
            }
        }
    }

    private func done() {
        if busy { counters.inflight.wrappingAdd(-1, ordering: .relaxed) }
        busy = false
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

enum RangeRequest: Equatable {
    case whole
    case unsatisfiable
    case range(Range<Int64>)
}

/// Parses a single-range `Range` header against a size (RFC 9110 §14.1.2).
func parseRange(_ value: String, size: Int64) -> RangeRequest {
    let trimmed = value.trimmingCharactersInSpaces()
    guard trimmed.hasPrefix("bytes=") else { return .whole }
    let spec = trimmed.dropFirst("bytes=".count)
    if spec.contains(",") { return .whole }  // multiple ranges: this server sends the whole body
    let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
    guard parts.count == 2 else { return .whole }
    if parts[0].isEmpty {
        guard let suffix = Int64(parts[1]), suffix > 0 else { return .unsatisfiable }
        if size == 0 { return .unsatisfiable }
        return .range(max(0, size - suffix)..<size)
    }
    guard let first = Int64(parts[0]) else { return .whole }
    if first >= size { return .unsatisfiable }
    let last = parts[1].isEmpty ? size - 1 : min(Int64(parts[1]) ?? -1, size - 1)
    if last < first { return .whole }
    return .range(first..<(last + 1))
}

extension String {
    func trimmingCharactersInSpaces() -> String {
        var s = Substring(self)
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return String(s)
    }
}

/// Decodes `%XX` escapes (and `+` is left alone).
func percentDecode(_ text: String) -> String {
    var bytes: [UInt8] = []
    let input = Array(text.utf8)
    var i = 0
    func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 65...70: c - 55
        case 97...102: c - 87
        default: nil
        }
    }
    while i < input.count {
        if input[i] == 37, i + 2 < input.count, let h = hex(input[i + 1]), let l = hex(input[i + 2]) {
            bytes.append(h << 4 | l)
            i += 3
        } else {
            bytes.append(input[i])
            i += 1
        }
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Encodes everything but unreserved characters as `%XX`, for building test URLs.
public func percentEncode(_ text: String) -> String {
    var out = ""
    for b in text.utf8 {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            out.append(Character(Unicode.Scalar(b)))
        default:
            let h = String(b, radix: 16, uppercase: true)
            out += "%" + (h.count == 1 ? "0" + h : h)
        }
    }
    return out
}
