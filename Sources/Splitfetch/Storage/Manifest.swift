import FoundationEssentials

/// The resume record kept beside a partial file (`NAME.part.json`).
///
/// A versioned JSON document a person can read (`jq . NAME.part.json`). It never holds
/// credentials. Two offsets per segment:
///
/// - `written`: bytes `[start, written)` were on disk (`fdatasync`) when the manifest was saved.
///   Trusted after anything, a power cut included.
/// - `cached` (optional): bytes `[start, cached)` had been written to the file (the kernel's page
///   cache) when the manifest was saved. Trusted only while `bootID` matches the running kernel's
///   boot: a killed process loses nothing from the page cache, a reboot may.
public struct Manifest: Codable, Sendable, Equatable {
    /// The format this code writes.
    public static let currentVersion = 1
    /// The value of ``format``.
    public static let formatName = "splitfetch-manifest"

    /// One byte range of the file and how much of it is stored.
    public struct Segment: Codable, Sendable, Equatable {
        public var start: Int64
        public var end: Int64
        public var written: Int64
        public var cached: Int64?

        public init(start: Int64, end: Int64, written: Int64, cached: Int64? = nil) {
            self.start = start
            self.end = end
            self.written = written
            self.cached = cached
        }
    }

    /// Always ``formatName``.
    public var format: String = Manifest.formatName
    /// The format version.
    public var version: Int = Manifest.currentVersion
    /// The URL asked for, credentials removed.
    public var url: String
    /// The URL after redirects, credentials removed.
    public var finalURL: String
    /// The file size.
    public var size: Int64
    public var etag: String?
    public var lastModified: String?
    /// The planning policy the download started with.
    public var minimumSegmentSize: Int64
    /// The kernel boot the `cached` offsets belong to.
    public var bootID: String?
    /// Segments in ascending order, covering `[0, size)` exactly.
    public var segments: [Segment]
    /// CRC-32 (hex) of the manifest's canonical JSON without this field; a damaged manifest that
    /// is still valid JSON is caught by it.
    public var checksum: String?

    public init(url: String, finalURL: String, size: Int64, etag: String?, lastModified: String?,
                minimumSegmentSize: Int64, bootID: String?, segments: [Segment]) {
        self.url = url
        self.finalURL = finalURL
        self.size = size
        self.etag = etag
        self.lastModified = lastModified
        self.minimumSegmentSize = minimumSegmentSize
        self.bootID = bootID
        self.segments = segments
    }

    /// The manifest as saved: pretty-printed JSON with its checksum.
    public func jsonBytes() -> [UInt8] { ManifestCodec.encode(self) }

    /// Decodes and checks a saved manifest (format, version, checksum, ranges).
    ///
    /// - Parameter path: named in errors.
    /// - Throws: ``DownloadError`` with code `badManifest`.
    public init(jsonBytes: [UInt8], path: String) throws(DownloadError) {
        self = try ManifestCodec.decode(jsonBytes, path: path)
    }

    /// Bytes known to be stored, trusting `cached` offsets only for `currentBootID`.
    public func storedBytes(currentBootID: String?) -> Int64 {
        usableProgress(currentBootID: currentBootID).reduce(0) { $0 + ($1.written - $1.start) }
    }

    /// Each segment with the offset that may be trusted now.
    func usableProgress(currentBootID: String?) -> [Segment] {
        let trustCache = bootID != nil && bootID == currentBootID
        return segments.map { s in
            Segment(start: s.start, end: s.end, written: trustCache ? max(s.written, s.cached ?? s.written) : s.written)
        }
    }
}

/// Encoding and strict decoding of manifests; no file access.
enum ManifestCodec {
    /// The manifest as saved: pretty-printed, keys sorted, with its checksum, ending in a newline.
    static func encode(_ manifest: Manifest) -> [UInt8] {
        var sealed = manifest
        sealed.checksum = checksum(of: manifest)
        var writer = ManifestJSONWriter(pretty: true)
        writer.write(sealed)
        return writer.bytes + [UInt8(ascii: "\n")]
    }

