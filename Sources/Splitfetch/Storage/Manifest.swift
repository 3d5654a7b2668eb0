import FoundationEssentials
public import SegmentPlanning

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
    /// The format this code writes. Version 1 kept its checksum inside the document, over a
    /// canonical re-encoding; version 2 keeps it in a trailer line, over the stored bytes.
    public static let currentVersion = 2
    /// The value of ``format``.
    public static let formatName = "splitfetch-manifest"

    /// One byte range of the file and how much of it is stored: `start`, `end`, `written`, and
    /// `cached` when newer bytes were written but not synced. The download core's checkpoint
    /// segment, saved as it is.
    public typealias Segment = DownloadMachine.Checkpoint.Segment

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
    /// The server's digest of the file when the download began (the one it would be checked
    /// against): a different
    /// one on resume means the file changed. Absent when the server stated none.
    public var serverDigest: Digest?
    /// The mirrors in use when the download began (credentials removed), for the record: a
    /// rerun may give more, fewer or other mirrors, and each proves its identity again.
    /// Absent without mirrors.
    public var mirrors: [String]?
    /// Version 1 only: CRC-32 (hex) of the manifest's canonical JSON without this field. Version 2
    /// keeps its checksum in the file's trailer line instead (see `ManifestCodec`).
    public var checksum: String?

    public init(url: String, finalURL: String, size: Int64, etag: String?, lastModified: String?,
                minimumSegmentSize: Int64, bootID: String?, segments: [Segment], serverDigest: Digest? = nil) {
        self.serverDigest = serverDigest
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
    /// - Parameters:
    ///   - jsonBytes: the file's bytes, as ``jsonBytes()`` wrote them.
    ///   - path: named in errors.
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
///
/// A version 2 file is the manifest as `JSONEncoder` writes it (pretty, keys sorted), a newline,
/// and a trailer line `{"crc32" : "…"}` holding the CRC-32 of every byte before it, exactly as
/// stored: `jq . NAME.part.json` reads both as a JSON sequence, and a damaged manifest that is
/// still valid JSON is caught without re-encoding anything. Version 1 files (earlier builds) keep
/// their checksum inside, over the compact sorted-key JSON, and are still read.
package enum ManifestCodec {
    private static let trailerPrefix = Array("{\"crc32\" : \"".utf8)

    /// The manifest as saved (version 2), ending in a newline.
    package static func encode(_ manifest: Manifest) -> [UInt8] {
        var current = manifest
        current.version = Manifest.currentVersion
        current.checksum = nil
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Encoding plain strings, numbers and arrays cannot fail.
        var bytes = Array(try! encoder.encode(current))
        bytes.append(UInt8(ascii: "\n"))
        bytes += trailerPrefix + Array(hex(CRC32.checksum(bytes)).utf8) + Array("\"}\n".utf8)
        return bytes
    }

    /// The body and stored CRC of a version 2 file; `nil` when its last line is no trailer.
    private static func splitTrailer(_ bytes: [UInt8]) -> (body: ArraySlice<UInt8>, crc: String)? {
        var end = bytes.count
        if end > 0 && bytes[end - 1] == UInt8(ascii: "\n") { end -= 1 }
        guard let newline = bytes[..<end].lastIndex(of: UInt8(ascii: "\n")) else { return nil }
        let last = bytes[(newline + 1)..<end]
        guard last.starts(with: trailerPrefix), last.count == trailerPrefix.count + 10,
              last.suffix(2).elementsEqual("\"}".utf8) else { return nil }
        let crc = String(decoding: last.dropFirst(trailerPrefix.count).prefix(8), as: UTF8.self)
        return (bytes[...newline], crc)
    }

    /// Version 1's checksum: CRC-32 of the compact sorted-key JSON of `manifest` without it.
    static func versionOneChecksum(of manifest: Manifest) -> String {
        var bare = manifest
        bare.checksum = nil
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return hex(CRC32.checksum(Array(try! encoder.encode(bare))))
    }

    private static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 8 - digits.count) + digits
    }

    /// Decodes and checks a manifest of version 1 or 2.
    ///
    /// - Parameter path: named in errors.
    /// - Throws: ``DownloadError`` with code `badManifest`, naming the path and the problem.
    package static func decode(_ bytes: [UInt8], path: String) throws(DownloadError) -> Manifest {
        func bad(_ problem: String) -> DownloadError {
            DownloadError(.badManifest, "manifest \(path) \(problem); start over to discard it", remedy: .restart)
        }
        if bytes.isEmpty { throw bad("is empty") }
        if bytes.allSatisfy({ $0 == 0 }) { throw bad("is all zero bytes") }
        struct Header: Decodable {
            var format: String?
            var version: Int?
        }
        let trailer = splitTrailer(bytes)
        let body = Data(trailer?.body ?? bytes[...])
        guard let header = try? JSONDecoder().decode(Header.self, from: body) else {
            throw bad("is not valid JSON (truncated or damaged)")
        }
        guard header.format == Manifest.formatName else { throw bad("is not a splitfetch manifest") }
        guard let version = header.version else { throw bad("has no version") }
        guard version == 1 || version == 2 else {
            throw bad("has format version \(version); this splitfetch reads versions 1 and 2")
        }
        if version == 2 {
            guard let trailer else { throw bad("has no checksum line") }
            guard trailer.crc == hex(CRC32.checksum(trailer.body)) else { throw bad("fails its checksum (damaged)") }
        }
        let manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: body)
        } catch {
            throw bad("is missing fields or has fields of the wrong type")
        }
        if version == 1 {
            guard trailer == nil else { throw bad("mixes the two versions' checksums") }
            guard let stored = manifest.checksum else { throw bad("has no checksum") }
            guard stored == versionOneChecksum(of: manifest) else { throw bad("fails its checksum (damaged)") }
        }
        if let problem = problem(in: manifest) { throw bad(problem) }
        return manifest
    }

    /// The first inconsistency in a manifest's numbers, or `nil`.
    package static func problem(in m: Manifest) -> String? {
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

/// CRC-32 (IEEE 802.3, reflected, as in zlib and PNG).
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { n in
        var c = UInt32(n)
        for _ in 0..<8 { c = (c & 1) != 0 ? 0xEDB8_8320 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for b in bytes { crc = table[Int((crc ^ UInt32(b)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
