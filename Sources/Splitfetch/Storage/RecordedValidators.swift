import CShims
import DownloadCore
import FoundationEssentials
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Where a complete file's validators are kept for a later conditional refresh
/// (``DownloadOptions/refresh``): with the file, in the extended attribute
/// `user.splitfetch.validators` (JSON: `etag`, `lastModified`, `size`, `modifiedNanoseconds`), set
/// on the partial file before it is renamed, so the name and the record appear together.
///
/// Where the file system keeps no user attributes (`ENOTSUP`), a refresh keeps them in a hidden
/// file beside it, `.NAME.validators`, written after the rename; a download without refresh then
/// keeps none. A record whose size or time is not the file's is not trusted
/// (``ConditionalRefresh/plan(recorded:local:)``).
///
/// Every call blocks: run them on the download's ``IOQueue``.
enum RecordedValidators {
    static let attributeName = "user.splitfetch.validators"
    /// Longer records are not ours.
    static let largest = 4096

    /// The hidden file beside `destination` used where attributes are not kept.
    static func sidecarPath(of destination: String) -> String {
        let directory = FileSystem.parentDirectory(of: destination)
        let name = FilePath(destination).lastComponent?.string ?? destination
        return (directory == "/" ? "/" : directory + "/") + "." + name + ".validators"
    }

    /// The file found at the destination (`info`, from a `stat` that does not follow a symbolic
    /// link), if it is a regular file.
    static func local(_ info: Stat?) -> ConditionalRefresh.Local? {
        guard let info, info.type == .regular else { return nil }
        return ConditionalRefresh.Local(size: info.size, modifiedNanoseconds: nanoseconds(info.st_mtim))
    }

    /// The record kept with `destination`: its attribute, or else its hidden file.
    static func read(_ destination: String) -> ConditionalRefresh.Recorded? {
        var buffer = [UInt8](repeating: 0, count: largest)
        let length = buffer.withUnsafeMutableBytes { sf_get_attribute(destination, attributeName, $0.baseAddress, UInt(largest)) }
        if length > 0 { return decode(Array(buffer[..<length])) }
        guard let data = try? readSmallFile(sidecarPath(of: destination)) else { return nil }
        return decode(data)
    }

    /// Records `validators` on the open partial `file`, for the size and time it has now.
    ///
    /// - Returns: the record (`nil`: nothing to record), and whether the file system kept it (or
    ///   it belongs in ``writeSidecar(_:for:)``).
    static func record(etag: String?, lastModified: String?, on file: OutputFile) -> (recorded: ConditionalRefresh.Recorded, kept: Bool)? {
        guard etag != nil || lastModified != nil, let info = try? file.descriptor.stat() else { return nil }
        let recorded = ConditionalRefresh.Recorded(etag: etag, lastModified: lastModified, size: info.size,
                                                   modifiedNanoseconds: nanoseconds(info.st_mtim))
        guard let bytes = encode(recorded) else { return nil }
        let rc = bytes.withUnsafeBytes { sf_set_attribute(file.descriptor.rawValue, attributeName, $0.baseAddress, UInt($0.count)) }
        return (recorded, rc == 0)
    }

    /// Writes the hidden file beside `destination` (a new file, renamed over the old one).
    static func writeSidecar(_ recorded: ConditionalRefresh.Recorded, for destination: String) throws(Errno) {
        guard let bytes = encode(recorded) else { return }
        let path = sidecarPath(of: destination)
        let temporary = path + ".tmp"
        let fd = try FileSystem.system { try FileDescriptor.open(temporary, .writeOnly, options: [.create, .truncate, .closeOnExec],
                                                                 permissions: [.ownerReadWrite, .groupRead, .otherRead]) }
        do {
            _ = try FileSystem.system { try fd.writeAll(bytes) }
            try FileSystem.system { try fd.close() }
        } catch {
            try? fd.close()
            _ = try? FileSystem.remove(temporary)
            throw error
        }
        try FileSystem.rename(temporary, to: path)
    }

    /// Removes the hidden file beside `destination`, if any (the record went with the file).
    static func removeSidecar(for destination: String) {
        _ = try? FileSystem.remove(sidecarPath(of: destination))
    }

    static func encode(_ recorded: ConditionalRefresh.Recorded) -> [UInt8]? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(recorded)).map { Array($0) }
    }

    static func decode(_ bytes: [UInt8]) -> ConditionalRefresh.Recorded? {
        try? JSONDecoder().decode(ConditionalRefresh.Recorded.self, from: Data(bytes))
    }

    private static func nanoseconds(_ time: timespec) -> Int64 {
        Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }

    private static func readSmallFile(_ path: String) throws -> [UInt8] {
        let fd = try FileDescriptor.open(path, .readOnly, options: [.closeOnExec, .noFollow])
        defer { try? fd.close() }
        var buffer = [UInt8](repeating: 0, count: largest)
        let count = try buffer.withUnsafeMutableBytes { try fd.read(into: $0) }
        return Array(buffer[..<count])
    }
}
