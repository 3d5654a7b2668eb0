/// Request parsing helpers of the test server: `Range` headers, percent-encoding, dates.

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

/// Decodes `%XX` escapes (and `+` is left alone).
func percentDecode(_ text: String) -> String {
    var bytes: [UInt8] = []
    let input = Array(text.utf8)
    var i = 0
    func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 65...70: c - 55
        case 97...102: c - 87
        default: nil
        }
    }
    while i < input.count {
        if input[i] == 37, i + 2 < input.count, let h = hex(input[i + 1]), let l = hex(input[i + 2]) {
            bytes.append(h << 4 | l)
            i += 3
        } else {
            bytes.append(input[i])
            i += 1
        }
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// Encodes everything but unreserved characters as `%XX`, for building test URLs.
public func percentEncode(_ text: String) -> String {
    var out = ""
    for b in text.utf8 {
        switch b {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
             UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
            out.append(Character(Unicode.Scalar(b)))
        default:
            let h = String(b, radix: 16, uppercase: true)
            out += "%" + (h.count == 1 ? "0" + h : h)
        }
    }
    return out
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
