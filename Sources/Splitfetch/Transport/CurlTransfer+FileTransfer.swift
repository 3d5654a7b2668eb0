import CCurl

#if canImport(Glibc)
import Glibc
#endif

/// FTP, FTPS and SFTP through the same transfer as HTTP.
///
/// libcurl fetches a byte range over FTP with `REST` and `RETR`, ending it with `ABOR` (then it
/// closes the control connection, whatever the server answered: `426` then `226`, or `225`), and
/// over SFTP by seeking. Each answer is described as an HTTP one would be (``ResponseHead``), so
/// that the probe, the sinks and the identity checks judge FTP and SFTP by the same rules: `200`
/// with `Content-Length` for the whole file, `206` with `Content-Range` for a range,
/// `Last-Modified` from `MDTM` or the SFTP `stat`, `Accept-Ranges: bytes` where `REST` works.
extension CurlTransfer {
    /// What an FTP server's replies told, read from libcurl's header callback.
    struct ServerReplies {
        /// The texts of every `213` reply, in order: `MDTM`'s (when asked and answered), then `SIZE`'s.
        var replies213: [String] = []
        /// libcurl found `REST` works (it says so with an `Accept-ranges: bytes` line).
        var acceptsRanges = false
        /// The last reply, for errors.
        var last: FileTransferReply?
    }

    /// Sets the options of an `ftp`, `ftps` or `sftp` request.
    func configureFileTransfer(_ easy: UnsafeMutableRawPointer, _ settings: TransferRequest.FileTransferSettings,
                               set: (CURLcode, String) -> Void) {
        let r = request
        let options = settings.options
        // MDTM over FTP, a stat over SFTP: the file's time is its validator (`Last-Modified`).
        set(sf_easy_setopt_long(easy, CURLOPT_FILETIME, 1), "CURLOPT_FILETIME")
        set(sf_easy_setopt_long(easy, CURLOPT_SERVER_RESPONSE_TIMEOUT, max(1, Int(r.responseTimeout.rounded(.up)))),
            "CURLOPT_SERVER_RESPONSE_TIMEOUT")
        if settings.isSFTP {
            var auth = Int(CURLSSH_AUTH_PUBLICKEY) | Int(CURLSSH_AUTH_PASSWORD) | Int(CURLSSH_AUTH_KEYBOARD)
            if options.useAgent { auth |= Int(CURLSSH_AUTH_AGENT) }
            set(sf_easy_setopt_long(easy, CURLOPT_SSH_AUTH_TYPES, auth), "CURLOPT_SSH_AUTH_TYPES")
            if let key = options.privateKey {
                set(sf_easy_setopt_string(easy, CURLOPT_SSH_PRIVATE_KEYFILE, key.string), "CURLOPT_SSH_PRIVATE_KEYFILE")
                // Empty: libssh2 derives the public key from the private one.
                set(sf_easy_setopt_string(easy, CURLOPT_SSH_PUBLIC_KEYFILE, ""), "CURLOPT_SSH_PUBLIC_KEYFILE")
            }
            if let passphrase = options.privateKeyPassphrase {
                set(sf_easy_setopt_string(easy, CURLOPT_KEYPASSWD, passphrase), "CURLOPT_KEYPASSWD")
            }
            if let pinned = options.pinnedHostKey {
                // libcurl compares the key's SHA-256 itself and skips known_hosts.
                set(sf_easy_setopt_string(easy, CURLOPT_SSH_HOST_PUBLIC_KEY_SHA256, pinned), "CURLOPT_SSH_HOST_PUBLIC_KEY_SHA256")
            } else {
                set(sf_easy_setopt_string(easy, CURLOPT_SSH_KNOWNHOSTS, Self.knownHostsPath(options)), "CURLOPT_SSH_KNOWNHOSTS")
                set(sf_easy_setopt_ssh_key_callback(easy, { _, _, found, match, user in
                    guard let user, let found else { return Int32(CURLKHSTAT_REJECT.rawValue) }
                    let transfer = Unmanaged<CurlTransfer>.fromOpaque(user).takeUnretainedValue()
                    return transfer.onHostKey(found.pointee, match: match)
                }), "CURLOPT_SSH_KEYFUNCTION")
                set(sf_easy_setopt_pointer(easy, CURLOPT_SSH_KEYDATA, Unmanaged.passUnretained(self).toOpaque()), "CURLOPT_SSH_KEYDATA")
            }
            if r.credentials == nil && !r.useNetrc, let user = LocalUser.name {
                set(sf_easy_setopt_string(easy, CURLOPT_USERNAME, user), "CURLOPT_USERNAME")
            }
        } else {
            if settings.scheme == "ftp" {
                let level = switch options.tls {
                case .never: CURLUSESSL_NONE
                case .opportunistic: CURLUSESSL_TRY
                case .required: CURLUSESSL_ALL
                }
                set(sf_easy_setopt_long(easy, CURLOPT_USE_SSL, Int(level.rawValue)), "CURLOPT_USE_SSL")
            }
            if let address = options.activeAddress {
                set(sf_easy_setopt_string(easy, CURLOPT_FTPPORT, address), "CURLOPT_FTPPORT")
            }
        }
    }

