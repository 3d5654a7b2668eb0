import CCurl
import CShims
import NIOConcurrencyHelpers
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Runs HTTP transfers on one dedicated thread that owns a libcurl multi handle.
///
/// libcurl handles are not thread-safe, so every easy handle and the multi handle live on the
/// transport thread alone. Async callers hand requests to a locked inbox and wake the thread with
/// `curl_multi_wakeup` (the one multi call that is safe from any thread); completions resume the
/// callers' continuations. No libcurl call runs on the Swift cooperative pool.
///
/// Connections are kept in the multi handle's cache and reused by later transfers to the same
/// host. HTTP/1.1 is used with pipelining and multiplexing off, so each transfer in flight has its
/// own TCP connection.
///
/// Thread safety: `perform` may be called from any task; `shutdown` ends the thread and returns
/// once it has stopped every transfer and left libcurl.
final class CurlTransport: Sendable {
    private enum Message {
        case add(CurlTransfer)
        case cancel(CurlTransfer)
        /// A paused transfer (its sink said ``SinkVerdict/pause``) may go on.
        case resume(UInt64)
        /// libcurl's `CURLMOPT_MAX_HOST_CONNECTIONS` changes (a session's per-host cap did).
        case maximumPerHost(Int)
    }

    private struct Inbox {
        var messages: [Message] = []
        var shuttingDown = false
        /// The multi handle's address, once the transport thread has made it (0 before). Only
        /// that thread uses the handle, except for `curl_multi_wakeup`; it is cleaned up in
        /// `deinit`, after the thread ended. An address because the pointer type is not Sendable.
        var multiAddress: UInt = 0
        /// Why libcurl cannot be used (too old, or it failed to initialise); every transfer then
        /// fails with this message.
        var unusable: String?
        /// The transport thread has returned from its loop: no libcurl call runs any more.
        var loopEnded = false
        /// Tasks waiting in ``shutdown()`` for the loop to end.
        var endWaiters: [CheckedContinuation<Void, Never>] = []
        /// The transport thread was started (by the first transfer).
        var started = false

        var multi: UnsafeMutableRawPointer? { UnsafeMutableRawPointer(bitPattern: multiAddress) }
    }

    private let inbox = NIOLockedValueBox(Inbox())
    /// Transfers' numbers, unique in the process: a transfer that waited at a ``NetworkGate``
    /// may run on another transport than the one asked.
    private static let nextID = Atomic<UInt64>(1)
    private let underWay = Atomic<Int>(0)

    /// Transfers asked for and not yet returned (for choosing the least busy transport).
    var transfersUnderWay: Int { underWay.load(ordering: .relaxed) }

    /// Downloads given this transport (``Session/assignTransport(for:)``) whose network part is
    /// not over yet. Counted from the choice on, before their first transfer, so downloads that
    /// start together spread over the transports instead of all finding them idle.
    private let assigned = Atomic<Int>(0)

    /// How busy the transport is, for choosing one: the downloads given it and its transfers.
    var load: Int { assigned.load(ordering: .relaxed) + underWay.load(ordering: .relaxed) }

    func assign() { assigned.wrappingAdd(1, ordering: .relaxed) }
    func unassign() { assigned.wrappingSubtract(1, ordering: .relaxed) }

    /// Makes a transport; its thread starts with the first transfer, so that one that never
    /// transfers (a daemon whose jobs all wait or are paused) costs no thread, and libcurl and
    /// its TLS libraries are not set up (2.4 MiB of a daemon's resident memory). libcurl's set-up
    /// (the first time in the process) happens on that thread, never on the caller's.
    /// - Parameters:
    ///   - maximumConnections: connections kept open for reuse.
    ///   - maximumPerHost: connections to one host, in use or kept (libcurl's
    ///     `CURLMOPT_MAX_HOST_CONNECTIONS`); 0 for no limit.
    /// Whether each connection closes when its transfer ends (none is kept for reuse).
    let closesConnections: Bool

    init(maximumConnections: Int, maximumPerHost: Int = 0, closesConnections: Bool = false) {
        self.closesConnections = closesConnections
        connectionLimits = (maximumConnections, maximumPerHost)
    }

