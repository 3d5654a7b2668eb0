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
    static let http2: Int32 = 16
    static let http2Stream: Int32 = 92

    /// How the network failed, by libcurl's code; the core judges which are transient.
    static func networkFailure(_ code: Int32) -> NetworkFailure {
        switch code {
        case couldNotConnect: .connect
        case partialFile: .partialBody
        case timedOut: .timeout
        case gotNothing: .emptyReply
        case sendError: .send
        case receiveError: .receive
        case http2, http2Stream: .http2Stream
        case peerCertificate, 35, 58, 77, 83, 90, 91: .tls
        default: .other
        }
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
                                 kind: .protocolFault(result.reusedConnection ? .malformedOnReusedConnection : .malformed))
        case unsupportedProtocol, malformedURL:
            return DownloadError(.usage, "\(redactedURL(url)): \(text)")
        case weirdServerReply, badContentEncoding:
            return DownloadError(.protocolViolation, "\(redactedURL(url)): malformed response: \(text)",
                                 kind: .protocolFault(.malformed))
        case peerCertificate, 35, 58, 77, 83, 90, 91:
            return DownloadError(.network, "\(redactedURL(url)): TLS: \(text)", kind: .network(.tls))
        default:
            return DownloadError(.network, "\(redactedURL(url)): \(text)", kind: .network(networkFailure(code)))
        }
    }
}