    /// `~/.ssh/known_hosts` unless the options name another file.
    static func knownHostsPath(_ options: DownloadOptions.FileTransfer) -> String {
        if let file = options.knownHosts { return file.string }
        return (LocalUser.homeDirectory ?? "") + "/.ssh/known_hosts"
    }

    /// libcurl's host key check (only when no fingerprint is pinned): a key `known_hosts` has
    /// for the host goes on; any other is refused, and its fingerprint kept for the error.
    func onHostKey(_ found: curl_khkey, match: curl_khmatch) -> Int32 {
        if match == CURLKHMATCH_OK { return Int32(CURLKHSTAT_FINE.rawValue) }
        var blob: [UInt8] = []
        if let key = found.key {
            if found.len > 0 {
                blob = Array(UnsafeRawBufferPointer(start: key, count: found.len))
            } else {
                blob = Digest.base64Bytes(String(cString: key)) ?? []
            }
        }
        var fingerprint = MessageDigest.of(blob, .sha256).base64
        while fingerprint.hasSuffix("=") { fingerprint.removeLast() }
        let type = switch found.keytype {
        case CURLKHTYPE_ED25519: "ED25519"
        case CURLKHTYPE_ECDSA: "ECDSA"
        case CURLKHTYPE_RSA, CURLKHTYPE_RSA1: "RSA"
        case CURLKHTYPE_DSS: "DSA"
        default: "unknown"
        }
        result.refusedHostKey = RefusedHostKey(type: type, fingerprint: "SHA256:" + fingerprint, mismatch: match == CURLKHMATCH_MISMATCH)
        return Int32(CURLKHSTAT_REJECT.rawValue)
    }

    /// Takes one line from libcurl's header callback over FTP or SFTP: a server reply, or one of
    /// the fields libcurl makes up for a request without a body.
    func onFileTransferLine(_ line: UnsafeRawBufferPointer) {
        let text = Substring(decoding: line, as: UTF8.self)
        if let reply = FileTransferReply(line: text) {
            replies.last = reply
            if reply.code == 213 { replies.replies213.append(reply.text) }
        } else if text.lowercased().hasPrefix("accept-ranges: bytes") {
            replies.acceptsRanges = true
        }
    }

    /// The answer described as an HTTP response head, once libcurl has the file open (at the
    /// first byte of the body) or the transfer ended without one.
    func describeFileTransferAnswer(_ easy: UnsafeMutableRawPointer, settings: TransferRequest.FileTransferSettings) -> ResponseHead {
        var head = ResponseHead()
        var fileTime: curl_off_t = -1
        _ = sf_easy_getinfo_off(easy, CURLINFO_FILETIME_T, &fileTime)
        var length: curl_off_t = -1
        _ = sf_easy_getinfo_off(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length)
        // FTP: SIZE's answer, the 213 after MDTM's when MDTM answered. SFTP: libcurl's stat,
        // which names the range's length when a range was asked for (the total is the probe's).
        let size: Int64?
        if settings.isSFTP {
            size = request.range == nil ? (length >= 0 ? Int64(length) : nil) : request.knownTotal
        } else {
            let index = fileTime >= 0 ? 1 : 0
            size = replies.replies213.count > index ? Int64(replies.replies213[index].trimmingSpaces()) : nil
        }
        if let range = request.range, request.method == .get {
            head.status = 206
            var end = range.upperBound
            if let size { end = min(end, size) }
            if settings.isSFTP, length >= 0 { end = min(end, range.lowerBound + Int64(length)) }
            head.fields.append(("content-range", "bytes \(range.lowerBound)-\(end - 1)/\(size.map(String.init) ?? "*")"))
            head.fields.append(("content-length", String(end - range.lowerBound)))
        } else {
            head.status = 200
            if let size { head.fields.append(("content-length", String(size))) }
            if settings.isSFTP || replies.acceptsRanges { head.fields.append(("accept-ranges", "bytes")) }
        }
        if fileTime >= 0 { head.fields.append(("last-modified", HTTPFields.httpDate(seconds: Int64(fileTime)))) }
        head.isComplete = true
        return head
    }
}