    /// The loop's `maximumConnections` and `maximumPerHost`, for when it starts.
    private let connectionLimits: (total: Int, perHost: Int)

    /// Whether the transport thread was started (by a transfer).
    var hasStarted: Bool { inbox.withLockedValue { $0.started } }

    /// Starts the transport thread (called once, by the first transfer).
    private func startLoop() {
        let loop = TransportLoop(transport: self, maximumConnections: connectionLimits.total, maximumPerHost: connectionLimits.perHost)
        startThread(name: "splitfetch-curl") { loop.run() }
    }

    deinit {
        // The transport thread holds a reference until it returns, so it has ended.
        if let multi = inbox.withLockedValue({ $0.multi }) { curl_multi_cleanup(multi) }
    }

    /// Performs one transfer; returns when it ends (never throws: the result says how it ended).
    ///
    /// Cancelling the calling task removes the transfer promptly and returns a result with
    /// `cancelled` set.
    ///
    /// - Parameters:
    ///   - ticket: the download's claim on its batch's ``NetworkGate``: its first transfer waits
    ///     there for a permit (ready, not on this transport) until another download's network
    ///     part ends.
    ///   - headTimeout: how long the transfer may go without a byte of its body (or its end) from
    ///     when libcurl has it (after any wait at the gate), and what to do then: called once, on
    ///     the transport thread, unless a body byte came or the transfer ended first. Timed by the
    ///     transport thread itself, with no lock shared with other threads.
    func perform(_ request: TransferRequest, sink: (any TransferSink)?, ticket: NetworkTicket? = nil,
                 headTimeout: (limit: Duration, action: @Sendable () -> Void)? = nil) async -> TransferResult {
        var request = request
        if closesConnections { request.closesConnection = true }
        let transfer = CurlTransfer(id: Self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue, request: request, sink: sink)
        transfer.ticket = ticket
        transfer.headTimeout = headTimeout
        // A download's probe (conditional, or GET-first) is the request that waits at its batch's
        // gate, to be started by the transport thread whose answer freed a connection. Later
        // transfers use the transports' own handles, which keep what libcurl caches in them.
        if ticket != nil && (request.conditional || request.wholeBodyEndsDownload) { transfer.prepare() }
        underWay.wrappingAdd(1, ordering: .relaxed)
        defer { underWay.wrappingSubtract(1, ordering: .relaxed) }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                transfer.continuation = continuation
                guard let ticket else { return post(.add(transfer)) }
                // Perhaps another transport's (the gate sets `owner` then): see NetworkGate.
                ticket.gate.admit(transfer, ticket: ticket, on: self)?.post(.add(transfer))
            }
        } onCancel: {
            transfer.cancelRequested.store(true, ordering: .releasing)
            // Still at the gate: it never reached a transport, and ends here.
            if let ticket, ticket.gate.withdraw(transfer) {
                transfer.finish(cancelled: true)
                return
            }
            // The gate may have handed it to another transport (the gate's lock, taken above,
            // orders its `owner` before this read).
            (transfer.owner ?? self).post(.cancel(transfer))
        }
        // The download its permit went to, when the transport thread handed it on, hears of it
        // here rather than from that thread.
        transfer.permitHandedTo?.admitted?()
        return result
    }

    /// Hands a transfer that waited at a ``NetworkGate`` to the transport thread.
    func enqueue(_ transfer: CurlTransfer) { post(.add(transfer)) }

    /// Ends the transport thread and waits for it: transfers still running end as cancelled, and
    /// when this returns no thread of the transport is inside libcurl.
    func shutdown() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (ended, multi) = inbox.withLockedValue { box -> (Bool, UnsafeMutableRawPointer?) in
                box.shuttingDown = true
                // Never started: there is no thread to wait for, and none starts now.
                if !box.started { box.loopEnded = true }
                if box.loopEnded { return (true, nil) }
                box.endWaiters.append(continuation)
                return (false, box.multi)
            }
            if ended {
                continuation.resume()
            } else if let multi {
                // Without a multi handle yet, the thread sees `shuttingDown` right after making it.
                curl_multi_wakeup(multi)
            }
        }
    }

    /// Asks the transport thread to end without waiting (for `deinit`s, which cannot wait).
    func requestShutdown() {
        let multi = inbox.withLockedValue { box in
            box.shuttingDown = true
            if !box.started { box.loopEnded = true }
            return box.loopEnded ? nil : box.multi
        }
        if let multi { curl_multi_wakeup(multi) }
    }

    /// Called by the transport thread as its last act: wakes every ``shutdown()``.
    private func loopDidEnd() {
        let waiters = inbox.withLockedValue { box in
            box.loopEnded = true
            defer { box.endWaiters = [] }
            return box.endWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private enum Acceptance {
        case queued(wake: UnsafeMutableRawPointer?, start: Bool)
        case shuttingDown
        case unusable(String)
    }

    /// Changes libcurl's own per-host limit (`CURLMOPT_MAX_HOST_CONNECTIONS`); 0 for none.
    func setMaximumPerHost(_ count: Int) { post(.maximumPerHost(count)) }

    private func post(_ message: Message) {
        let acceptance = inbox.withLockedValue { box -> Acceptance in
            if box.shuttingDown { return .shuttingDown }
            if let failure = box.unusable { return .unusable(failure) }
            box.messages.append(message)
            var start = false
            if case .add = message, !box.started {
                box.started = true
                start = true
            }
            return .queued(wake: box.multi, start: start)
        }
        switch acceptance {
        case .queued(let multi, let start):
            // Without a multi handle yet, the thread takes the messages right after making it.
            if start { startLoop() }
            if let multi { curl_multi_wakeup(multi) }
        case .shuttingDown:
            if case .add(let transfer) = message { transfer.finish(cancelled: true) }
        case .unusable(let failure):
            if case .add(let transfer) = message { transfer.fail(setupFailure: failure) }
        }
    }

    private func takeMessages() -> (messages: [Message], shuttingDown: Bool) {
        inbox.withLockedValue { box in
            let taken = box.messages
            box.messages = []
            return (taken, box.shuttingDown)
        }
    }

    // MARK: - The loop

    /// State owned by the transport thread.
    private final class TransportLoop: @unchecked Sendable {
        // @unchecked: created on the caller's thread and then used only by the transport thread.
        let transport: CurlTransport
        let maximumConnections: Int
        let maximumPerHost: Int
        var active: [UInt64: CurlTransfer] = [:]
        var pool: [UnsafeMutableRawPointer] = []

        init(transport: CurlTransport, maximumConnections: Int, maximumPerHost: Int) {
            self.transport = transport
            self.maximumConnections = maximumConnections
            self.maximumPerHost = maximumPerHost
        }

        /// Sets libcurl up and makes the multi handle; nil (with every waiting transfer failed)
        /// when libcurl cannot be used.
        private func makeMultiHandle() -> UnsafeMutableRawPointer? {
            var failure = CurlGlobal.failure
            var multi: UnsafeMutableRawPointer?
            if failure == nil {
                multi = curl_multi_init()
                if let handle = multi {
                    for (option, value, name) in [(CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX), "CURLMOPT_PIPELINING"),
                                                  (CURLMOPT_MAXCONNECTS, max(4, maximumConnections + 4), "CURLMOPT_MAXCONNECTS"),
                                                  (CURLMOPT_MAX_HOST_CONNECTIONS, maximumPerHost, "CURLMOPT_MAX_HOST_CONNECTIONS")] {
                        let code = sf_multi_setopt_long(handle, option, value)
                        if code != CURLM_OK && failure == nil {
                            failure = "curl_multi_setopt(\(name)) failed: \(String(cString: curl_multi_strerror(code)))"
                        }
                    }
                    if failure != nil {
                        curl_multi_cleanup(handle)
                        multi = nil
                    }
                } else {
                    failure = "curl_multi_init failed"
                }
            }
            let waiting = transport.inbox.withLockedValue { box -> [Message] in
                box.multiAddress = UInt(bitPattern: multi)
                box.unusable = failure
                guard failure != nil else { return [] }
                defer { box.messages = [] }
                return box.messages
            }
            if let failure {
                for case .add(let transfer) in waiting { transfer.fail(setupFailure: failure) }
            }
            return multi
        }

        func run() {
            defer { transport.loopDidEnd() }
            guard let multi = makeMultiHandle() else { return }
            while true {
                let (messages, shuttingDown) = transport.takeMessages()
                for message in messages {
                    switch message {
                    case .add(let transfer): start(transfer, multi: multi)
                    case .cancel(let transfer): cancel(transfer, multi: multi)
                    case .resume(let id):
                        // Gone already (ended or cancelled): nothing to resume. The sink takes
                        // the held piece again, perhaps inside this call.
                        if let easy = active[id]?.easy { _ = curl_easy_pause(easy, 0) }  // CURLPAUSE_CONT
                    case .maximumPerHost(let count):
                        _ = sf_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, count)
                    }
                }
                if shuttingDown {
                    for transfer in active.values { cancel(transfer, multi: multi) }
                    for easy in pool { curl_easy_cleanup(easy) }
                    pool.removeAll()
                    return
                }
                // A request started on a connection an answer freed is sent (by another pass, at
                // most a few) before anything else: then the ended transfers' handles are put
                // away, and the answers wake their downloads, whose threads would otherwise take
                // the cores first. (A download given a permit here hears of it from the task of
                // the transfer that gave it back, on the pool: see ``perform``.)
                var ended = Ended()
                for _ in 0..<4 {
                    var running: Int32 = 0
                    _ = curl_multi_perform(multi, &running)
                    var left: Int32 = 0
                    let startedBefore = ended.started
                    while let info = curl_multi_info_read(multi, &left) {
                        guard info.pointee.msg == CURLMSG_DONE, let easy = info.pointee.easy_handle else { continue }
                        complete(easy: easy, code: info.pointee.data.result, multi: multi, into: &ended)
                    }
                    if ended.started == startedBefore { break }
                }
                var completions: [CurlTransfer.Completion] = []
                completions.reserveCapacity(ended.handles.count)
                for (transfer, easy) in ended.handles {
                    putAway(easy, of: transfer, multi: multi)
                    if let completion = transfer.takeCompletion() { completions.append(completion) }
                }
                // The loop's last references to the ended transfers go before their tasks resume,
                // so a transfer is freed by its task, on Swift's pool, not here: this thread's
                // time is the next answer's, and the answers of a list come in step.
                ended = Ended()
                for completion in completions { completion.resume() }
                _ = curl_multi_poll(multi, nil, 0, resumeDueTransfers(), nil)
            }
        }

        /// Resumes the transfers whose rate-limit wait is over (``CurlTransfer/resumeAt``) and runs
        /// the head timeouts that are due (``CurlTransfer/headDeadline``); returns how long the
        /// poll may sleep, in milliseconds: until the next such time (rounded up), at most a second.
        private func resumeDueTransfers() -> CInt {
            var now = ContinuousClock.now
            var due: [CurlTransfer] = []
            var timedOut: [@Sendable () -> Void] = []
            for transfer in active.values {
                // Never early: a budget still in debt would pause the transfer a whole wait again.
                if let at = transfer.resumeAt, at <= now { due.append(transfer) }
                if let at = transfer.headDeadline, at <= now, let timeout = transfer.headTimeout {
                    transfer.headDeadline = nil
                    transfer.headTimeout = nil
                    timedOut.append(timeout.action)
                }
            }
            for transfer in due {
                transfer.resumeAt = nil
                // The held piece is offered again inside this call, and may pause it again.
                if let easy = transfer.easy { _ = curl_easy_pause(easy, 0) }  // CURLPAUSE_CONT
            }
            for action in timedOut { action() }
            if !due.isEmpty || !timedOut.isEmpty { now = .now }
            var wait: Duration = .seconds(1)
            for transfer in active.values {
                if let at = transfer.resumeAt { wait = min(wait, at - now) }
                if let at = transfer.headDeadline { wait = min(wait, at - now) }
            }
            return CInt(max(0, (wait.seconds * 1000).rounded(.up)))
        }

        private func start(_ transfer: CurlTransfer, multi: UnsafeMutableRawPointer) {
            if transfer.cancelRequested.load(ordering: .acquiring) {
                transfer.finish(cancelled: true)
                return
            }
            // Held strongly: a weak reference gives an object a side table for good, and each
            // retain of the transport (several per request, some under the batch's gate's lock)
            // then takes the runtime's slow path. The transfer lets go when it is freed.
            transfer.resume = { [transport, id = transfer.id] in transport.post(.resume(id)) }
            let easy: UnsafeMutableRawPointer
            if transfer.ownsHandle, let prepared = transfer.easy {
                easy = prepared
            } else {
                guard let fresh = pool.popLast() ?? curl_easy_init() else {
                    transfer.result.curlCode = Int32(CURLE_OUT_OF_MEMORY.rawValue)
                    transfer.result.curlMessage = "curl_easy_init failed"
                    transfer.finish(cancelled: false)
                    return
                }
                easy = fresh
                if let refused = transfer.configure(easy) {
                    transfer.release(easy)
                    curl_easy_reset(easy)
                    pool.append(easy)
                    transfer.fail(setupFailure: refused)
                    return
                }
            }
            let code = curl_multi_add_handle(multi, easy)
            if code != CURLM_OK {
                transfer.release(easy)
                curl_easy_reset(easy)
                pool.append(easy)
                transfer.fail(setupFailure: String(cString: curl_multi_strerror(code)))
                return
            }
            active[transfer.id] = transfer
            // The clock starts when libcurl has the request: a wait at the batch's gate is not
            // the server's slowness.
            if let timeout = transfer.headTimeout { transfer.headDeadline = .now + timeout.limit }
        }

        private func cancel(_ transfer: CurlTransfer, multi: UnsafeMutableRawPointer) {
            guard let current = active.removeValue(forKey: transfer.id), let easy = current.easy else { return }
            curl_multi_remove_handle(multi, easy)
            current.release(easy)
            // A handle removed mid-transfer may hold a half-used connection; do not reuse it.
            curl_easy_cleanup(easy)
            current.finish(cancelled: true)
        }

        /// What a pass of the loop ended, for after the requests it started are sent.
        struct Ended {
            /// The ended transfers, each with its handle, still in the multi handle.
            var handles: [(transfer: CurlTransfer, easy: UnsafeMutableRawPointer)] = []
            /// Requests started on connections the ended transfers freed.
            var started = 0
        }

        /// Ends the transfer of `easy` (its result read) and starts what its permit lets go here,
        /// adding to `ended` what is left to do once the started requests are sent: the handle to
        /// put away (``putAway(_:of:multi:)``) and the transfer to finish. Its connection went back to libcurl's cache when it ended, so the next
        /// request reuses it with the handle still attached; that handle is detached and reset
        /// after the send, and a thread keeps a second handle for the request started meanwhile.
        private func complete(easy: UnsafeMutableRawPointer, code: CURLcode, multi: UnsafeMutableRawPointer, into ended: inout Ended) {
            var raw: UnsafeMutableRawPointer?
            _ = sf_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &raw)
            guard let raw else { return }
            let transfer = Unmanaged<CurlTransfer>.fromOpaque(raw).takeUnretainedValue()
            guard active.removeValue(forKey: transfer.id) != nil else { return }
            transfer.collect(easy: easy, code: code)
            ended.handles.append((transfer, easy))
            // Its download needs the network no more (``CurlTransfer/endsItsDownload``): its permit
            // passes on here, and a request waiting at the batch's gate starts on the connection
            // just freed, before this answer reaches the pool.
            guard let ticket = transfer.ticket, transfer.endsItsDownload else { return }
            var started = 0
            let next = ticket.release(freedOn: transport, tellLater: true) { [self] waiting in
                start(waiting, multi: multi)
                started += 1
            }
            ended.started += started
            // Told by the ended transfer's task, on the pool (``CurlTransfer/permitHandedTo``).
            transfer.permitHandedTo = next
        }

        /// Detaches an ended transfer's handle from the multi handle and resets it for reuse; a
        /// handle the transfer made itself (``CurlTransfer/prepare()``) goes with the transfer,
        /// freed by its task, off this thread.
        private func putAway(_ easy: UnsafeMutableRawPointer, of transfer: CurlTransfer, multi: UnsafeMutableRawPointer) {
            curl_multi_remove_handle(multi, easy)
            if transfer.ownsHandle { return }
            transfer.release(easy)
            curl_easy_reset(easy)
            pool.append(easy)
        }
    }
}
