/// Percent-encoding (RFC 3986), shared by the library (file names from URLs, credentials) and
/// the test server (query values): one implementation, no dependencies.

/// Decodes `%XX` escapes; invalid escapes are kept as they are; invalid UTF-8 is repaired.
package func percentDecoded(_ text: Substring) -> String {
    // Most names have no escape: no arrays made for them.
    guard text.utf8.contains(37) else { return String(text) }
    return String(decoding: percentDecodedBytes(text), as: UTF8.self)
}

/// The bytes of a `%XX`-encoded string; invalid escapes are kept as they are.
package func percentDecodedBytes(_ text: Substring) -> [UInt8] {
    let input = Array(text.utf8)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(input.count)
    func hex(_ c: UInt8) -> UInt8? {
        switch c {
        case 48...57: c - 48
        case 65...70: c - 55
        case 97...102: c - 87
        default: nil
        }
    }
    var i = 0
    while i < input.count {
        if input[i] == 37, i + 2 < input.count, let h = hex(input[i + 1]), let l = hex(input[i + 2]) {
            bytes.append(h << 4 | l)
            i += 3
        } else {
            bytes.append(input[i])
            i += 1
        }
    }
    return bytes
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
