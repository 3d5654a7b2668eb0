import FoundationEssentials

/// A digest value: an algorithm and its bytes.
///
/// Encoded in JSON as `{"algorithm": "sha-256", "hex": "…"}`.
public struct Digest: Sendable, Hashable, Codable, CustomStringConvertible {
    public let algorithm: DigestAlgorithm
    public let bytes: [UInt8]

    /// - Precondition: `bytes.count == algorithm.byteCount`.
    public init(_ algorithm: DigestAlgorithm, bytes: [UInt8]) {
        precondition(bytes.count == algorithm.byteCount)
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// Reads a value given as hex (either case) or base64 (with or without padding, standard or
    /// URL alphabet); `nil` when it is neither, or not of the algorithm's length.
    public init?(_ algorithm: DigestAlgorithm, text: some StringProtocol) {
        let trimmed = String(text).trimmingSpaces()
        if trimmed.utf8.count == algorithm.byteCount * 2, let bytes = Self.hexBytes(trimmed) {
            self.init(algorithm, bytes: bytes)
        } else if let bytes = Self.base64Bytes(trimmed), bytes.count == algorithm.byteCount {
            self.init(algorithm, bytes: bytes)
        } else {
            return nil
        }
    }

    /// The value in lowercase hex, as `sha256sum` prints it.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 15)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The value in base64 with padding, as digest fields carry it.
    public var base64: String { Data(bytes).base64EncodedString() }

    /// `sha-256:9f86d0…`
    public var description: String { "\(algorithm.rawValue):\(hex)" }

    private enum CodingKeys: String, CodingKey { case algorithm, hex }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let algorithm = try container.decode(DigestAlgorithm.self, forKey: .algorithm)
        let hex = try container.decode(String.self, forKey: .hex)
        guard hex.utf8.count == algorithm.byteCount * 2, let bytes = Self.hexBytes(hex) else {
            throw DecodingError.dataCorruptedError(forKey: .hex, in: container, debugDescription: "not a \(algorithm.rawValue) value in hex")
        }
        self.init(algorithm, bytes: bytes)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(algorithm, forKey: .algorithm)
        try container.encode(hex, forKey: .hex)
    }

    static func hexBytes(_ text: String) -> [UInt8]? {
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 97...102: c - 87
            case 65...70: c - 55
            default: nil
            }
        }
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = nibble(utf8[index]), let low = nibble(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    /// Base64 by Foundation's decoder; padding is added where it was left off, and the URL
    /// alphabet (`-`, `_`) is read as the standard one.
    static func base64Bytes(_ text: String) -> [UInt8]? {
        var standard = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        switch standard.utf8.count % 4 {
        case 0: break
        case 2: standard += "=="
        case 3: standard += "="
        default: return nil
        }
        return Data(base64Encoded: standard).map { Array($0) }
    }
}

/// Where an expected digest came from: named in messages and in the statistics.
public enum DigestSource: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Given by the caller (`--checksum`).
    case given
    /// An entry of a checksum list (`--checksum-file`): the file or URL it came from.
    case checksumFile(String)
    /// The server's `Repr-Digest` (RFC 9530).
    case reprDigest
    /// The server's `Content-Digest` on a whole-file `200` (RFC 9530).
    case contentDigest
    /// The server's `Digest` (RFC 3230).
    case digestField
    /// Amazon S3's `x-amz-checksum-*` of the whole object.
    case amazonChecksum
    /// Google Cloud Storage's `x-goog-hash`.
    case googleHash

    /// Whether the caller gave it (rather than the server).
    public var isUsers: Bool {
        switch self {
        case .given, .checksumFile: true
        default: false
        }
    }

    public var description: String {
        switch self {
        case .given: "the checksum given"
        case .checksumFile(let from): "the checksum file \(from)"
        case .reprDigest: "the server's Repr-Digest"
        case .contentDigest: "the server's Content-Digest"
        case .digestField: "the server's Digest"
        case .amazonChecksum: "the server's x-amz-checksum"
        case .googleHash: "the server's x-goog-hash"
        }
    }
}
