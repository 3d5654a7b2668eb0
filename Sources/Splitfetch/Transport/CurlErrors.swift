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
    static let remoteAccessDenied: Int32 = 9
    static let ftpCouldNotRetrieve: Int32 = 19
    static let sslRequiredButRefused: Int32 = 64
    static let loginDenied: Int32 = 67
    static let remoteFileNotFound: Int32 = 78
    static let badDownloadResume: Int32 = 36

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
        if let fileTransfer = fileTransferError(for: result, url: url) { return fileTransfer }
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

    /// The error for a failed FTP or SFTP transfer, where its reply or its host key says more
    /// than libcurl's code: `nil` to judge it as any transfer.
    static func fileTransferError(for result: TransferResult, url: String) -> DownloadError? {
        guard RemoteScheme.isFileTransfer(url) else { return nil }
        let place = redactedURL(url)
        let reply = result.serverReply.map { ": \($0.description)" } ?? ""
        if let key = result.refusedHostKey {
            let host = CurlURL(url).map { "\($0.host):\($0.port)" } ?? place
            let message = key.mismatch
                ? "\(place): the host key of \(host) (\(key.type) \(key.fingerprint)) is not the one known_hosts has for it: refused (the server's key changed, or someone is in between)"
                : "\(place): the host key of \(host) is not in known_hosts: \(key.type) \(key.fingerprint); refused"
            var error = DownloadError(.network, message, kind: .fatal)
            if !key.mismatch { error.remedy = .trustHostKey }
            return error
        }
        // 421: too many connections from this address, too many users, or the service closing.
        if result.serverReply?.code == 421 {
            return DownloadError(.network, "\(place): the server refused another connection\(reply)", kind: .network(.serverFull))
        }
        switch result.curlCode {
        case loginDenied:
            return DownloadError(.http, "\(place): login refused\(reply.isEmpty ? ": " + result.curlMessage : reply)", kind: .loginRefused)
        case remoteFileNotFound, ftpCouldNotRetrieve:
            return DownloadError(.http, "\(place): no such file\(reply.isEmpty ? ": " + result.curlMessage : reply)", kind: .fatal)
        case remoteAccessDenied:
            return DownloadError(.http, "\(place): access denied\(reply.isEmpty ? ": " + result.curlMessage : reply)", kind: .fatal)
        case sslRequiredButRefused:
            return DownloadError(.network, "\(place): TLS is required, and the server does not offer it (AUTH TLS refused)\(reply)", kind: .fatal)
        case peerCertificate where CurlURL.scheme(of: url) == "sftp":
            // The pinned fingerprint, compared by libcurl: its message names both.
            return DownloadError(.network, "\(place): host key refused: \(result.curlMessage)", kind: .fatal)
        case badDownloadResume:
            // A range past the end: the file is shorter than it was probed.
            return DownloadError(.remoteChanged, "\(place): the file is shorter than it was: \(result.curlMessage)", kind: .fatal)
        default:
            return nil
        }
    }
}
