import PercentEncoding

/// File names from URLs (percent-decoding is in the PercentEncoding module). Decisions about where a URL points (origins,
/// credentials) are made by ``CurlURL``, never by scanning text.

/// The URL with any `user:password@` removed, for messages, logs and statistics; read by
/// libcurl's own URL parser, which also hides signatures and tokens in the query.
public func redactedURL(_ url: String) -> String {
    CurlURL.redacting(url)
}


/// The file name a download of `url` gets by default: the last path component, percent-decoded
/// and made safe (see ``safeFileName(_:)``); `index.html` when the path ends in `/` or is empty.
public func defaultFileName(forURL url: String) -> String {
    // Read as bytes: every separator is ASCII, and a list of thousands of URLs names each file
    // before the first request.
    let bytes = url.utf8
    var start = bytes.startIndex
    if let colon = bytes.firstIndex(of: UInt8(ascii: ":")),
       bytes[colon...].starts(with: "://".utf8) {
        start = bytes.index(colon, offsetBy: 3)
    }
    let end = bytes[start...].firstIndex { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? bytes.endIndex
    guard let slash = bytes[start..<end].firstIndex(of: UInt8(ascii: "/")) else { return "index.html" }
    let lastSlash = bytes[slash..<end].lastIndex(of: UInt8(ascii: "/")) ?? slash
    // Sliced by scalars: a string's own subscript would round to a character's start.
    return safeFileName(percentDecoded(Substring(url.unicodeScalars[bytes.index(after: lastSlash)..<end]))) ?? "index.html"
}

/// Reduces a name to a safe base name, or `nil` when nothing usable is left.
///
/// Removes directory parts (`/` and `\`), control characters, and leading dots; rejects `.`, `..`
/// and empty names; truncates to 255 bytes of UTF-8 at a character boundary.
public func safeFileName(_ name: String) -> String? {
    // Each byte looked for is ASCII, never part of a longer UTF-8 sequence: cut and trimmed on
    // bytes, a `/` joined by a combining mark into one character is still a separator.
    var base = Substring(name)
    if let cut = base.utf8.lastIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }) {
        base = Substring(base.unicodeScalars[base.utf8.index(after: cut)...])
    }
    var cleaned = String(base)
    if base.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
        var kept = String.UnicodeScalarView()
        kept.append(contentsOf: base.unicodeScalars.lazy.filter { $0.value >= 0x20 && $0.value != 0x7F })
        cleaned = String(kept)
    }
    // Dots and spaces in any mix: " . x" must not become the hidden ". x" (a fuzzer found it).
    let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
    let utf8 = cleaned.utf8
    let first = utf8.firstIndex { !(isBlank($0) || $0 == UInt8(ascii: ".")) } ?? utf8.endIndex
    guard let last = utf8[first...].lastIndex(where: { !isBlank($0) }) else { return nil }
    cleaned = String(cleaned.unicodeScalars[first..<utf8.index(after: last)])
    while cleaned.utf8.count > 255 { cleaned.removeLast() }
    return cleaned
}

extension StringProtocol {
    func trimmingSpaces() -> String {
        var s = self[...]
        while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" { s.removeLast() }
        return String(s)
    }
}
