/// Where a mirror proves that it serves the same file: a few small ranges at seeded random
/// offsets, compared byte for byte with the same ranges of the URL probed before the mirror
/// gets a segment. The offsets differ between runs (the seed does), so a mirror cannot serve
/// the right bytes only where it expects to be asked.
public enum IdentitySamples {
    /// `count` ranges of `length` bytes (fewer, or shorter, for a small file), sorted and not
    /// overlapping, inside `[0, size)`: one in each of `count` equal stretches of the file, at
    /// a random place in it. The whole file when it is no longer than the ranges together.
    public static func ranges(size: Int64, seed: UInt64, count: Int = 3, length: Int64 = 16 << 10) -> [ByteRange] {
        precondition(count >= 1 && length >= 1)
        guard size > 0 else { return [] }
        guard size > Int64(count) * length else { return [ByteRange(0, size)] }
        var random = SplitMix64(seed: seed)
        let stretch = size / Int64(count)
        return (0..<Int64(count)).map { index in
            let start = index * stretch
            let room = stretch - length  // >= 0: size > count × length
            let offset = start + (room > 0 ? Int64(random.next() % UInt64(room + 1)) : 0)
            return ByteRange(offset, offset + length)
        }
    }
}
