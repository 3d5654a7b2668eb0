import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

extension ChecksumList {
    /// The largest checksum list read: a list of every file of a large mirror fits many times.
    public static let maximumSize = 16 << 20

    /// Reads a checksum list from a file, or downloads it from an `http`, `https`, `ftp`, `ftps`
    /// or `sftp` URL with
    /// `options` (its own digests, output and resume settings aside).
    ///
    /// The work runs off Swift's cooperative pool: the file is read on the I/O threads.
    ///
    /// - Throws: ``DownloadError``: the file cannot be read, is larger than ``maximumSize``, or
    ///   the download failed.
    public static func load(_ source: String, options: DownloadOptions = DownloadOptions()) async throws(DownloadError) -> ChecksumList {
        if RemoteScheme.isSupported(source) { return try await fetch(source, options: options) }
        let bytes = try await IOQueue().run { () throws(DownloadError) -> [UInt8] in
            let read: [UInt8]?
            do throws(Errno) {
                read = try FileSystem.readAll(source, limit: maximumSize, followingLinks: true)
            } catch .fileTooLarge {
                throw DownloadError(.usage, "checksum file \(source) is larger than \(maximumSize >> 20) MiB")
            } catch {
                throw DownloadError(.usage, "cannot read checksum file \(source): \(error.description)")
            }
            guard let read else { throw DownloadError(.usage, "checksum file \(source) does not exist") }
            return read
        }
        return ChecksumList(parsing: String(decoding: bytes, as: UTF8.self))
    }

    /// Downloads a list into a directory of its own (made with `mkdtemp`), reads it and removes it.
    private static func fetch(_ url: String, options: DownloadOptions) async throws(DownloadError) -> ChecksumList {
        var template = Array((FileSystem.temporaryDirectory + "/splitfetch-sums-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else {
            throw DownloadError(.fileIO, "cannot create a temporary directory for the checksum list: \(Errno(rawValue: errno))")
        }
        let directory = String(cString: made)
        let path = directory + "/list"
        defer {
            _ = try? FileSystem.remove(path)
            rmdir(directory)
        }
        var listOptions = options
        listOptions.connections = 1
        listOptions.integrity.expectedDigests = []
        listOptions.integrity.reportedDigests = []
        listOptions.durability.syncBeforeRename = false
        listOptions.durability.checkpointInterval = .zero
        listOptions.durability.quickCheckpointInterval = .zero
        listOptions.maximumSize = Int64(maximumSize)
        listOptions.allowOverwrite = false
        listOptions.restart = false
        listOptions.useContentDisposition = false
        let download = Download(url, to: FilePath(path), options: listOptions)
        _ = try await download.run()
        // Held to here: inlined into this function, the download's `[weak self]` hook otherwise
        // makes the release optimizer warn that the reference is always nil.
        withExtendedLifetime(download) {}
        return try await load(path)
    }
}
