import FoundationEssentials
import DownloadCore

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
    ///
    /// - Parameter length: pad the JSON with spaces (inside the checksummed body, where JSON
    ///   allows them) so that the whole is at least this long: a file overwritten in place
    ///   keeps its checksum line at its end.
    package static func encode(_ manifest: Manifest, paddedTo length: Int = 0) -> [UInt8] {
        var current = manifest
        current.version = Manifest.currentVersion
        current.checksum = nil
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        // Encoding plain strings, numbers and arrays cannot fail.
        return finish(Array(try! encoder.encode(current)), paddedTo: length)
    }

    /// Encodes manifests that differ only in their segments, for the quick slot: everything
    /// else is encoded once by `JSONEncoder` (compact, keys sorted) and the segments are written
    /// into it by hand (whole numbers only), so a save costs a few microseconds. The result is
    /// the same version 2 format (`decode(_:path:)` reads it), compact instead of pretty.
    package struct SegmentSplicer {
        /// The manifest it was made for, without segments.
        let template: Manifest
        private let prefix: [UInt8]
        private let suffix: [UInt8]

        /// `nil` if the encoding has no place for the segments (it always has one).
        package init?(_ manifest: Manifest) {
            var bare = manifest
            bare.version = Manifest.currentVersion
            bare.checksum = nil
            bare.segments = []
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let bytes = Array(try! encoder.encode(bare))
            // The key cannot occur inside a string: a quote there is escaped.
            let key = Array(#""segments":[]"#.utf8)
            guard let at = bytes.indices.dropLast(key.count - 1).first(where: { bytes[$0..<($0 + key.count)].elementsEqual(key) })
            else { return nil }
            template = bare
            prefix = Array(bytes[..<(at + key.count - 1)])
            suffix = Array(bytes[(at + key.count - 1)...])
        }

        /// Whether `manifest` differs from the template in its segments alone.
        package func fits(_ manifest: Manifest) -> Bool {
            var bare = manifest
            bare.version = Manifest.currentVersion
            bare.checksum = nil
            bare.segments = []
            return bare == template
        }

        /// `manifest` (which ``fits(_:)``) as saved, padded as ``encode(_:paddedTo:)`` pads.
        package func encode(_ manifest: Manifest, paddedTo length: Int = 0) -> [UInt8] {
            var bytes = prefix
            bytes.reserveCapacity(prefix.count + suffix.count + manifest.segments.count * 80 + 64)
            for (index, segment) in manifest.segments.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                if let cached = segment.cached { Self.field("{\"cached\":", cached, into: &bytes) }
                Self.field(segment.cached == nil ? "{\"end\":" : ",\"end\":", segment.end, into: &bytes)
                Self.field(",\"start\":", segment.start, into: &bytes)
                Self.field(",\"written\":", segment.written, into: &bytes)
                bytes.append(UInt8(ascii: "}"))
            }
            bytes += suffix
            return ManifestCodec.finish(bytes, paddedTo: length)
        }

        private static func field(_ key: StaticString, _ value: Int64, into bytes: inout [UInt8]) {
            key.withUTF8Buffer { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: String(value).utf8)
        }
    }

    /// Pads the JSON `body`, then appends the newline and the checksum line.
    static func finish(_ body: [UInt8], paddedTo length: Int) -> [UInt8] {
        var bytes = body
        let natural = bytes.count + 1 + trailerPrefix.count + 8 + 3
        if length > natural { bytes += repeatElement(UInt8(ascii: " "), count: length - natural) }
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
