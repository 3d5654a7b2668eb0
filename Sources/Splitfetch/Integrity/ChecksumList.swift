/// A list of checksums as publishers ship them beside their files (`SHA256SUMS`, `NAME.sha256`).
///
/// Three formats, in any mix, one entry a line:
/// - GNU `sha256sum` output: `HEX  NAME` (text mode) or `HEX *NAME` (binary mode); a line that
///   starts with `\` has `\\` and `\n` escapes in its name, as GNU writes names with those.
///   The algorithm follows from the length of the value.
/// - BSD (and `sha256sum --tag`, `openssl dgst`): `SHA256 (NAME) = HEX`.
/// - A single-hash sidecar: a line with the value alone (or only `HEX` before the name).
///
/// Blank lines and `#` comments are skipped; a line in none of these forms is ignored.
public struct ChecksumList: Sendable, Equatable {
    /// One line's checksum; `name` is `nil` for a bare value.
    public struct Entry: Sendable, Equatable {
        public var name: String?
        public var digest: Digest
    }

    public var entries: [Entry]

    /// Parses the text of a list.
    public init(parsing text: String) {
        entries = text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }).compactMap { Self.entry(String($0)) }
    }

    /// The expected digests for a file, from the entries named `names` (the output's name first,
    /// then the URL's); a path in the list matches by its last component. With no entry so
    /// named, a list of bare values (a sidecar) applies to any file.
    ///
    /// - Parameters:
    ///   - names: the names to look up, the output's first.
    ///   - from: the file or URL the list came from, for messages.
    public func expected(for names: [String], from: String) -> [ExpectedDigest] {
        for name in names where !name.isEmpty {
            let matching = entries.filter { entry in
                guard let listed = entry.name else { return false }
                return listed == name || listed.split(separator: "/").last.map(String.init) == name
            }
            if !matching.isEmpty { return matching.map { ExpectedDigest($0.digest, source: .checksumFile(from)) } }
        }
        if !entries.isEmpty, entries.allSatisfy({ $0.name == nil }) {
            return entries.map { ExpectedDigest($0.digest, source: .checksumFile(from)) }
        }
        return []
    }

    private static func entry(_ raw: String) -> Entry? {
        let line = raw.trimmingSpaces()
        if line.isEmpty || line.hasPrefix("#") { return nil }
        return bsd(line) ?? gnu(line)
    }

    /// `ALG (NAME) = HEX`, also `ALG(NAME)= HEX` as `openssl dgst` writes it.
    private static func bsd(_ line: String) -> Entry? {
        guard let open = line.firstIndex(of: "("), let close = line.lastIndex(of: ")"), open < close else { return nil }
        var algorithmName = String(line[..<open]).trimmingSpaces()
        if algorithmName.hasPrefix("SHA2-") { algorithmName = "SHA" + algorithmName.dropFirst(5) }  // OpenSSL 3's names
        guard let algorithm = DigestAlgorithm(name: algorithmName) else { return nil }
        let after = line[line.index(after: close)...].trimmingSpaces()
        guard after.hasPrefix("=") else { return nil }
        let value = after.dropFirst().trimmingSpaces()
        guard value.utf8.count == algorithm.byteCount * 2, let digest = Digest(algorithm, text: value) else { return nil }
        return Entry(name: String(line[line.index(after: open)..<close]), digest: digest)
    }

    /// `HEX  NAME`, `HEX *NAME`, `\HEX  ESCAPED-NAME`, or `HEX` alone.
    private static func gnu(_ line: String) -> Entry? {
        var text = Substring(line)
        let escaped = text.first == "\\"
        if escaped { text = text.dropFirst() }
        let hex = text.prefix(while: { $0.isHexDigit })
        guard let algorithm = algorithm(forHexDigits: hex.utf8.count), let bytes = Digest.hexBytes(String(hex)) else { return nil }
        let digest = Digest(algorithm, bytes: bytes)
        let rest = text[hex.endIndex...]
        if rest.isEmpty { return Entry(name: nil, digest: digest) }
        guard rest.hasPrefix("  ") || rest.hasPrefix(" *") else { return nil }
        let name = String(rest.dropFirst(2))
        return Entry(name: escaped ? unescape(name) : name, digest: digest)
    }

    private static func algorithm(forHexDigits count: Int) -> DigestAlgorithm? {
        DigestAlgorithm.allCases.first { $0.byteCount * 2 == count }
    }

    private static func unescape(_ name: String) -> String {
        var result = ""
        var iterator = name.makeIterator()
        while let c = iterator.next() {
            guard c == "\\" else { result.append(c); continue }
            switch iterator.next() {
            case "n"?: result.append("\n")
            case "r"?: result.append("\r")
            case let other?: result.append(other)
            case nil: result.append("\\")
            }
        }
        return result
    }
}
