import PercentEncoding

/// Request parsing helpers of the test server: `Range` headers and dates (percent-encoding is the
/// PercentEncoding module's).

#if canImport(Glibc)
import Glibc
#endif

enum RangeRequest: Equatable {
    case whole
    case unsatisfiable
    case range(Range<Int64>)
}

/// Parses a single-range `Range` header against a size (RFC 9110 §14.1.2).
func parseRange(_ value: String, size: Int64) -> RangeRequest {
    let trimmed = value.trimmingCharactersInSpaces()
    guard trimmed.hasPrefix("bytes=") else { return .whole }
    let spec = trimmed.dropFirst("bytes=".count)
    if spec.contains(",") { return .whole }  // multiple ranges: this server sends the whole body
    let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
    guard parts.count == 2 else { return .whole }
    if parts[0].isEmpty {
        guard let suffix = Int64(parts[1]), suffix > 0 else { return .unsatisfiable }
        if size == 0 { return .unsatisfiable }
        return .range(max(0, size - suffix)..<size)
    }
    guard let first = Int64(parts[0]) else { return .whole }
    if first >= size { return .unsatisfiable }
    let last = parts[1].isEmpty ? size - 1 : min(Int64(parts[1]) ?? -1, size - 1)
    if last < first { return .whole }
    return .range(first..<(last + 1))
}

extension String {
    func trimmingCharactersInSpaces() -> String {
        var s = Substring(self)
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return String(s)
    }
}



/// An IMF-fixdate `seconds` from now, for `Retry-After` dates.
func httpDate(secondsFromNow seconds: Int64) -> String {
    var t = time(nil) + time_t(seconds)
    var parts = tm()
    gmtime_r(&t, &parts)
    var buffer = [CChar](repeating: 0, count: 64)
    let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
    return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
