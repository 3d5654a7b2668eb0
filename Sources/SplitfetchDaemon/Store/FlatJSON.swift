import DownloadCore

/// A reader of the two JSON shapes the SQLite store writes in a column, an array of strings
/// and an object of strings, as `JSONEncoder` writes them: no white space, and only the short
/// escapes (`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`). It walks the UTF-8 bytes once; a
/// restart of 20,000 jobs spent a quarter of its time in `JSONDecoder` on these columns.
///
/// Anything else (white space, `\u` escapes, a value that is not a string, a repeated key)
/// gives `nil`, and the caller uses `JSONDecoder`, which decides.
enum FlatJSON {
    /// `["a","b"]` read as its strings.
    static func strings(_ text: String) -> [String]? {
        var text = text
        return text.withUTF8 { bytes -> [String]? in
            var reader = Reader(bytes: bytes)
            guard reader.take(UInt8(ascii: "[")) else { return nil }
            var result: [String] = []
            if reader.take(UInt8(ascii: "]")) { return reader.atEnd ? result : nil }
            repeat {
                guard let value = reader.string() else { return nil }
                result.append(value)
            } while reader.take(UInt8(ascii: ","))
            return reader.take(UInt8(ascii: "]")) && reader.atEnd ? result : nil
        }
    }

    /// `{"k":"v"}` read as its pairs.
    static func object(_ text: String) -> [String: String]? {
        var text = text
        return text.withUTF8 { bytes -> [String: String]? in
            var reader = Reader(bytes: bytes)
            guard reader.take(UInt8(ascii: "{")) else { return nil }
            var result: [String: String] = [:]
            if reader.take(UInt8(ascii: "}")) { return reader.atEnd ? result : nil }
            repeat {
                guard let key = reader.string(), reader.take(UInt8(ascii: ":")), let value = reader.string(),
                      result.updateValue(value, forKey: key) == nil else { return nil }
            } while reader.take(UInt8(ascii: ","))
            return reader.take(UInt8(ascii: "}")) && reader.atEnd ? result : nil
        }
    }

    /// `strings` written as a JSON array.
    static func encode(_ strings: [String]) -> String {
        var out = "["
        for (index, string) in strings.enumerated() {
            if index > 0 { out += "," }
            append(string, to: &out)
        }
        return out + "]"
    }

    /// `object` written as a JSON object, its keys sorted (the same map, the same text).
    static func encode(_ object: [String: String]) -> String {
        var out = "{"
        for (index, key) in object.keys.sorted().enumerated() {
            if index > 0 { out += "," }
            append(key, to: &out)
            out += ":"
            append(object[key]!, to: &out)
        }
        return out + "}"
    }

    /// A file's recorded validators as the JSON object `Codable` makes of them (keys sorted, a
    /// missing validator left out), which `JSONDecoder` reads back. Written once per completed
    /// job, where `JSONEncoder` was about 3 % of the daemon's CPU over 1,000 downloads.
    static func encode(_ recorded: ConditionalRefresh.Recorded) -> String {
        var out = "{"
        if let etag = recorded.etag {
            out += "\"etag\":"
            append(etag, to: &out)
            out += ","
        }
        if let lastModified = recorded.lastModified {
            out += "\"lastModified\":"
            append(lastModified, to: &out)
            out += ","
        }
        return out + "\"modifiedNanoseconds\":\(recorded.modifiedNanoseconds),\"size\":\(recorded.size)}"
    }

    /// A JSON string: quotes, backslashes and control characters escaped, the rest as it is.
    private static func append(_ string: String, to out: inout String) {
        out += "\""
        // Most strings (URLs, file names, GIDs) need no escape: appended whole.
        if !string.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out += string
            out += "\""
            return
        }
        var plain = string.unicodeScalars.startIndex
        let scalars = string.unicodeScalars
        for index in scalars.indices {
            let scalar = scalars[index]
            let escaped: String? = switch scalar {
            case "\"": "\\\""
            case "\\": "\\\\"
            case "\n": "\\n"
            case "\r": "\\r"
            case "\t": "\\t"
            case "\u{8}": "\\b"
            case "\u{C}": "\\f"
            case _ where scalar.value < 0x20:
                "\\u00" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            default: nil
            }
            guard let escaped else { continue }
            out.unicodeScalars.append(contentsOf: scalars[plain..<index])
            out += escaped
            plain = scalars.index(after: index)
        }
        out.unicodeScalars.append(contentsOf: scalars[plain...])
        out += "\""
    }

    private struct Reader {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        var atEnd: Bool { index == bytes.count }

        mutating func take(_ byte: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// A quoted string with short escapes only.
        mutating func string() -> String? {
            guard take(UInt8(ascii: "\"")) else { return nil }
            let start = index
            // The usual string has no escape: one copy of its bytes.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return String(validating: UnsafeBufferPointer(rebasing: bytes[start..<index - 1]), as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { return nil }
                index += 1
            }
            var unescaped = Array(bytes[start..<index])
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return String(validating: unescaped, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escaped = bytes[index]
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): unescaped.append(escaped)
                    case UInt8(ascii: "b"): unescaped.append(0x08)
                    case UInt8(ascii: "f"): unescaped.append(0x0C)
                    case UInt8(ascii: "n"): unescaped.append(0x0A)
                    case UInt8(ascii: "r"): unescaped.append(0x0D)
                    case UInt8(ascii: "t"): unescaped.append(0x09)
                    default: return nil
                    }
                case 0..<0x20:
                    return nil
                default:
                    unescaped.append(byte)
                }
            }
            return nil
        }
    }
}
