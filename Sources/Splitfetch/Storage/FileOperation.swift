import SystemPackage

/// A file-system call that failed, with what it was doing: the context for turning an `Errno`
/// into a ``DownloadError``.
enum FileOperation: Sendable, Equatable {
    case create
    case open
    case read
    case write(bytes: Int, offset: Int64)
    case sync
    case syncDirectory
    case stat
    case lock
    case preallocate(Int64)
    case resize(Int64)
    case remove
    case rename(to: String)
    /// `link` of a finished partial file to its destination, which must not exist.
    case link(to: String)
    /// Naming a file that was made without a name; the name must not exist.
    case name(to: String)
    /// Setting the modification time (``DownloadOptions/remoteTime``).
    case setTimes
}

extension DownloadError {
    /// The one mapping from `errno` to a download error: the code, and a message naming the path,
    /// what was being done and the system's words for the cause.
    static func fileSystem(_ error: Errno, _ operation: FileOperation, path: String) -> DownloadError {
        switch (error, operation) {
        case (.fileExists, .create):
            return DownloadError(.outputExists, "\(path) already exists", remedy: .allowOverwrite)
        case (.fileExists, .link(let destination)):
            return DownloadError(.outputExists, "\(destination) appeared during the download; the data is kept in \(path)")
        case (.fileExists, .name(let target)):
            return DownloadError(.outputExists, "\(target) appeared during the download")
        case (.tooManySymbolicLinkLevels, .create), (.tooManySymbolicLinkLevels, .open), (.tooManySymbolicLinkLevels, .read):
            return DownloadError(.fileIO, "\(path) is a symbolic link; refusing to follow it")
        case (.wouldBlock, .lock):
            return DownloadError(.resumeConflict, "another splitfetch process is downloading to \(path)")
        case (.fileTooLarge, .read):
            return DownloadError(.badManifest, "\(path) is too large to be a manifest")
        case (.noSpace, .preallocate(let size)), (.fileTooLarge, .preallocate(let size)):
            return DownloadError(.fileIO, "\(path): no space to preallocate \(size) bytes (\(error.description))")
        default:
            return DownloadError(.fileIO, "cannot \(operation.verb(path: path)): \(error.description)")
        }
    }
}

extension FileOperation {
    /// "write 10 bytes at offset 5 of /x" and so on, for messages.
    func verb(path: String) -> String {
        switch self {
        case .create: "create \(path)"
        case .open: "open \(path)"
        case .read: "read \(path)"
        case .write(let bytes, let offset): "write \(bytes) bytes at offset \(offset) of \(path)"
        case .sync: "sync \(path) to disk"
        case .syncDirectory: "sync the directory \(path) to disk"
        case .stat: "examine \(path)"
        case .lock: "lock \(path)"
        case .preallocate(let size): "preallocate \(size) bytes for \(path)"
        case .resize(let size): "set the size of \(path) to \(size) bytes"
        case .remove: "remove \(path)"
        case .rename(let target): "rename \(path) to \(target)"
        case .link(let target): "link \(path) to \(target)"
        case .name(let target): "give the new file the name \(target)"
        case .setTimes: "set the modification time of \(path)"
        }
    }
}
