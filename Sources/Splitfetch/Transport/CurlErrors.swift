import Logging
import DownloadCore

/// Turning libcurl result codes into ``DownloadError``s.
enum CurlErrors {
    // Values from curl/curl.h (CURLcode), stable across libcurl versions.
    static let unsupportedProtocol: Int32 = 1
    static let malformedURL: Int32 = 3
    static let weirdServerReply: Int32 = 8
    static let couldNotConnect: Int32 = 7
    static let partialFile: Int32 = 18
    static let timedOut: Int32 = 28
    static let tooManyRedirects: Int32 = 47
    static let gotNothing: Int32 = 52
    static let sendError: Int32 = 55
    static let receiveError: Int32 = 56
    static let peerCertificate: Int32 = 60
    static let badContentEncoding: Int32 = 61

    /// Whether a failed `HEAD` is worth a ranged `GET` (a server that mishandles `HEAD`).
    static func isWorthGetProbe(_ code: Int32) -> Bool {
        [timedOut, gotNothing, receiveError, partialFile, sendError].contains(code)
    }

    /// Whether the same request may succeed later.
    static func isTransient(_ code: Int32) -> Bool {
        [couldNotConnect, partialFile, timedOut, gotNothing, sendError, receiveError, 16, 92].contains(code)
    }

    /// The error for a transfer that failed in libcurl (or in its sink).
    static func error(for result: TransferResult, url: String) -> DownloadError {
        if let sinkError = result.sinkError { return sinkError }
        if let status = result.proxyConnectStatus { return .proxyRefused(status) }
        let code = result.curlCode
        let text = result.curlMessage.isEmpty ? "no response" : result.curlMessage
        switch code {
        case unsupportedProtocol where result.requestSent:
            // Not the URL but the reply: libcurl reports one that does not begin with a status
            // line as HTTP/0.9 this way. On a reused connection that is most likely bytes an
            // earlier response left behind, and a new connection may do; on a new one, the
            // server answers that way.
            return DownloadError(.protocolViolation, "\(redactedURL(url)): malformed response: \(text)",
                                 isTransient: result.reusedConnection)
        case unsupportedProtocol, malformedURL:
            return DownloadError(.usage, "\(redactedURL(url)): \(text)")
        case weirdServerReply, badContentEncoding:
            return DownloadError(.protocolViolation, "\(redactedURL(url)): malformed response: \(text)")
        case peerCertificate, 35, 58, 77, 83, 90, 91:
            return DownloadError(.network, "\(redactedURL(url)): TLS: \(text)")
        default:
            return DownloadError(.network, "\(redactedURL(url)): \(text)", isTransient: isTransient(code))
        }
    }
}
