import NIOCore
import NIOHTTP1

/// Streaming a response body at the connection's rate, and ending it.
extension RequestHandler {
    /// What one response body consists of and how it ends.
    struct SendPlan {
        enum Stop { case close, stall }
        var content: SyntheticContent
        var from: Int64
        var to: Int64
        var rate: Int64
        var close: Bool
        /// When the response started, and the request's target, for the timing log.
        var began = NIODeadline.now()
        var target = ""
        /// Garbage sent after the range (a body longer than announced).
        var extraBytes: Int64 = 0
        /// After this many body bytes: drop the connection, or go silent with it open.
        var stopAfter: (Int64, Stop)?
        /// The file offset of a byte sent flipped (`corrupt=`).
        var corrupt: Int64?
        /// `dieafter=BYTES`: once the server has sent this many body bytes in all, it goes down
        /// for good: responses are cut and new connections get no answer (a mirror that dies).
        var dieAfter: Int64?
    }

    func finish(context: ChannelHandlerContext, close: Bool) {
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if close {
            done.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
    }

    /// Streams the plan's bytes; with a rate, each piece waits until the token bucket allows it.
    func send(context: ChannelHandlerContext, plan: SendPlan, sent: Int64) {
        guard context.channel.isActive else {
            timing?.record("response-cut \(plan.from)-\(plan.to) after \(sent) \(plan.target)")
            done()
            noticeClose()
            return
        }
        if let until = counters.outageUntil.withLockedValue({ $0 }), NIODeadline.now() < until {
            done()
            context.close(promise: nil)  // the server went down mid-response
            return
        }
        if let die = plan.dieAfter, counters.bodyBytes.load(ordering: .relaxed) >= die {
            counters.outageUntil.withLockedValue { $0 = .distantFuture }
            done()
            context.close(promise: nil)
            return
        }
        let position = plan.from + sent
        let total = plan.to - plan.from + plan.extraBytes
        if let (limit, stop) = plan.stopAfter, sent >= limit {
            counters.inflight.wrappingAdd(-1, ordering: .relaxed)
            sending = false  // a close from now on is noticed at once
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
                if let bad = plan.corrupt, bad >= position, bad < position + Int64(fromContent) { raw[Int(bad - position)] ^= 0xFF }
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
                self.timing?.record("response-cut \(plan.from)-\(plan.to) after \(sent + Int64(n)) \(plan.target)")
                self.done()
                self.noticeClose()
                context.close(promise: nil)
            }
        }
    }

    func done() {
        if busy { counters.inflight.wrappingAdd(-1, ordering: .relaxed) }
        busy = false
        sending = false
    }
}
