public import DownloadCore

/// Which bytes of a simulated file have been written, as sorted disjoint ranges; a second write
/// of any byte is reported instead of recorded.
public struct ByteLedger: Sendable, Equatable {
    /// Written ranges, sorted, disjoint and never adjacent (adjacent ones are merged).
    public private(set) var ranges: [ByteRange] = []

    public init() {}

    /// Bytes written.
    public var count: Int64 { ranges.reduce(0) { $0 + $1.count } }

    /// Index of the first range whose upper bound is above `offset`.
    private func firstIndex(endingAfter offset: Int64) -> Int {
        var low = 0, high = ranges.count
        while low < high {
            let mid = (low + high) / 2
            if ranges[mid].upperBound <= offset { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Whether any byte of `range` is written.
    public func intersects(_ range: ByteRange) -> Bool {
        guard !range.isEmpty else { return false }
        let i = firstIndex(endingAfter: range.lowerBound)
        return i < ranges.count && ranges[i].lowerBound < range.upperBound
    }

    /// Whether every byte of `range` is written.
    public func covers(_ range: ByteRange) -> Bool {
        guard !range.isEmpty else { return true }
        let i = firstIndex(endingAfter: range.lowerBound)
        return i < ranges.count && ranges[i].lowerBound <= range.lowerBound && ranges[i].upperBound >= range.upperBound
    }

    /// Records a write; returns `false` (and records nothing) when a byte of it was written before.
    public mutating func record(_ range: ByteRange) -> Bool {
        guard !range.isEmpty else { return true }
        if intersects(range) { return false }
        var i = firstIndex(endingAfter: range.lowerBound)
        // `i` is the first range after the new one (none overlap). Merge with neighbours.
        var merged = range
        if i > 0 && ranges[i - 1].upperBound == merged.lowerBound {
            merged.lowerBound = ranges[i - 1].lowerBound
            ranges.remove(at: i - 1)
            i -= 1
        }
        if i < ranges.count && ranges[i].lowerBound == merged.upperBound {
            merged.upperBound = ranges[i].upperBound
            ranges.remove(at: i)
        }
        ranges.insert(merged, at: i)
        return true
    }

    public mutating func removeAll() { ranges.removeAll() }
}
