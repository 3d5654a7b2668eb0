#if canImport(Glibc)
import Glibc
#endif

extension SplitfetchCommand {
    /// Creates `path` and any missing parents (mode 0755 less the umask), as `mkdir -p` does, and as
    /// aria2 and wget do for their output directory. An existing directory is fine; an existing
    /// file of another type is an error.
    ///
    /// - Returns: `nil`, or what failed (the path and the errno text).
    static func createDirectories(_ path: String) -> String? {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            prefix += component
            if mkdir(prefix, 0o755) != 0 && errno != EEXIST {
                return "cannot create directory \(prefix): \(String(cString: strerror(errno)))"
            }
            prefix += "/"
        }
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            return "\(path) exists and is not a directory"
        }
        return nil
    }
}
