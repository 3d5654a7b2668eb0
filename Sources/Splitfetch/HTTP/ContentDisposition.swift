import PercentEncoding
/// Reading a file name from `Content-Disposition` (RFC 6266), without trusting it: callers pass
/// the result through ``safeFileName(_:)``.
package enum ContentDisposition {
    /// The `filename*` (RFC 8187, UTF-8 or ISO-8859-1) or else `filename` parameter, decoded;
    /// `nil` when absent or malformed.
    package static func fileName(_ header: String) -> String? {
        var plain: String?
        var extended: String?
        for parameter in parameters(header) {
            switch parameter.name {
            case "filename*": extended = decodeExtended(parameter.value)
            case "filename": plain = parameter.value
            default: break
            }
        }
        return extended ?? plain
    }

    /// Splits `type; a=b; c="d;e"` into lowercased names and unquoted values.
    static func parameters(_ header: String) -> [(name: String, value: String)] {
        var result: [(String, String)] = []
        var parts: [String] = []
        var current = ""
        var quoted = false
        var escaped = false
        for c in header {
            if escaped { current.append(c); escaped = false; continue }
            if quoted && c == "\\" { escaped = true; current.append(c); continue }
            if c == "\"" { quoted.toggle() }
            if c == ";" && !quoted { parts.append(current); current = ""; continue }
            current.append(c)
        }
        parts.append(current)
        for part in parts.dropFirst() {
            guard let eq = part.firstIndex(of: "=") else { continue }
            let name = part[..<eq].trimmingCharacters().lowercased()
            var value = part[part.index(after: eq)...].trimmingCharacters()
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 {
                value = String(value.dropFirst().dropLast())
                var unescaped = ""
                var pending = false
                for c in value {
                    if pending { unescaped.append(c); pending = false } else if c == "\\" { pending = true } else { unescaped.append(c) }
                }
                value = unescaped
            }
            result.append((name, value))
        }
        return result
    }

    /// Decodes `charset'language'percent-encoded` (RFC 8187).
    static func decodeExtended(_ value: String) -> String? {
        let pieces = value.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard pieces.count == 3 else { return nil }
        let charset = pieces[0].lowercased()
        let decoded = percentDecodedBytes(pieces[2])
        switch charset {
        case "utf-8": return String(validating: decoded, as: UTF8.self)
        case "iso-8859-1": return String(decoded.map { Character(Unicode.Scalar($0)) })
        default: return nil
        }
    }
}

