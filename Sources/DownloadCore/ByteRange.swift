/// A half-open range of byte offsets, `[lowerBound, upperBound)`.
///
/// Byte offsets are `Int64` throughout Splitfetch so that files larger than 4 GiB behave the same
/// on every platform.
public struct ByteRange: Hashable, Sendable, CustomStringConvertible {
    /// The first byte in the range.
    public var lowerBound: Int64
    /// One past the last byte in the range.
    public var upperBound: Int64

    /// Creates a range; `lowerBound` must not exceed `upperBound`.
    public init(_ lowerBound: Int64, _ upperBound: Int64) {
        precondition(lowerBound <= upperBound, "ByteRange lower bound \(lowerBound) above upper bound \(upperBound)")
        self.lowerBound = lowerBound
        self.upperBound = upperBound
    }

    /// The number of bytes in the range.
    public var count: Int64 { upperBound - lowerBound }

    /// Whether the range holds no bytes.
    public var isEmpty: Bool { lowerBound == upperBound }

    /// The HTTP `Range` header value for this range (`bytes=first-last`, inclusive).
    ///
    /// - Precondition: the range is not empty.
    public var httpRangeValue: String {
        precondition(!isEmpty, "an empty range has no HTTP form")
        return "bytes=\(lowerBound)-\(upperBound - 1)"
    }

    public var description: String { "[\(lowerBound), \(upperBound))" }
}