    /// CRC-32 of the canonical (compact, sorted-key) JSON of `manifest` without its checksum.
    static func checksum(of manifest: Manifest) -> String {
        var bare = manifest
        bare.checksum = nil
        let value = CRC32.checksum(canonicalJSON(bare))
        let hex = String(value, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }

    /// Compact JSON with sorted keys: byte for byte what `JSONEncoder` writes with
    /// `[.sortedKeys, .withoutEscapingSlashes]`, the form version 1 checksums are computed over.
    static func canonicalJSON(_ manifest: Manifest) -> [UInt8] {
        var writer = ManifestJSONWriter(pretty: false)
        writer.write(manifest)
        return writer.bytes
    }

    /// Decodes and checks a manifest.
    ///
    /// - Parameter path: named in errors.
    /// - Throws: ``DownloadError`` with code `badManifest`, naming the path and the problem.
    static func decode(_ bytes: [UInt8], path: String) throws(DownloadError) -> Manifest {
        func bad(_ problem: String) -> DownloadError {
            DownloadError(.badManifest, "manifest \(path) \(problem); run with --restart to discard it and start over")
        }
        if bytes.isEmpty { throw bad("is empty") }
        if bytes.allSatisfy({ $0 == 0 }) { throw bad("is all zero bytes") }
        struct Header: Decodable {
            var format: String?
            var version: Int?
        }
        let data = Data(bytes)
        guard let header = try? JSONDecoder().decode(Header.self, from: data) else {
            throw bad("is not valid JSON (truncated or damaged)")
        }
        guard header.format == Manifest.formatName else { throw bad("is not a splitfetch manifest") }
        guard let version = header.version else { throw bad("has no version") }
        guard version == Manifest.currentVersion else {
            throw bad("has format version \(version); this splitfetch reads version \(Manifest.currentVersion)")
        }
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: data)
        } catch {
            throw bad("is missing fields or has fields of the wrong type")
        }
        guard let stored = manifest.checksum else { throw bad("has no checksum") }
        guard stored == checksum(of: manifest) else { throw bad("fails its checksum (damaged)") }
        if let problem = problem(in: manifest) { throw bad(problem) }
        return manifest
    }

    /// The first inconsistency in a manifest's numbers, or `nil`.
    static func problem(in m: Manifest) -> String? {
        if m.size < 0 { return "has a negative size" }
        if m.minimumSegmentSize < 1 { return "has a minimum segment size below 1" }
        if m.size > 0 && m.segments.isEmpty { return "has no segments" }
        var cursor: Int64 = 0
        for (i, s) in m.segments.enumerated() {
            if s.start < 0 || s.end < 0 || s.written < 0 || (s.cached ?? 0) < 0 { return "segment \(i) has a negative offset" }
            if s.start != cursor { return s.start < cursor ? "segment \(i) overlaps the one before" : "has a gap before segment \(i)" }
            if s.end <= s.start { return "segment \(i) is empty or reversed" }
            if s.end > m.size { return "segment \(i) runs past the size \(m.size)" }
            if s.written < s.start || s.written > s.end { return "segment \(i) has written \(s.written) outside [\(s.start), \(s.end)]" }
            if let c = s.cached, c < s.start || c > s.end { return "segment \(i) has cached \(c) outside [\(s.start), \(s.end)]" }
            cursor = s.end
        }
        if cursor != m.size { return "segments end at \(cursor) but the size is \(m.size)" }
        if m.url.isEmpty { return "has no URL" }
        return nil
    }
}

/// Writes a manifest as JSON in the layout `JSONEncoder` uses with `.sortedKeys` (and, when
/// pretty, `.prettyPrinted`), without its cost: the manifest is saved before the first range
/// request and at every checkpoint, and `JSONEncoder`'s first use in a process took about 0.4 ms
/// of the time between the probe's answer and the first data request (perf, 12 runs).
/// Absent optionals are left out, as the synthesized `Encodable` conformance does.
struct ManifestJSONWriter {
    private static let hexDigits = Array("0123456789abcdef".utf8)
    private(set) var bytes: [UInt8] = []
    let pretty: Bool
    private var depth = 0

    init(pretty: Bool) {
        self.pretty = pretty
        bytes.reserveCapacity(512)
    }

    /// One manifest object; keys in sorted (byte) order.
    mutating func write(_ m: Manifest) {
        var first = true
        open("{")
        if let v = m.bootID { key("bootID", &first); string(v) }
        if let v = m.checksum { key("checksum", &first); string(v) }
        if let v = m.etag { key("etag", &first); string(v) }
        key("finalURL", &first); string(m.finalURL)
        key("format", &first); string(m.format)
        if let v = m.lastModified { key("lastModified", &first); string(v) }
        key("minimumSegmentSize", &first); integer(m.minimumSegmentSize)
        key("segments", &first)
        open("[")
        for (i, segment) in m.segments.enumerated() {
            if i > 0 { bytes.append(UInt8(ascii: ",")) }
            newline()
            write(segment)
        }
        close("]", empty: m.segments.isEmpty)
        key("size", &first); integer(m.size)
        key("url", &first); string(m.url)
        key("version", &first); integer(Int64(m.version))
        close("}", empty: false)
    }

    private mutating func write(_ s: Manifest.Segment) {
        var first = true
        open("{")
        if let v = s.cached { key("cached", &first); integer(v) }
        key("end", &first); integer(s.end)
        key("start", &first); integer(s.start)
        key("written", &first); integer(s.written)
        close("}", empty: false)
    }

    private mutating func open(_ bracket: Unicode.Scalar) {
        bytes.append(UInt8(ascii: bracket))
        depth += 1
    }

    /// Closes an object or array; `JSONEncoder` pretty-prints an empty array as `[`, a blank line
    /// and `]`.
    private mutating func close(_ bracket: Unicode.Scalar, empty: Bool) {
        depth -= 1
        if empty && pretty { bytes.append(UInt8(ascii: "\n")) }
        newline()
        bytes.append(UInt8(ascii: bracket))
    }

    private mutating func newline() {
        guard pretty else { return }
        bytes.append(UInt8(ascii: "\n"))
        bytes.append(contentsOf: repeatElement(UInt8(ascii: " "), count: 2 * depth))
    }

    private mutating func key(_ name: StaticString, _ first: inout Bool) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        newline()
        bytes.append(UInt8(ascii: "\""))
        name.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(UInt8(ascii: "\""))
        bytes.append(contentsOf: (pretty ? " : " : ":").utf8)
    }

    private mutating func integer(_ value: Int64) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A JSON string: `"` and `\` escaped, the control characters as `\b \t \n \f \r` or
    /// `\u00xx` (lower-case hex), everything else as its UTF-8 bytes.
    private mutating func string(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x08: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "b")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0C: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "f")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0..<0x20:
                bytes.append(contentsOf: "\\u00".utf8)
                bytes.append(contentsOf: [Self.hexDigits[Int(byte >> 4)], Self.hexDigits[Int(byte & 0xF)]])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}

/// CRC-32 (IEEE 802.3, reflected, as in zlib and PNG).
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for b in bytes { crc = table[Int((crc ^ UInt32(b)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
