#if canImport(Glibc)
import Glibc
#endif

/// The directory part of a path (`.` for a bare name).
func parentDirectory(of path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    if slash == path.startIndex { return "/" }
    return String(path[..<slash])
}

func fileExists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}

/// The size of a regular file (not following symlinks), or `nil`.
func fileSizeIfRegular(_ path: String) -> Int64? {
    var info = stat()
    guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
    return Int64(info.st_size)
}
