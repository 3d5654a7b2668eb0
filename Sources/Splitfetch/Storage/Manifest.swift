import FoundationEssentials
public import DownloadCore

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
    /// Identifies one partial file across its manifests and runs: made when the partial file is
    /// created, kept by every later run. The quick checkpoints' manifest (`NAME.part.quick.json`)
    /// counts only with the same instance as `NAME.part.json`. Absent in earlier builds' files.
    public var instance: String?
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
