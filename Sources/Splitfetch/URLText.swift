/// Small URL helpers that work on the text of a URL, without Foundation.

/// Where a URL's authority (`userinfo@host:port`) sits in its text.
struct URLAuthority {
    /// Everything after `://` up to the path, query or fragment.
    var whole: Substring
    /// `user:password`, when there is an `@`.
    var userinfo: Substring?
    /// `host:port`, without the userinfo.
    var hostPort: Substring

    init?(_ url: String) {
        guard let r = url.firstRange(of: "://") else { return nil }
        let rest = url[r.upperBound...]
        whole = rest[..<(rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex)]
        if let at = whole.lastIndex(of: "@") {
            userinfo = whole[..<at]
            hostPort = whole[whole.index(after: at)...]
        } else {
            hostPort = whole
        }
    }
}

/// The URL with any `user:password@` removed, for messages, logs and statistics.
public func redactedURL(_ url: String) -> String {
    guard let authority = URLAuthority(url), authority.userinfo != nil else { return url }
    return String(url[..<authority.whole.startIndex]) + String(authority.hostPort) + String(url[authority.whole.endIndex...])
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
    guard var host = URLAuthority(url)?.hostPort else { return nil }
    if host.hasPrefix("[") {
        guard let close = host.firstIndex(of: "]") else { return nil }
        return String(host[...close])
    }
    if let colon = host.firstIndex(of: ":") { host = host[..<colon] }
    return host.isEmpty ? nil : String(host)
}

/// The explicit port of a URL, if any.
func urlPort(_ url: String) -> Int? {
    guard var hostPort = URLAuthority(url)?.hostPort else { return nil }
    if let close = hostPort.lastIndex(of: "]") { hostPort = hostPort[hostPort.index(after: close)...] }
    guard let colon = hostPort.lastIndex(of: ":") else { return nil }
    return Int(hostPort[hostPort.index(after: colon)...])
}

/// `scheme://host:port` of a URL, lowercased, with the default port made explicit.
func urlOrigin(_ url: String) -> String? {
    guard let scheme = urlScheme(url), let host = urlHost(url) else { return nil }
    return "\(scheme)://\(host.lowercased()):\(urlPort(url) ?? (scheme == "https" ? 443 : 80))"
}

/// `user:password` from a URL's authority, percent-decoded.
func urlCredentials(_ url: String) -> Credentials? {
    guard let userinfo = URLAuthority(url)?.userinfo else { return nil }
    let parts = userinfo.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
    return Credentials(user: percentDecoded(parts[0]), password: parts.count > 1 ? percentDecoded(parts[1]) : "")
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
