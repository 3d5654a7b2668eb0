import FoundationEssentials

/// A digest the finished file must have, and who said so.
public struct ExpectedDigest: Sendable, Hashable, Codable, CustomStringConvertible {
    public var digest: Digest
    public var source: DigestSource

    public init(_ digest: Digest, source: DigestSource) {
        self.digest = digest
        self.source = source
    }

    /// Reads `ALG=VALUE` (`sha-256=9f86…`, hex or base64), as `--checksum` takes it.
    ///
    /// - Throws: ``DownloadError`` (``DownloadError/Code/usage``) naming what is wrong.
    public init(parsing text: String, source: DigestSource = .given) throws(DownloadError) {
        guard let equals = text.firstIndex(of: "=") else {
            throw DownloadError(.usage, "checksum \"\(text.prefix(80))\" is not of the form ALGORITHM=VALUE (sha-256=…)")
        }
        let name = text[..<equals]
        guard let algorithm = DigestAlgorithm(name: name) else {
            throw DownloadError(.usage, "unknown checksum algorithm \"\(name.prefix(20))\" (use sha-256, sha-512, sha-1 or md5)")
        }
        guard let digest = Digest(algorithm, text: text[text.index(after: equals)...]) else {
            throw DownloadError(.usage,
                "the \(algorithm.rawValue) value is not \(algorithm.byteCount * 2) hex digits or \(algorithm.byteCount) bytes in base64")
        }
        self.init(digest, source: source)
    }

    public var description: String { "\(digest) from \(source)" }
}
