import FoundationEssentials

/// A message digest algorithm the hasher can compute.
///
/// The names are those of the IANA "Hash Algorithms for HTTP Digest Fields" registry (RFC 9530):
/// `sha-256`, `sha-512`, and the insecure `sha-1` and `md5`, kept for old checksum lists and for
/// servers that offer nothing else.
public enum DigestAlgorithm: String, Sendable, CaseIterable, Codable, Comparable {
    case sha256 = "sha-256"
    case sha512 = "sha-512"
    case sha1 = "sha-1"
    case md5

    /// Reads a name in any of the spellings people and servers use: `sha-256`, `SHA256`,
    /// `sha_256`, `SHA-256`; `nil` for an algorithm not supported here.
    public init?(name: some StringProtocol) {
        let key = name.lowercased().filter { $0 != "-" && $0 != "_" }
        switch key {
        case "sha256": self = .sha256
        case "sha512": self = .sha512
        case "sha1", "sha": self = .sha1
        case "md5": self = .md5
        default: return nil
        }
    }

    /// The digest's length in bytes.
    public var byteCount: Int {
        switch self {
        case .sha256: 32
        case .sha512: 64
        case .sha1: 20
        case .md5: 16
        }
    }

    /// Whether a match proves the bytes are the publisher's against an adversary (SHA-2), not
    /// only against accidents (SHA-1, MD5).
    public var isSecure: Bool { self == .sha256 || self == .sha512 }

    /// Ordered by strength: `md5 < sha-1 < sha-256 < sha-512`.
    public static func < (a: DigestAlgorithm, b: DigestAlgorithm) -> Bool { a.strength < b.strength }

    private var strength: Int {
        switch self {
        case .md5: 0
        case .sha1: 1
        case .sha256: 2
        case .sha512: 3
        }
    }
}
