import CCurl
import CShims
import NIOConcurrencyHelpers
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Process-wide libcurl set-up, done once before the first handle: check the version, then
/// `curl_global_init`.
enum CurlGlobal {
    /// The oldest libcurl with every option used (`CURLOPT_PROTOCOLS_STR` came in 7.85.0).
    static let minimumVersion: UInt32 = 0x07_55_00
    static let minimumVersionText = "7.85.0"

    /// Every libcurl use goes through this first; `static let` runs the initialiser exactly once
    /// and makes other threads wait for it, which is what `curl_global_init` requires. Nil when
    /// libcurl is ready, otherwise what went wrong.
    static let failure: String? = {
        guard let info = sf_curl_version_info() else { return "libcurl gave no version information" }
        if info.pointee.version_num < minimumVersion {
            let version = info.pointee.version.map { String(cString: $0) } ?? "unknown"
            return "libcurl \(version) is too old; Splitfetch needs \(minimumVersionText) or later"
        }
        let code = curl_global_init(Int(CURL_GLOBAL_SSL | CURL_GLOBAL_WIN32))
        return code == CURLE_OK ? nil : "curl_global_init failed: \(String(cString: curl_easy_strerror(code)))"
    }()
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
