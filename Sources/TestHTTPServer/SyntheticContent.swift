/// Deterministic file content computed from the byte offset, so the test server can serve files of
/// any size (1 GiB and more) without storing them, and tests can compute the expected bytes.
///
/// The content is a stream of little-endian 64-bit words, word `k` being SplitMix64 of `k ^ seed`.
public struct SyntheticContent: Sendable, Hashable {
    /// The file size in bytes.
    public var size: Int64
    /// Selects one of many distinct contents of the same size.
    public var seed: UInt64

    public init(size: Int64, seed: UInt64 = 0) {
        precondition(size >= 0)
        self.size = size
        self.seed = seed
    }

    @inline(__always)
    static func word(_ index: UInt64, seed: UInt64) -> UInt64 {
        var z = (index ^ seed) &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Writes the bytes at `[offset, offset + buffer.count)` into `buffer`.
    public func fill(_ buffer: UnsafeMutableRawBufferPointer, from offset: Int64) {
        precondition(offset >= 0 && offset + Int64(buffer.count) <= size)
        var position = 0
        var absolute = UInt64(offset)
        let count = buffer.count
        // Leading bytes up to a word boundary.
        while position < count && absolute % 8 != 0 {
            buffer[position] = UInt8(truncatingIfNeeded: Self.word(absolute / 8, seed: seed) >> ((absolute % 8) * 8))
            position += 1
            absolute += 1
        }
        // Whole words.
        while count - position >= 8 {
            let value = Self.word(absolute / 8, seed: seed).littleEndian
            buffer.storeBytes(of: value, toByteOffset: position, as: UInt64.self)
            position += 8
            absolute += 8
        }
        while position < count {
            buffer[position] = UInt8(truncatingIfNeeded: Self.word(absolute / 8, seed: seed) >> ((absolute % 8) * 8))
            position += 1
            absolute += 1
        }
    }

    /// The bytes at `range` as an array (for tests of small files).
    public func bytes(_ range: Range<Int64>) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(range.count))
        out.withUnsafeMutableBytes { fill($0, from: range.lowerBound) }
        return out
    }
}
