@testable import Splitfetch
import NIOConcurrencyHelpers
import Testing

/// The probe's open body: held until a sink is attached, handed over in order, and what the
/// sink says of the held bytes is never lost, however the attach and the transfer's end race.
@Suite("Open probe body")
struct OpenBodyTests {
    /// A sink that records what it is given and answers with a scripted verdict.
    final class Recorder: TransferSink, Sendable {
        let verdict: SinkVerdict
        private let bytes = NIOLockedValueBox([UInt8]())
        init(_ verdict: SinkVerdict = .proceed) { self.verdict = verdict }
        func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
            bytes.withLockedValue { $0.append(contentsOf: body) }
            return verdict
        }
        var received: [UInt8] { bytes.withLockedValue { $0 } }
    }

    func head(_ status: Int) -> ResponseHead {
        var h = ResponseHead()
        h.status = status
        h.isComplete = true
        return h
    }

    func feed(_ sink: OpenBodySink, _ bytes: [UInt8], status: Int = 206) -> SinkVerdict {
        bytes.withUnsafeBytes { sink.receive($0, head: head(status)) }
    }

    @Test func heldBytesThenLaterOnesReachTheSinkInOrder() async {
        let sink = OpenBodySink(limit: 100)
        #expect(feed(sink, [1, 2, 3]) == .proceed)
        #expect(await sink.head()?.status == 206)
        let recorder = Recorder()
        sink.attach(recorder)
        #expect(feed(sink, [4, 5]) == .proceed)
        #expect(recorder.received == [1, 2, 3, 4, 5])
        #expect(await sink.settled() === recorder)
    }

    /// Held bytes sit in pooled chunks: across chunk boundaries they keep their order, and the
    /// chunks go back to the pool, at most `retained` of them, for the next response.
    @Test func heldBytesKeepTheirOrderAcrossChunksAndTheChunksAreReused() {
        let pool = ChunkPool(chunkSize: 4, retained: 2)
        var held = HeldBytes(pool: pool)
        let input = (0..<11).map(UInt8.init)
        input[0..<3].withUnsafeBytes { held.append($0) }
        input[3...].withUnsafeBytes { held.append($0) }
        #expect(held.count == 11 && held.chunks.map(\.count) == [4, 4, 3])
        var output: [UInt8] = []
        held.forEachChunk { output += $0; return true }
        #expect(output == input)
        var calls = 0
        held.forEachChunk { _ in calls += 1; return false }
        #expect(calls == 1)
        held.release()
        #expect(held.isEmpty && pool.idle == 2)
        let reused = pool.take()
        #expect(reused.isEmpty && reused.capacity >= 4 && pool.idle == 1)
    }

    /// A sink that, while it takes its first piece, lets the transport deliver more to the
    /// open body (as the transport thread does while the held bytes are handed over), and
    /// records what the open body answered.
    final class Interleaver: TransferSink, Sendable {
        let recorder = Recorder()
        let during: [[UInt8]]
        private let state = NIOLockedValueBox((open: OpenBodySink?.none, calls: 0, answers: [SinkVerdict](),
                                               resumedAtOnce: [Bool]()))
        /// Resumes asked for after a `.pause` (as the transport asks) that have come.
        let resumes = NIOLockedValueBox(0)
        init(during: [[UInt8]]) { self.during = during }
        func watch(_ open: OpenBodySink) { state.withLockedValue { $0.open = open } }
        func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
            let (open, first) = state.withLockedValue { state -> (OpenBodySink?, Bool) in
                state.calls += 1
                return (state.open, state.calls == 1)
            }
            let verdict = recorder.receive(body, head: head)
            if first, let open {
                var h = ResponseHead()
                h.status = 206
                h.isComplete = true
                for piece in during {
                    let answer = piece.withUnsafeBytes { open.receive($0, head: h) }
                    state.withLockedValue { $0.answers.append(answer) }
                    if answer == .pause {
                        open.resumeWhenReady { [resumes] in resumes.withLockedValue { $0 += 1 } }
                        let atOnce = resumes.withLockedValue { $0 } > 0
                        state.withLockedValue { $0.resumedAtOnce.append(atOnce) }
                    }
                }
            }
            return verdict
        }
        var answers: [SinkVerdict] { state.withLockedValue { $0.answers } }
        var resumedAtOnce: [Bool] { state.withLockedValue { $0.resumedAtOnce } }
    }

    /// Bytes that arrive while the held ones are handed over are held too and handed over next,
    /// in order: the transport is not paused (each pause costs it a wake-up to resume).
    @Test func bytesArrivingDuringTheHandOverAreHeldNotPaused() async {
        let sink = OpenBodySink(limit: 100)
        #expect(feed(sink, [1, 2, 3]) == .proceed)
        let inner = Interleaver(during: [[4, 5], [6]])
        inner.watch(sink)
        sink.attach(inner)
        #expect(inner.answers == [.proceed, .proceed])
        #expect(feed(sink, [7]) == .proceed)
        #expect(inner.recorder.received == [1, 2, 3, 4, 5, 6, 7])
        #expect(await sink.settled() === inner)
    }

    /// Past the limit, a piece that arrives during the hand-over pauses the transfer, which is
    /// resumed once the hand-over is done; the piece then comes again and goes to the sink.
    @Test func pastTheLimitDuringTheHandOverTheTransferPausesAndResumes() async {
        let sink = OpenBodySink(limit: 4)
        #expect(feed(sink, [1, 2, 3]) == .proceed)
        let inner = Interleaver(during: [[4], [5]])
        inner.watch(sink)
        // 3 bytes being handed over, 1 held: the next byte would make 5 of 4.
        sink.attach(inner)
        #expect(inner.answers == [.proceed, .pause])
        #expect(inner.resumedAtOnce == [false])  // not while the hand-over went on
        #expect(inner.resumes.withLockedValue { $0 } == 1)  // but when it ended
        #expect(feed(sink, [5]) == .proceed)
        #expect(inner.recorder.received == [1, 2, 3, 4, 5])
    }

    @Test func bytesHeldInSeveralChunksReachTheSinkInOrder() async {
        let sink = OpenBodySink(limit: 100, pool: ChunkPool(chunkSize: 2, retained: 8))
        #expect(feed(sink, [1, 2, 3]) == .proceed)
        #expect(feed(sink, [4, 5, 6, 7]) == .proceed)
        let recorder = Recorder()
        sink.attach(recorder)
        #expect(feed(sink, [8]) == .proceed)
        #expect(recorder.received == [1, 2, 3, 4, 5, 6, 7, 8])
    }

    /// The transfer ended before the attach, and the sink refused the held bytes (a size limit):
    /// the refusal is part of the result, not a silently empty success.
    @Test func aRefusalOfTheHeldBytesAfterTheEndIsInTheResult() async {
        let sink = OpenBodySink(limit: 100)
        _ = feed(sink, [1, 2, 3], status: 200)
        sink.ended()
        let refusal = DownloadError(.sizeLimit, "too big")
        sink.attach(Recorder(.fail(refusal)))
        let adjusted = sink.adjusted(TransferResult())
        #expect(adjusted.sinkError == refusal)
        let stopped = OpenBodySink(limit: 100)
        _ = feed(stopped, [1], status: 206)
        stopped.attach(Recorder(.stop))
        #expect(stopped.adjusted(TransferResult()).stoppedBySink)
    }

    @Test func moreThanTheLimitBeforeTheAttachFailsTransiently() {
        let sink = OpenBodySink(limit: 4)
        #expect(feed(sink, [1, 2, 3], status: 200) == .proceed)
        guard case .fail(let error) = feed(sink, [4, 5], status: 200) else {
            Issue.record("expected a failure past the limit")
            return
        }
        #expect(error.isTransient)
    }

    @Test func anErrorOrRedirectBodyIsNotHeld() async {
        let error = OpenBodySink(limit: 100)
        #expect(feed(error, [1], status: 503) == .stop)
        #expect(await error.head()?.status == 503)
        let redirect = OpenBodySink(limit: 100)
        #expect(feed(redirect, [1], status: 302) == .proceed)  // read to its end for the Location
        let recorder = Recorder()
        redirect.attach(recorder)
        #expect(recorder.received.isEmpty)
    }

    /// The probe timeout gives up only on a head that has not arrived; a head that won the race
    /// is kept, and a late one after giving up is refused.
    @Test func givingUpRacesTheHeadUnderOneLock() async {
        let arrived = OpenBodySink(limit: 100)
        _ = feed(arrived, [1])
        #expect(!arrived.giveUpWaitingForHead())
        #expect(!arrived.timedOut)
        let late = OpenBodySink(limit: 100)
        #expect(late.giveUpWaitingForHead())
        #expect(feed(late, [1]) == .stop)
        late.ended()
        #expect(await late.head() == nil)
        #expect(await late.settled() == nil)
    }

    @Test func aDiscardedBodySettlesWithoutASink() async {
        let sink = OpenBodySink(limit: 100)
        _ = feed(sink, [1, 2])
        sink.discard()
        #expect(await sink.settled() == nil)
        #expect(feed(sink, [3]) == .stop)
        let recorder = Recorder()
        sink.attach(recorder)  // too late: nothing is handed over
        #expect(recorder.received.isEmpty)
    }
}
