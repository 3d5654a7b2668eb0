import NIOConcurrencyHelpers
import DownloadCore

/// The probe's `GET` once its head has arrived: its body keeps coming while the download prepares
/// its file, and becomes the download's first transfer (``DownloadMachine/Action/adopt(_:)``).
///
/// Until a sink is attached, body bytes wait in memory, at most ``limit`` of them (the first
/// segment, or what arrives for a whole file while the file is created: a few milliseconds).
/// Attaching hands them to the sink in order and every later byte goes straight to it.
///
/// Thread safety: `receive` runs on the transport thread; `attach`, `discard` and `settled` from
/// tasks. One lock orders them, so the attached sink never sees two calls at once. No call waits
/// while holding it: `attach` hands the held bytes over outside it (the sink may make it wait for
/// a reader in order), while `receive` goes on holding what arrives meanwhile (or, past the
/// limit, answers `.pause`), and tasks on Swift's cooperative pool (`ended`, `head`) that take
/// the lock are never held up behind a reader.
final class OpenBodySink: TransferSink, Sendable {
    private struct State {
        var buffer: HeldBytes
        var head: ResponseHead?
        var inner: (any TransferSink)?
        var discarded = false
        /// What the attached sink said while taking the buffered bytes, if it stopped.
        var flushVerdict: SinkVerdict?
        var headWaiters: [CheckedContinuation<ResponseHead?, Never>] = []
        var settleWaiters: [CheckedContinuation<(any TransferSink)?, Never>] = []
        var ended = false
        var timedOut = false
        /// `attach` is handing the held bytes over: new bytes are held for it, or past the limit
        /// wait (the transport pauses).
        var flushing = false
        /// Bytes `attach` took and has not handed over yet.
        var inFlush = 0
        /// What the transport asked to be told when the hand-over is done.
        var flushResumes: [@Sendable () -> Void] = []
    }

    let limit: Int
    private let pool: ChunkPool
    private let state: NIOLockedValueBox<State>

    init(limit: Int, pool: ChunkPool = .shared) {
        self.limit = limit
        self.pool = pool
        state = NIOLockedValueBox(State(buffer: HeldBytes(pool: pool)))
    }

    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict {
        // Called on the transport thread only, one call at a time: the attached sink is called
        // outside the lock, in order.
        let decided: (verdict: SinkVerdict?, inner: (any TransferSink)?) = state.withLockedValue { state in
            if let verdict = state.flushVerdict { return (verdict, nil) }
            if state.flushing {
                // Held for the hand-over, which takes them next: no pause, no wake-up to resume.
                guard state.inFlush + state.buffer.count + body.count <= limit else { return (.pause, nil) }
                state.buffer.append(body)
                return (.proceed, nil)
            }
            if let inner = state.inner { return (nil, inner) }
            return (Self.hold(body, head: head, in: &state, limit: limit), nil)
        }
        if let inner = decided.inner { return inner.receive(body, head: head) }
        return decided.verdict!
    }

    /// Before a sink is attached: keeps the bytes of a successful answer.
    private static func hold(_ body: UnsafeRawBufferPointer, head: ResponseHead, in state: inout State, limit: Int) -> SinkVerdict {
        if state.discarded { return .stop }
        if state.head == nil {
            state.head = head
            for waiter in state.headWaiters { waiter.resume(returning: head) }
            state.headWaiters = []
        }
        // Only a successful answer's body is data. A redirect's is read to its end (libcurl
        // names the redirect target only then); an error needs its head alone.
        if (300...399).contains(head.status) { return .proceed }
        guard head.status == 200 || head.status == 206 else { return .stop }
        guard state.buffer.count + body.count <= limit else {
            return .fail(DownloadError(.network, "the first response outran the file's creation (\(limit) bytes held)",
                                       kind: .network(.bufferFull)))
        }
        state.buffer.append(body)
            return .proceed
    }

    /// The head of a response with body bytes, as soon as the first arrive; `nil` once the
    /// transfer ended without any (a redirect, an error, an empty file): its result says more.
    func head() async -> ResponseHead? {
        await withCheckedContinuation { continuation in
            state.withLockedValue { state in
                if let head = state.head { return continuation.resume(returning: head) }
                if state.ended { return continuation.resume(returning: nil) }
                state.headWaiters.append(continuation)
            }
        }
    }

    /// Gives up waiting for the head, unless it has arrived: returns whether it gave up (then the
    /// transfer is to be cancelled and its head, if one comes late, is ignored). One lock decides,
    /// so a head that won the race is never cancelled under the download that adopts it.
    func giveUpWaitingForHead() -> Bool {
        state.withLockedValue { state in
            guard state.head == nil else { return false }
            state.timedOut = true
            state.discarded = true
            return true
        }
    }

