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
    /// between an answer and the next request: a field costs its two strings, made from
    /// contiguous bytes (a string decoded from a generic collection asks the runtime at each
    /// call whether that collection is contiguous: a third of the parse's time, measured).
    mutating func feed(line raw: UnsafeRawBufferPointer) {
        var end = raw.count
        while end > 0, raw[end - 1] == 0x0D || raw[end - 1] == 0x0A { end -= 1 }
        let line = UnsafeRawBufferPointer(rebasing: raw[..<end])
        let text = { (range: Range<Int>) in String(decoding: UnsafeRawBufferPointer(rebasing: line[range]), as: UTF8.self) }
        if line.starts(with: "HTTP/".utf8) {
            self = ResponseHead()
            // "HTTP/1.1 200 OK": the version up to the first space, the status the next word.
            let versionEnd = line.firstIndex(of: 0x20) ?? line.count
            version = Substring(text(5..<versionEnd))
            var from = versionEnd
            while from < line.count, line[from] == 0x20 { from += 1 }
            var to = from
            while to < line.count, line[to] != 0x20 { to += 1 }
            status = Self.decimal(UnsafeRawBufferPointer(rebasing: line[from..<to])) ?? 0
            return
        }
        if line.isEmpty {
            isComplete = status >= 200
            return
        }
        guard let colon = line.firstIndex(of: 0x3A) else { return }
        let isBlank = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        var valueStart = colon + 1
        var valueEnd = line.count
        while valueStart < valueEnd, isBlank(line[valueStart]) { valueStart += 1 }
        while valueEnd > valueStart, isBlank(line[valueEnd - 1]) { valueEnd -= 1 }
        // Field names are ASCII tokens: lowercased byte by byte.
        let name = String(unsafeUninitializedCapacity: colon) { buffer in
            for i in 0..<colon {
                let byte = line[i]
                buffer[i] = (0x41...0x5A).contains(byte) ? byte | 0x20 : byte
            }
            return colon
        }
        fields.append((name, text(valueStart..<valueEnd)))
    }

    /// A status code's digits; nil when empty, not all digits, or too long.
    private static func decimal(_ digits: UnsafeRawBufferPointer) -> Int? {
        guard (1...9).contains(digits.count) else { return nil }
        var value = 0
        for byte in digits {
            guard (0x30...0x39).contains(byte) else { return nil }
            value = value * 10 + Int(byte - 0x30)
        }
        return value
    }
}
