import CCurl
import CShims
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
/// Thread safety: `perform` may be called from any task; `shutdown` ends the thread.
final class CurlTransport: Sendable {
    private enum Message {
        case add(Transfer)
        case cancel(Transfer)
    }

    private struct Inbox: ~Copyable {
        var messages: [Message] = []
        var shuttingDown = false
    }

    private let inbox = Mutex(Inbox())
    /// The multi handle. Only the transport thread uses it, except for `curl_multi_wakeup`.
    private let multi: MultiHandle
    private let nextID = Atomic<UInt64>(1)

    /// Starts the transport thread.
    /// - Parameter maximumConnections: connections kept open for reuse.
    init(maximumConnections: Int) {
        _ = CurlGlobal.initialized
        multi = MultiHandle()
        _ = sf_multi_setopt_long(multi.raw, CURLMOPT_PIPELINING, 0)
        _ = sf_multi_setopt_long(multi.raw, CURLMOPT_MAXCONNECTS, max(4, maximumConnections + 4))
        let loop = TransportLoop(transport: self)
        startThread(name: "splitfetch-curl") { loop.run() }
    }

    /// Performs one transfer; returns when it ends (never throws: the result says how it ended).
    ///
    /// Cancelling the calling task removes the transfer promptly and returns a result with
    /// `cancelled` set.
    func perform(_ request: TransferRequest, sink: (any TransferSink)?) async -> TransferResult {
        let transfer = Transfer(id: nextID.wrappingAdd(1, ordering: .relaxed).oldValue, request: request, sink: sink)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                transfer.continuation = continuation
                post(.add(transfer))
            }
        } onCancel: {
            transfer.cancelRequested.store(true, ordering: .releasing)
            post(.cancel(transfer))
        }
    }

    /// Ends the transport thread; transfers still running end as cancelled.
    func shutdown() {
        inbox.withLock { $0.shuttingDown = true }
        curl_multi_wakeup(multi.raw)
    }

    private func post(_ message: Message) {
        let accepted = inbox.withLock { box -> Bool in
            if box.shuttingDown { return false }
            box.messages.append(message)
            return true
        }
        if accepted {
            curl_multi_wakeup(multi.raw)
        } else if case .add(let transfer) = message {
            transfer.finish(cancelled: true)
        }
    }

    private func takeMessages() -> (messages: [Message], shuttingDown: Bool) {
        inbox.withLock { box in
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
        var active: [UInt64: Transfer] = [:]
        var pool: [UnsafeMutableRawPointer] = []

        init(transport: CurlTransport) { self.transport = transport }

        func run() {
            let multi = transport.multi.raw
            while true {
                let (messages, shuttingDown) = transport.takeMessages()
                for message in messages {
                    switch message {
                    case .add(let transfer): start(transfer, multi: multi)
                    case .cancel(let transfer): cancel(transfer, multi: multi)
                    }
                }
                if shuttingDown {
                    for transfer in active.values { cancel(transfer, multi: multi) }
                    for easy in pool { curl_easy_cleanup(easy) }
                    pool.removeAll()
                    return
                }
                var running: Int32 = 0
                _ = curl_multi_perform(multi, &running)
                var left: Int32 = 0
                while let info = curl_multi_info_read(multi, &left) {
                    guard info.pointee.msg == CURLMSG_DONE, let easy = info.pointee.easy_handle else { continue }
                    complete(easy: easy, code: info.pointee.data.result, multi: multi)
                }
                _ = curl_multi_poll(multi, nil, 0, 1000, nil)
            }
        }

        private func start(_ transfer: Transfer, multi: UnsafeMutableRawPointer) {
            if transfer.cancelRequested.load(ordering: .acquiring) {
                transfer.finish(cancelled: true)
                return
            }
            let easy = pool.popLast() ?? curl_easy_init()
            guard let easy else {
                transfer.result.curlCode = Int32(CURLE_OUT_OF_MEMORY.rawValue)
                transfer.result.curlMessage = "curl_easy_init failed"
                transfer.finish(cancelled: false)
                return
            }
            transfer.configure(easy)
            let code = curl_multi_add_handle(multi, easy)
            if code != CURLM_OK {
                transfer.result.curlCode = Int32(CURLE_FAILED_INIT.rawValue)
                transfer.result.curlMessage = String(cString: curl_multi_strerror(code))
                transfer.release(easy)
                curl_easy_reset(easy)
                pool.append(easy)
                transfer.finish(cancelled: false)
                return
            }
            active[transfer.id] = transfer
        }

        private func cancel(_ transfer: Transfer, multi: UnsafeMutableRawPointer) {
            guard let current = active.removeValue(forKey: transfer.id), let easy = current.easy else { return }
            curl_multi_remove_handle(multi, easy)
            current.release(easy)
            // A handle removed mid-transfer may hold a half-used connection; do not reuse it.
            curl_easy_cleanup(easy)
            current.finish(cancelled: true)
        }

        private func complete(easy: UnsafeMutableRawPointer, code: CURLcode, multi: UnsafeMutableRawPointer) {
            var raw: UnsafeMutableRawPointer?
            _ = sf_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &raw)
            guard let raw else { return }
            let transfer = Unmanaged<Transfer>.fromOpaque(raw).takeUnretainedValue()
            guard active.removeValue(forKey: transfer.id) != nil else { return }
            transfer.collect(easy: easy, code: code)
            curl_multi_remove_handle(multi, easy)
            transfer.release(easy)
            curl_easy_reset(easy)
            pool.append(easy)
            transfer.finish(cancelled: false)
        }
    }
}

/// The multi handle, cleaned up when the transport goes away.
private final class MultiHandle: Sendable {
    // The pointer is immutable; libcurl's own rules (one owner thread, wakeup from anywhere)
    // are kept by CurlTransport.
    nonisolated(unsafe) let raw: UnsafeMutableRawPointer
    init() {
        guard let m = curl_multi_init() else { fatalError("curl_multi_init failed: out of memory") }
        raw = m
    }
    deinit { curl_multi_cleanup(raw) }
}

/// Process-wide libcurl initialisation, done once before the first handle.
enum CurlGlobal {
    /// Every libcurl use goes through this first; `static let` runs the initialiser exactly once
    /// and makes other threads wait for it, which is what `curl_global_init` requires.
    static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_SSL | CURL_GLOBAL_WIN32)) == CURLE_OK
}

/// Starts libcurl's process-wide set-up (the TLS library's initialisation, about half a
/// millisecond) on a background thread, so a command-line tool can overlap it with parsing its
/// arguments. Optional: the first download does it when this was not called.
public func prepareTransportInBackground() {
    startThread(name: "sf-curl-init") { _ = CurlGlobal.initialized }
}

/// Starts a detached POSIX thread named `name` (first 15 bytes) running `body`.
func startThread(name: String, _ body: @escaping @Sendable () -> Void) {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Box {
        sf_set_thread_name(name)
        body()
    }).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(&thread, nil, { arg in
        guard let arg else { return nil }
        let box = Unmanaged<Box>.fromOpaque(arg).takeRetainedValue()
        box.body()
        return nil
    }, box)
    precondition(rc == 0, "pthread_create failed: \(rc)")
    pthread_detach(thread)
}