    /// Whether ``giveUpWaitingForHead()`` gave up.
    var timedOut: Bool { state.withLockedValue { $0.timedOut } }

    /// The transfer ended (called by whoever awaited it).
    func ended() {
        state.withLockedValue { state in
            state.ended = true
            for waiter in state.headWaiters { waiter.resume(returning: state.head) }
            state.headWaiters = []
        }
    }

    /// Makes `inner` the body's sink: the bytes held so far first (and those that arrive while
    /// they are handed over), then the rest as it comes.
    func attach(_ inner: any TransferSink) {
        let taken: (buffer: HeldBytes, head: ResponseHead?)? = state.withLockedValue { state in
            guard state.inner == nil, !state.discarded, !state.flushing else { return nil }
            state.flushing = true
            return Self.takeHeld(&state, pool: pool)
        }
        guard var (buffer, head) = taken else { return }
        var verdict = SinkVerdict.proceed
        while true {
            if !buffer.isEmpty, let head {
                buffer.forEachChunk { bytes in
                    verdict = Self.deliver(bytes, head: head, to: inner)
                    if case .proceed = verdict { return true }
                    return false
                }
            }
            buffer.release()
            let resumes: [@Sendable () -> Void]? = state.withLockedValue { state in
                state.inFlush = 0
                if case .proceed = verdict, !state.buffer.isEmpty {
                    (buffer, head) = Self.takeHeld(&state, pool: pool)
                    return nil  // more arrived meanwhile: hand it over too
                }
                state.buffer.release()
                state.inner = inner
                state.flushing = false
                if case .proceed = verdict {} else { state.flushVerdict = verdict }
                for waiter in state.settleWaiters { waiter.resume(returning: inner) }
                state.settleWaiters = []
                defer { state.flushResumes = [] }
                return state.flushResumes
            }
            guard let resumes else { continue }
            for resume in resumes { resume() }
            return
        }
    }

    /// Takes the held bytes for a hand-over, leaving an empty buffer.
    private static func takeHeld(_ state: inout State, pool: ChunkPool) -> (HeldBytes, ResponseHead?) {
        defer { state.buffer = HeldBytes(pool: pool) }
        state.inFlush = state.buffer.count
        return (state.buffer, state.head)
    }

    /// Hands held bytes to `inner`; when it pauses (a reader in order is behind), waits here
    /// until it has room. `attach` runs on the I/O queue's thread, which may block.
    private static func deliver(_ bytes: UnsafeRawBufferPointer, head: ResponseHead, to inner: any TransferSink) -> SinkVerdict {
        while true {
            let verdict = inner.receive(bytes, head: head)
            guard verdict == .pause else { return verdict }
            let gate = OneShotGate()
            inner.resumeWhenReady { gate.open() }
            gate.wait()
        }
    }

    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) {
        let inner: (any TransferSink)?? = state.withLockedValue { state in
            if state.flushing {
                state.flushResumes.append(resume)
                return .none
            }
            return .some(state.inner)
        }
        switch inner {
        case .none: return  // told when the hand-over is done
        case .some(nil): resume()
        case .some(let inner?): inner.resumeWhenReady(resume)
        }
    }

    /// The body will not be used: drop what is held and stop at the next byte.
    func discard() {
        state.withLockedValue { state in
            // Once `attach` has begun, the body is the download's: as after it.
            guard state.inner == nil, !state.discarded, !state.flushing else { return }
            state.discarded = true
            state.buffer.release()
            for waiter in state.settleWaiters { waiter.resume(returning: nil) }
            state.settleWaiters = []
        }
    }

    /// The attached sink, once `attach` or `discard` was called (`nil` after a discard).
    func settled() async -> (any TransferSink)? {
        await withCheckedContinuation { continuation in
            state.withLockedValue { state in
                if let inner = state.inner { return continuation.resume(returning: inner) }
                if state.discarded { return continuation.resume(returning: nil) }
                state.settleWaiters.append(continuation)
            }
        }
    }

    /// The result as the attached sink would have seen it: a stop or failure while it took the
    /// held bytes counts as its own.
    func adjusted(_ result: TransferResult) -> TransferResult {
        var result = result
        switch state.withLockedValue({ $0.flushVerdict }) {
        case .fail(let error)?: result.sinkError = error
        case .stop?: result.stoppedBySink = true
        case .proceed?, .pause?, nil: break
        }
        return result
    }
}

/// A probe's `GET` whose body is still arriving: what the download adopts.
struct OpenProbe: Sendable {
    let sink: OpenBodySink
    let task: Task<TransferResult, Never>
    /// The bytes the response carries, from 0; `nil` for a whole-file `200`.
    let range: ByteRange?

    var body: DownloadMachine.OpenBody { range.map { .range($0) } ?? .whole }

    /// Stops it (nothing will be written from it).
    func discard() {
        sink.discard()
        task.cancel()
    }
}
