public import SystemPackage

/// A download an earlier run left to resume, as its manifest describes it: the URL, where the
/// file goes, its size, the bytes already on disk and the validators a resume checks.
///
/// ``list(in:)`` finds them under a directory, so that a program restarted after a crash (or a
/// queue rebuilt from its store) can pick them up: running a ``Download`` of the same URL to the
/// same destination resumes each.
///
/// Thread safety: a value.
public struct PartialDownload: Sendable, Equatable, Codable {
    /// The URL the download was given, as its manifest records it: without credentials or the
    /// values of query secrets (a presigned URL's signature). A URL that carried them is to be
    /// given again in full; a resume matches the recorded form.
    public var url: String
    /// Where its redirects led when the manifest was saved.
    public var finalURL: String
    /// The final name of the file; its data is in `destination.part`.
    public var destination: FilePath
    /// The file's size.
    public var size: Int64
    /// Bytes a resume will keep: synced ones, and those written since the last sync while the
    /// machine has not restarted (as the resume itself trusts them).
    public var bytesOnDisk: Int64
    /// The validators a resume checks against the server's answer.
    public var etag: String?
    public var lastModified: String?
    /// Mirrors the download used.
    public var mirrors: [String]

    /// Every partial download in `directory` (not in its subdirectories): each `NAME.part.json`
    /// whose `NAME.part` exists, in the order of their names. Manifests that cannot be read or
    /// decoded are left out, as files that are not a download's.
    ///
    /// Runs its file-system calls on a thread of the I/O pool, not on Swift's cooperative pool.
    ///
    /// - Throws: ``DownloadError`` with code `fileIO` when the directory cannot be read.
    public static func list(in directory: FilePath) async throws(DownloadError) -> [PartialDownload] {
        let path = directory.string
        return try await IOQueue().run { () throws(DownloadError) -> [PartialDownload] in try listNow(in: path) }
    }

    /// ``list(in:)``'s work, on the caller's thread (blocking).
    static func listNow(in directory: String) throws(DownloadError) -> [PartialDownload] {
        let names: [String]
        do { names = try FileSystem.names(inDirectory: directory) } catch {
            throw .fileSystem(error, .read, path: directory)
        }
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        let suffix = PartialFile.manifestSuffix
        return names.filter { $0.hasSuffix(suffix) }.sorted().compactMap { name in
            let destination = prefix + String(name.dropLast(suffix.count))
            guard FileSystem.sizeIfRegular(destination + PartialFile.partialSuffix) != nil,
                  let bytes = try? ManifestStore(path: prefix + name).read(),
                  let durable = try? ManifestCodec.decode(bytes, path: prefix + name) else { return nil }
            let manifest = ManifestStore(path: prefix + name).newest(durable)
            return PartialDownload(url: manifest.url, finalURL: manifest.finalURL, destination: FilePath(destination),
                                   size: manifest.size, bytesOnDisk: manifest.storedBytes(currentBootID: currentBootID),
                                   etag: manifest.etag, lastModified: manifest.lastModified, mirrors: manifest.mirrors ?? [])
        }
    }
}
