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
