public import SystemPackage

extension DownloadOptions {
    /// FTP, FTPS and SFTP: how to connect, and whom to trust. HTTP ignores these.
    ///
    /// User names and passwords come from ``DownloadOptions/credentials``, the URL or netrc, as
    /// for HTTP; an `ftp` or `ftps` URL without them logs in as `anonymous`, and an `sftp` URL
    /// without a user name uses the local user's name, as `ssh` does.
    public struct FileTransfer: Sendable, Equatable {
        /// Explicit TLS on an `ftp://` URL (`AUTH TLS`). Default ``FTPTLS/opportunistic``, as
        /// lftp: TLS where the server offers it, with the certificate verified.
        public var tls: FTPTLS = .opportunistic
        /// Active mode: the address the server connects back to (FTP `PORT`/`EPRT`; `-` is the
        /// control connection's own address). Default `nil`: passive mode (`EPSV`/`PASV`).
        public var activeAddress: String?
        /// SFTP: the private key to log in with (OpenSSH's format). Default `nil`: the SSH agent
        /// (`SSH_AUTH_SOCK`) and passwords only.
        public var privateKey: FilePath?
        /// SFTP: the private key's passphrase. A secret: never logged.
        public var privateKeyPassphrase: String?
        /// SFTP: the `known_hosts` file a server's host key must be in. Default `nil`:
        /// `~/.ssh/known_hosts`. A server whose key is not there is refused, and the error gives
        /// the key's fingerprint.
        public var knownHosts: FilePath?
        /// SFTP: the SHA-256 fingerprint of the host key to accept (`SHA256:` and base64, as
        /// `ssh-keygen -l` prints it, or the base64 alone) instead of looking in ``knownHosts``.
        public var hostKeySHA256: String?
        /// SFTP: log in through the SSH agent (`SSH_AUTH_SOCK`) when it holds a key. Default `true`.
        public var useAgent: Bool = true

        public init() {}

        /// Reads a passphrase (or any secret) from the first line of a file, on the I/O threads:
        /// a secret given so stays out of the process list and the shell's history.
        public static func readSecret(from path: FilePath) async throws(DownloadError) -> String {
            try await IOQueue().run { () throws(DownloadError) -> String in
                let bytes: [UInt8]?
                do throws(Errno) {
                    bytes = try FileSystem.readAll(path.string, limit: 64 << 10, followingLinks: true)
                } catch {
                    throw DownloadError(.usage, "cannot read \(path): \(error.description)")
                }
                guard let bytes else { throw DownloadError(.usage, "\(path) does not exist") }
                let line = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 1, omittingEmptySubsequences: false).first ?? []
                var text = String(decoding: line, as: UTF8.self)
                if text.hasSuffix("\r") { text.removeLast() }
                return text
            }
        }

        /// The pinned fingerprint as libcurl takes it: base64 without `SHA256:` or padding.
        var pinnedHostKey: String? {
            guard var value = hostKeySHA256?.trimmingSpaces(), !value.isEmpty else { return nil }
            if value.lowercased().hasPrefix("sha256:") { value.removeFirst(7) }
            while value.hasSuffix("=") { value.removeLast() }
            return value
        }
    }

    /// When an `ftp://` URL switches to TLS (`AUTH TLS`). An `ftps://` URL is TLS from the
    /// first byte (implicit FTPS) whatever this says.
    public enum FTPTLS: String, Sendable, CaseIterable {
        /// Never: user name, password and data in the clear.
        case never
        /// Where the server offers it; in the clear where it does not (curl's `--ssl`).
        case opportunistic = "try"
        /// Always: a server that refuses `AUTH TLS` is an error (curl's `--ssl-reqd`).
        case required = "require"
    }
}
