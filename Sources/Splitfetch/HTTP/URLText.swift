/// File names from URLs, and percent-decoding. Decisions about where a URL points (origins,
/// credentials) are made by ``CurlURL``, never by scanning text.

/// The URL with any `user:password@` removed, for messages, logs and statistics; read by
/// libcurl's own URL parser, which also hides signatures and tokens in the query.
public func redactedURL(_ url: String) -> String {
    CurlURL.redacting(url)
}

/// Decodes `%XX` escapes; invalid escapes are kept as they are; invalid UTF-8 is repaired.
func percentDecoded(_ text: Substring) -> String {
    String(decoding: percentDecodedBytes(text), as: UTF8.self)
}

/// The bytes of a `%XX`-encoded string; invalid escapes are kept as they are.
func percentDecodedBytes(_ text: Substring) -> [UInt8] {
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

/// The file name a download of `url` gets by default: the last path component, percent-decoded
/// and made safe (see ``safeFileName(_:)``); `index.html` when the path ends in `/` or is empty.
public func defaultFileName(forURL url: String) -> String {
    var rest = Substring(url)
    if let r = url.firstRange(of: "://") { rest = url[r.upperBound...] }
    if let end = rest.firstIndex(where: { $0 == "?" || $0 == "#" }) { rest = rest[..<end] }
    guard let slash = rest.firstIndex(of: "/") else { return "index.html" }
    let path = rest[slash...]
    let last = path.split(separator: "/", omittingEmptySubsequences: false).last ?? ""
    return safeFileName(percentDecoded(last)) ?? "index.html"
}

/// Reduces a name to a safe base name, or `nil` when nothing usable is left.
///
/// Removes directory parts (`/` and `\`), control characters, and leading dots; rejects `.`, `..`
/// and empty names; truncates to 255 bytes of UTF-8 at a character boundary.
public func safeFileName(_ name: String) -> String? {
    var base = Substring(name)
    if let cut = base.lastIndex(where: { $0 == "/" || $0 == "\\" }) { base = base[base.index(after: cut)...] }
    var cleaned = String(base.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }.map(Character.init))
    // Dots and spaces in any mix: " . x" must not become the hidden ". x" (a fuzzer found it).
    while let first = cleaned.first, first == "." || first == " " || first == "\t" { cleaned.removeFirst() }
    cleaned = cleaned.trimmingSpaces()
    guard !cleaned.isEmpty else { return nil }
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
