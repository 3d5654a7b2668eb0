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
    /// one), so only the last response's fields remain. Read as bytes, on the transport thread
    /// between an answer and the next request: a field costs its two strings, no more.
    mutating func feed(line raw: UnsafeRawBufferPointer) {
        var end = raw.count
        while end > 0, raw[end - 1] == 0x0D || raw[end - 1] == 0x0A { end -= 1 }
        let line = raw[..<end]
        if line.starts(with: "HTTP/".utf8) {
            self = ResponseHead()
            let parts = line.split(separator: 0x20, maxSplits: 2)
            status = parts.count > 1 ? Int(String(decoding: parts[1], as: UTF8.self)) ?? 0 : 0
            version = parts.first.map { Substring(String(decoding: $0.dropFirst(5), as: UTF8.self)) } ?? ""
            return
        }
        if line.isEmpty {
            isComplete = status >= 200
            return
        }
        guard let colon = line.firstIndex(of: 0x3A) else { return }
        let isBlank = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        var value = line[(colon + 1)...]
        while let first = value.first, isBlank(first) { value.removeFirst() }
        while let last = value.last, isBlank(last) { value.removeLast() }
        // Field names are ASCII tokens: lowercased byte by byte.
        let name = String(decoding: line[..<colon].lazy.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
        fields.append((name, String(decoding: value, as: UTF8.self)))
    }
}
