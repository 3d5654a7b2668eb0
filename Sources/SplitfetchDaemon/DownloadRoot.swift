import Glibc
public import SystemPackage

/// The directory every download of the daemon goes under, and the rule that keeps them there.
///
/// A `dir` is taken relative to the root (an absolute one must already name a place inside it);
/// an `out` is a relative path. Neither may contain `..`. Directories are created one component
/// at a time, each resolved with `realpath` afterwards: a component that is a symbolic link
/// pointing outside the root is refused, whoever planted it.
public struct DownloadRoot: Sendable {
    /// The root, resolved (no symbolic link in it).
    public let path: FilePath

    /// - Throws: ``RPCError`` when the root does not exist or is not a writable directory.
    public init(_ path: FilePath) throws(RPCError) {
        guard let resolved = Self.realPath(path.string) else {
            throw RPCError.failed("the download root \(path) does not exist")
        }
        guard access(resolved, W_OK | X_OK) == 0 else { throw RPCError.failed("the download root \(resolved) is not writable") }
        self.path = FilePath(resolved)
    }

    /// The directory `dir` names (the root itself for `nil`), created if missing.
    ///
    /// - Throws: ``RPCError`` when it would leave the root.
    public func directory(_ dir: String?) throws(RPCError) -> FilePath {
        guard let dir, !dir.isEmpty else { return path }
        var relative = FilePath(dir)
        if relative.isAbsolute {
            guard let inside = Self.relative(relative.string, to: path.string) ?? Self.realPath(relative.string)
                .flatMap({ Self.relative($0, to: path.string) }) else {
                throw RPCError.forbidden("dir \(dir) is outside the download root")
            }
            relative = FilePath(inside)
        }
        var current = path
        for component in relative.components {
            let name = component.string
            guard name != "..", !name.isEmpty else { throw RPCError.forbidden("dir \(dir) contains \"..\"") }
            if name == "." { continue }
            current.append(component)
            if mkdir(current.string, 0o755) != 0 && errno != EEXIST {
                throw RPCError.failed("cannot create \(current): \(Errno(rawValue: errno))")
            }
            guard let resolved = Self.realPath(current.string), Self.relative(resolved, to: path.string) != nil else {
                throw RPCError.forbidden("dir \(dir) leads outside the download root (a symbolic link)")
            }
            var stats = stat()
            guard stat(resolved, &stats) == 0, (stats.st_mode & S_IFMT) == S_IFDIR else {
                throw RPCError.failed("\(current) is not a directory")
            }
            current = FilePath(resolved)
        }
        return current
    }

    /// The file `out` in `directory`: `out` may name subdirectories (created), never `..`.
    public func file(_ out: String, in directory: FilePath) throws(RPCError) -> FilePath {
        let relative = FilePath(out)
        guard !relative.isAbsolute else { throw RPCError.forbidden("out \(out) must be a relative path") }
        let components = Array(relative.components)
        guard let last = components.last, !components.contains(where: { $0.string == ".." }) else {
            throw RPCError.forbidden("out \(out) contains \"..\" or is empty")
        }
        var parent = directory
        if components.count > 1 {
            let inner = FilePath(root: nil, components.dropLast()).string
            let base = Self.relative(directory.string, to: path.string) ?? ""
            parent = try self.directory(base.isEmpty ? inner : base + "/" + inner)
        }
        guard Self.relative(parent.string, to: path.string) != nil else {
            throw RPCError.forbidden("out \(out) is outside the download root")
        }
        return parent.appending(last)
    }

    /// `path` relative to `root` ("" for the root itself), or `nil` when it is not inside.
    static func relative(_ path: String, to root: String) -> String? {
        if path == root { return "" }
        let prefix = root.hasSuffix("/") ? root : root + "/"
        guard path.hasPrefix(prefix) else { return nil }
        let rest = String(path.dropFirst(prefix.count))
        return rest.split(separator: "/").contains("..") ? nil : rest
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

/// The few file-system questions the daemon asks, without Foundation's `FileManager`.
enum FileManagerLite {
    static func exists(_ path: String) -> Bool {
        var stats = stat()
        return lstat(path, &stats) == 0
    }

    static func size(_ path: String) -> Int64? {
        var stats = stat()
        return stat(path, &stats) == 0 ? Int64(stats.st_size) : nil
    }
}
