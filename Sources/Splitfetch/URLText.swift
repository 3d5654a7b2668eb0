/// Small URL helpers that work on the text of a URL, without Foundation.

/// The URL with any `user:password@` removed, for messages, logs and statistics.
public func redactedURL(_ url: String) -> String {
    guard let schemeEnd = url.firstRange(of: "://") else { return url }
    let afterScheme = url[schemeEnd.upperBound...]
    let authorityEnd = afterScheme.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? afterScheme.endIndex
    let authority = afterScheme[..<authorityEnd]
    guard let at = authority.lastIndex(of: "@") else { return url }
    return String(url[..<schemeEnd.upperBound]) + String(authority[authority.index(after: at)...]) + String(afterScheme[authorityEnd...])
}

/// The lowercased scheme of a URL (`http`, `https`, …), or `nil` if it has none.
func urlScheme(_ url: String) -> String? {
    guard let r = url.firstRange(of: "://") else { return nil }
    let scheme = url[..<r.lowerBound]
    guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber || "+-.".contains($0) }) else { return nil }
    return scheme.lowercased()
}

/// The host part of an `http(s)` URL, or `nil`.
func urlHost(_ url: String) -> String? {
    guard let r = url.firstRange(of: "://") else { return nil }
    let rest = url[r.upperBound...]
    let end = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
    var authority = rest[..<end]
    if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
    if authority.hasPrefix("[") {
        guard let close = authority.firstIndex(of: "]") else { return nil }
        return String(authority[...close])
    }
    if let colon = authority.firstIndex(of: ":") { authority = authority[..<colon] }
    return authority.isEmpty ? nil : String(authority)
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
    while cleaned.hasPrefix(".") { cleaned.removeFirst() }
    cleaned = cleaned.trimmingSpaces()
    guard !cleaned.isEmpty else { return nil }
    while cleaned.utf8.count > 255 { cleaned.removeLast() }
    return cleaned
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" { s.removeLast() }
        return String(s)
    }
}
