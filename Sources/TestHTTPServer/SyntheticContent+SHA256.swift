import Crypto

extension SyntheticContent {
    /// The SHA-256 of the whole content, as lowercase hex; streams in 1 MiB pieces.
    public func sha256Hex() -> String {
        var hasher = SHA256()
        let piece = 1 << 20
        var buffer = [UInt8](repeating: 0, count: piece)
        var offset: Int64 = 0
        while offset < size {
            let n = Int(min(Int64(piece), size - offset))
            buffer.withUnsafeMutableBytes { raw in
                let slice = UnsafeMutableRawBufferPointer(rebasing: raw[0..<n])
                fill(slice, from: offset)
                hasher.update(bufferPointer: UnsafeRawBufferPointer(slice))
            }
            offset += Int64(n)
        }
        return hex(hasher.finalize())
    }
}

/// Lowercase hex of a digest.
private func hex(_ digest: SHA256.Digest) -> String {
    digest.map { byte in
        let s = String(byte, radix: 16)
        return s.count == 1 ? "0" + s : s
    }.joined()
}

/// SHA-256 of bytes that arrive in pieces (a download read in order), as lowercase hex.
public struct SHA256Stream {
    private var hasher = SHA256()
    /// Bytes hashed so far.
    public private(set) var count: Int64 = 0

    public init() {}

    public mutating func update(_ bytes: [UInt8]) {
        hasher.update(data: bytes)
        count += Int64(bytes.count)
    }

    public func finish() -> String { hex(hasher.finalize()) }
}

/// SHA-256 of a file on disk, as lowercase hex.
public func sha256HexOfFile(atPath path: String) throws -> String {
    guard let file = fopen(path, "rb") else { throw FileHashError(path: path, errno: errno) }
    defer { fclose(file) }
    var hasher = SHA256()
    var buffer = [UInt8](repeating: 0, count: 1 << 20)
    while true {
        let n = buffer.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
        if n > 0 { buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<n])) } }
        if n < buffer.count {
            if ferror(file) != 0 { throw FileHashError(path: path, errno: errno) }
            break
        }
    }
    return hex(hasher.finalize())
}

/// A file could not be read for hashing.
public struct FileHashError: Error, CustomStringConvertible {
    public var path: String
    public var errno: Int32
    public var description: String { "cannot read \(path): errno \(errno)" }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
