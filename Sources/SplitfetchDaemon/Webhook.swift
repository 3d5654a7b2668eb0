import Crypto
public import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Logging
import Splitfetch

/// `--webhook URL`: a JSON document POSTed per download that completes or fails, retried with
/// backoff until the receiver answers 2xx, signed with HMAC-SHA256 of the body when a key is
/// configured (`X-Splitfetch-Signature: sha256=HEX`). Delivery is at least once: one pending at
/// a stop is sent again at the next start, so a receiver tells repeats apart by `id` + `event`.
public struct Webhook: Sendable {
    public var url: URL
    /// The HMAC key (from the daemon's configuration, a file).
    public var key: [UInt8]?
    /// Attempts before giving up (logged), and the first wait (doubled each time, at most 60 s).
    public var attempts = 8
    public var firstDelay: Duration = .milliseconds(500)

    public init(url: URL, key: [UInt8]?) {
        self.url = url
        self.key = key
    }

    /// The document for `job`.
    static func body(for job: Job) -> [UInt8] {
        var fields: [String: JSONValue] = [
            "event": .string(job.state == .complete ? "complete" : "error"),
            "id": .string(job.gid),
            "url": .string(redactedURL(job.uris.first ?? "")),
            "path": .string(job.destination),
        ]
        if let size = job.totalLength { fields["size"] = .number(Double(size)) }
        if let sha256 = job.sha256 { fields["sha256"] = .string(sha256) }
        if let code = job.errorCode { fields["errorCode"] = .string(code) }
        if let message = job.errorMessage { fields["errorMessage"] = .string(message) }
        if let finished = job.finishedAt { fields["finishedAt"] = .number(finished.rounded()) }
        return JSONValue.object(fields).serialized()
    }

    /// `sha256=HEX` of HMAC-SHA256(key, body).
    static func signature(_ body: [UInt8], key: [UInt8]) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: body, using: SymmetricKey(data: key))
        return "sha256=" + mac.map { String(format: "%02x", $0) }.joined()
    }

    /// Delivers `job`'s document; returns once the receiver took it or the attempts ran out.
    func deliver(_ job: Job, logger: Logger) async {
        let body = Self.body(for: job)
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(body)
        request.timeoutInterval = 30
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        if let key { request.setValue(Self.signature(body, key: key), forHTTPHeaderField: "X-Splitfetch-Signature") }
        var delay = firstDelay
        for attempt in 1...max(1, attempts) {
            if let (_, response) = try? await URLSession.shared.data(for: request),
               let status = (response as? HTTPURLResponse)?.statusCode, (200..<300).contains(status) {
                return
            }
            guard attempt < attempts, !Task.isCancelled else { break }
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(60))
        }
        logger.error("a webhook was not delivered", metadata: ["gid": "\(job.gid)", "attempts": "\(attempts)"])
    }
}
