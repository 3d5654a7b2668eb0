import CCurl
import CShims
import NIOConcurrencyHelpers
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Process-wide libcurl set-up, done once before the first handle: load libcurl (CCurl's loader
/// opens it with dlopen and runs `curl_global_init`), then check its version.
enum CurlGlobal {
    /// The oldest libcurl with every option used (`CURLOPT_PROTOCOLS_STR` came in 7.85.0).
    static let minimumVersion: UInt32 = 0x07_55_00
    static let minimumVersionText = "7.85.0"

    /// Every libcurl use goes through this first; `static let` runs the initialiser exactly once.
    /// The load itself is once per process and makes other threads wait for it, which is what
    /// `curl_global_init` requires. Nil when libcurl is ready, otherwise what went wrong.
    static let failure: String? = {
        if let failure = sf_curl_failure() { return String(cString: failure) }
        guard let info = sf_curl_version_info() else { return "libcurl gave no version information" }
        if info.pointee.version_num < minimumVersion {
            let version = info.pointee.version.map { String(cString: $0) } ?? "unknown"
            return "libcurl \(version) is too old; Splitfetch needs \(minimumVersionText) or later"
        }
        return nil
    }()
}

/// libcurl, which Splitfetch loads at run time (dlopen) rather than links: its 26 libraries took
/// about 5 ms of each process's start on a small machine, before the first line of Swift.
///
/// It is loaded once per process: on a thread of its own after ``preload()`` or ``ready()``, or
/// else by the first libcurl use, on that thread. Loading waits on the disk and the dynamic
/// loader, so Swift's pool never does it: a task awaits ``ready()`` instead.
public enum Libcurl {
    struct Load {
        var started = false
        /// The outcome, once known: nil inside when libcurl is ready.
        var outcome: String??
        var waiters: [CheckedContinuation<String?, Never>] = []
    }

    private static let load = NIOLockedValueBox(Load())

    /// Starts loading libcurl (and the libraries it needs) on a thread of its own, if that has not
    /// begun: for a command line that parses its arguments and reads a list meanwhile.
    public static func preload() {
        let start = load.withLockedValue { load in
            defer { load.started = true }
            return !load.started
        }
        guard start else { return }
        startThread(name: "splitfetch-load") {
            let outcome = CurlGlobal.failure
            let waiters = load.withLockedValue { load in
                load.outcome = .some(outcome)
                defer { load.waiters = [] }
                return load.waiters
            }
            for waiter in waiters { waiter.resume(returning: outcome) }
        }
    }

    /// Whether libcurl is loaded and usable now; never waits (for a caller on Swift's pool that
    /// may do without it).
    static var isReady: Bool { load.withLockedValue { $0.outcome } == .some(nil) }

    /// Returns once libcurl is loaded (starting the load if need be, off the caller's thread):
    /// nil, or why it cannot be used: not found or not loadable ("cannot load libcurl.so.4:
    /// ..."), or older than Splitfetch needs. A download fails with this message then.
    public static func ready() async -> String? {
        if let outcome = load.withLockedValue({ $0.outcome }) { return outcome }
        preload()
        return await withCheckedContinuation { waiter in
            let outcome = load.withLockedValue { load -> String?? in
                if load.outcome == nil { load.waiters.append(waiter) }
                return load.outcome
            }
            if let outcome { waiter.resume(returning: outcome) }
        }
    }
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
