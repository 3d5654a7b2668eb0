/// Splits a file of known size into the initial byte ranges, one per connection.
///
/// Pure and deterministic: the same inputs always give the same plan, and no I/O happens here.
/// The plan covers `[0, size)` exactly, ranges never overlap, and every range holds at least
/// `minimumSegmentSize` bytes unless the whole file is smaller than that (then there is one range).
public enum Planner {
    /// Alignment of range boundaries, so that writes start on page boundaries where the size allows.
    public static let defaultAlignment: Int64 = 4096

    /// Plans the initial ranges of a download.
    ///
    /// - Parameters:
    ///   - size: the file size in bytes; `0` gives an empty plan.
    ///   - connections: the number of connections to plan for; at least 1.
    ///   - minimumSegmentSize: the smallest range worth its own request; at least 1.
    ///   - alignment: boundaries are multiples of this where possible; at least 1.
    /// - Returns: the ranges in ascending order.
    public static func plan(
        size: Int64,
        connections: Int,
        minimumSegmentSize: Int64,
        alignment: Int64 = defaultAlignment
    ) -> [ByteRange] {
        precondition(size >= 0 && connections >= 1 && minimumSegmentSize >= 1 && alignment >= 1)
        guard size > 0 else { return [] }
        let byMinimum = max(1, size / minimumSegmentSize)
        let count = min(Int64(connections), byMinimum)
        if count == 1 { return [ByteRange(0, size)] }

        // Round the even share up to the alignment; the last range takes what is left.
        var chunk = (size + count - 1) / count
        chunk = ((chunk + alignment - 1) / alignment) * alignment
        chunk = max(chunk, minimumSegmentSize)

        var ranges: [ByteRange] = []
        ranges.reserveCapacity(Int(count))
        var start: Int64 = 0
        while start < size {
            let end = min(start + chunk, size)
            ranges.append(ByteRange(start, end))
            start = end
        }
        // A short tail below the minimum joins the range before it.
        if ranges.count > 1, let last = ranges.last, last.count < minimumSegmentSize {
            ranges.removeLast()
            ranges[ranges.count - 1].upperBound = last.upperBound
        }
        return ranges
    }
}
