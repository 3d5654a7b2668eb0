import DownloadCore

/// How a transfer ended.
struct TransferResult: Sendable {
    /// The final response's head, if one arrived.
    var head: ResponseHead?
    /// The URL after redirects.
    var effectiveURL: String?
    /// Where a `3xx` response points, resolved to an absolute URL.
    var redirectURL: String?
    /// libcurl's result code (`CURLE_OK` is 0).
    var curlCode: Int32 = 0
    /// libcurl's error text, when `curlCode` is not 0.
    var curlMessage: String = ""
    /// Body bytes delivered to the sink (or discarded, without a sink).
    var bodyBytes: Int64 = 0
    /// The sink stopped the transfer deliberately.
    var stoppedBySink = false
    /// The sink rejected the response or failed to store it.
    var sinkError: DownloadError?
    /// The task was cancelled.
    var cancelled = false
    /// The proxy's answer to `CONNECT` (for an `https` URL through a proxy), when it was not 200.
    var proxyConnectStatus: Int?
    /// The request went out (libcurl counted its bytes): an error after that concerns the reply.
    var requestSent = false
    /// The request went out on a connection an earlier transfer had opened.
    var reusedConnection = false
    /// An FTP server's last reply (`421 Too many connections`), for the error that names it.
    var serverReply: FileTransferReply?
    /// An SFTP server's host key that was refused: not in `known_hosts`, or another one there.
    var refusedHostKey: RefusedHostKey?
}

/// One reply of an FTP server: its code and text (`421`, `Too many connections`).
struct FileTransferReply: Sendable, Equatable {
    var code: Int
    var text: String

    /// Reads a reply line as libcurl passes it to the header callback (`213 4096\r\n`, or the
    /// first line of a multi-line reply, `230-Welcome`); `nil` for anything else (the fields
    /// libcurl makes up for a `HEAD`-like request, `Content-Length: 4096`).
    init?(line: Substring) {
        var line = line
        while let last = line.unicodeScalars.last, last == "\r" || last == "\n" || last == " " { line.unicodeScalars.removeLast() }
        let utf8 = Array(line.utf8.prefix(4))
        guard utf8.count >= 3, utf8[0...2].allSatisfy({ (48...57).contains($0) }),
              utf8.count == 3 || utf8[3] == 32 || utf8[3] == 45 else { return nil }
        code = Int(line.prefix(3))!
        text = String(line.dropFirst(4))
    }

    init(code: Int, text: String) {
        self.code = code
        self.text = text
    }

    var description: String { "\(code) \(text)" }
}

/// An SFTP server's host key that the checks refused.
struct RefusedHostKey: Sendable, Equatable {
    /// `ED25519`, `ECDSA`, `RSA`, `DSA`.
    var type: String
    /// `SHA256:` and the unpadded base64 of the key's SHA-256, as `ssh-keygen -l` prints it.
    var fingerprint: String
    /// `known_hosts` has another key for the host (rather than none).
    var mismatch: Bool
}
