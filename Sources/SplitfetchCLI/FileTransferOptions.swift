import ArgumentParser
import Splitfetch
import SystemPackage

/// FTP, FTPS and SFTP: TLS, active mode, SSH keys and host keys.
struct FileTransferOptions: ParsableArguments {
    @Option(name: .customLong("ftp-tls"), parsing: .unconditional, help: ArgumentHelp(
        "TLS on ftp:// URLs (AUTH TLS): never, try (where the server offers it, the default, as lftp) or require. ftps:// is TLS throughout.",
        valueName: "mode"))
    var ftpTLS: FTPTLSChoice = .try

    @Flag(name: .customLong("ssl-reqd"), help: "Same as --ftp-tls require (curl's name).")
    var sslRequired = false

    @Option(name: [.customShort("P"), .customLong("ftp-port")], parsing: .unconditional, help: ArgumentHelp(
        "FTP active mode: the address the server connects back to (- for the control connection's). Default: passive mode.",
        valueName: "address"))
    var ftpPort: String?

    @Option(name: .customLong("key"), parsing: .unconditional, help: ArgumentHelp(
        "SFTP: private key file to log in with (the SSH agent and -u passwords are tried too).", valueName: "file"))
    var key: String?

    @Option(name: .customLong("key-passphrase-file"), parsing: .unconditional, help: ArgumentHelp(
        "SFTP: read the private key's passphrase from the first line of this file.", valueName: "file"))
    var keyPassphraseFile: String?

    @Option(name: .customLong("known-hosts"), parsing: .unconditional, help: ArgumentHelp(
        "SFTP: the known_hosts file a server's host key must be in (default ~/.ssh/known_hosts). An unknown key is refused, its fingerprint shown.",
        valueName: "file"))
    var knownHosts: String?

    @Option(name: .customLong("ssh-host-key-sha256"), parsing: .unconditional, help: ArgumentHelp(
        "SFTP: accept the host key with this SHA-256 fingerprint (SHA256:..., as ssh-keygen -l prints it) instead of known_hosts.",
        valueName: "fingerprint"))
    var hostKeySHA256: String?

    @Flag(name: .customLong("no-ssh-agent"), help: "SFTP: do not log in through the SSH agent.")
    var noSSHAgent = false

    /// These settings, the passphrase aside (``passphrase()``).
    var settings: DownloadOptions.FileTransfer {
        var settings = DownloadOptions.FileTransfer()
        settings.tls = sslRequired ? .required : ftpTLS.mode
        settings.activeAddress = ftpPort
        settings.privateKey = key.map { FilePath($0) }
        settings.knownHosts = knownHosts.map { FilePath($0) }
        settings.hostKeySHA256 = hostKeySHA256
        settings.useAgent = !noSSHAgent
        return settings
    }

    /// The key's passphrase, read on the I/O threads.
    func passphrase() async throws(DownloadError) -> String? {
        guard let keyPassphraseFile else { return nil }
        return try await DownloadOptions.FileTransfer.readSecret(from: FilePath(keyPassphraseFile))
    }
}

enum FTPTLSChoice: String, ExpressibleByArgument, CaseIterable {
    case never, `try`, require

    var mode: DownloadOptions.FTPTLS {
        switch self {
        case .never: .never
        case .try: .opportunistic
        case .require: .required
        }
    }
}
