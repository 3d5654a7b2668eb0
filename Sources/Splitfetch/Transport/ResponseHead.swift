/// The status line and header fields of one HTTP response, as libcurl delivered them.
struct ResponseHead: Sendable, Equatable {
    /// The HTTP status code, e.g. `206`.
    var status: Int = 0
    /// The protocol version of the status line: `2` over HTTP/2, `1.1` over HTTP/1.1.
    var version: Substring = ""
    /// Header fields in arrival order; names lowercased, values trimmed.
    var fields: [(name: String, value: String)] = []
    /// Whether the blank line ending the header block has been seen.
    var isComplete = false

    static func == (lhs: ResponseHead, rhs: ResponseHead) -> Bool {
        lhs.status == rhs.status && lhs.isComplete == rhs.isComplete
            && lhs.fields.elementsEqual(rhs.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    /// The first value of a field, by case-insensitive name.
    func first(_ name: String) -> String? {
        let lower = name.lowercased()
        return fields.first { $0.name == lower }?.value
    }

    /// Every value of a field, by case-insensitive name.
    func all(_ name: String) -> [String] {
        let lower = name.lowercased()
        return fields.filter { $0.name == lower }.map(\.value)
    }

    /// Feeds one raw header line (with its CRLF) from libcurl's header callback.
    ///
    /// A status line starts a new response (redirects and `100 Continue` arrive before the final
    /// one), so only the last response's fields remain.
    mutating func feed(line raw: UnsafeRawBufferPointer) {
        var bytes = Substring(decoding: raw, as: UTF8.self)
        while let last = bytes.unicodeScalars.last, last == "\r" || last == "\n" { bytes.unicodeScalars.removeLast() }
        if bytes.hasPrefix("HTTP/") {
            self = ResponseHead()
            let parts = bytes.split(separator: " ", maxSplits: 2)
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            version = parts.first?.dropFirst(5) ?? ""
            return
        }
        if bytes.isEmpty {
            isComplete = status >= 200
            return
        }
        guard let colon = bytes.firstIndex(of: ":") else { return }
        let name = bytes[..<colon].lowercased()
        var value = bytes[bytes.index(after: colon)...]
        while let c = value.first, c == " " || c == "\t" { value.removeFirst() }
        while let c = value.last, c == " " || c == "\t" { value.removeLast() }
        fields.append((name, String(value)))
    }
}
