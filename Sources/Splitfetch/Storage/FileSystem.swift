import CShims
package import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The project's one door to the file system.
///
/// Calls go through swift-system where it has them (`FileDescriptor`, `Stat`); the few it lacks
/// (`unlink`, `rename`, `link`, `fsync`, `flock`, `fstatvfs`, `posix_fallocate`) are wrapped here
/// in the same style: they throw `Errno` and retry `EINTR`. Nothing here knows about downloads;
/// ``DownloadError/fileSystem(_:_:path:)`` turns an `Errno` into a message, in one place.
///
/// Every call blocks: run them on an ``IOQueue``, never on Swift's cooperative pool.
package enum FileSystem {
    /// Runs `call` (a C function returning -1 and setting `errno` on failure) until it is not
    /// interrupted by a signal.
    @discardableResult
    static func retryingInterrupts(_ call: () -> CInt) throws(Errno) -> CInt {
        while true {
            let rc = call()
            if rc != -1 { return rc }
            let error = Errno(rawValue: errno)
            if error != .interrupted { throw error }
        }
    }

    /// Runs a swift-system call, whose errors are untyped but always `Errno`.
    static func system<T>(_ body: () throws -> T) throws(Errno) -> T {
        do { return try body() } catch let error as Errno { throw error } catch { throw .ioError }
    }

    /// What `lstat` says about `path`, or `nil` when nothing is there.
    static func status(_ path: String) throws(Errno) -> Stat? {
        do {
            return try FilePath(path).stat(followTargetSymlink: false)
        } catch .noSuchFileOrDirectory {
            return nil
        }
    }

    /// Whether anything (a symbolic link included) is at `path`.
    static func exists(_ path: String) -> Bool {
        (try? status(path)) != nil
    }

    /// The size of the regular file at `path` (not following a symbolic link), or `nil`.
    static func sizeIfRegular(_ path: String) -> Int64? {
        guard let info = try? status(path), info.type == .regular else { return nil }
        return info.size
    }

    /// Whether `path` is a directory (following symbolic links, as `open` would).
    static func isDirectory(_ path: String) -> Bool {
        (try? FilePath(path).stat(followTargetSymlink: true))?.type == .directory
    }

    /// Removes `path`; returns `false` when it was not there.
    @discardableResult
    static func remove(_ path: String) throws(Errno) -> Bool {
        do {
            try retryingInterrupts { unlink(path) }
            return true
        } catch .noSuchFileOrDirectory {
            return false
        }
    }

    static func rename(_ source: String, to target: String) throws(Errno) {
        try retryingInterrupts { Glibc.rename(source, target) }
    }

    /// Renames `source` to `target` unless `target` exists (`EEXIST`); one atomic step.
    /// Throws `EINVAL` or `ENOSYS` where the file system or kernel cannot (then use ``link``).
    static func renameWithoutReplacing(_ source: String, to target: String) throws(Errno) {
        try retryingInterrupts { sf_rename_noreplace(source, target) }
    }

    /// A new regular file without a name in `directory` (`O_TMPFILE`), mode 0644 less the umask:
    /// if the process dies, it is gone with it. `nil` where the file system or kernel cannot
    /// make one (or `/proc`, which ``name(_:as:)`` needs, is not mounted).
    static func createUnnamed(inDirectory directory: String) throws(Errno) -> FileDescriptor? {
        guard procIsMounted else { return nil }
        do {
            return FileDescriptor(rawValue: try retryingInterrupts { sf_open_unnamed(directory, 0o644) })
        } catch .notSupported, .isDirectory, .invalidArgument {
            return nil
        }
    }

    /// Gives a file made by ``createUnnamed(inDirectory:)`` the name `path`; `EEXIST` rather than
    /// replacing a file that has it.
    static func name(_ fd: FileDescriptor, as path: String) throws(Errno) {
        try retryingInterrupts { sf_name_unnamed(fd.rawValue, path) }
    }

    private static let procIsMounted = isDirectory("/proc/self/fd")

    /// A new file in `directory` that no name leads to and that is gone when closed: an unnamed
    /// one (`O_TMPFILE`) where the file system can, otherwise one made by `mkstemp` and unlinked
    /// at once.
    static func createAnonymous(inDirectory directory: String) throws(Errno) -> FileDescriptor {
        if let fd = try createUnnamed(inDirectory: directory) { return fd }
        var template = Array((directory + "/.splitfetch-XXXXXX").utf8CString)
        let raw = try retryingInterrupts { template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) } }
        _ = template.withUnsafeBufferPointer { unlink($0.baseAddress!) }
        _ = fcntl(raw, F_SETFD, FD_CLOEXEC)
        return FileDescriptor(rawValue: raw)
    }

    /// A second name for `source`; fails with `EEXIST` rather than replacing `target`.
    static func link(_ source: String, to target: String) throws(Errno) {
        try retryingInterrupts { Glibc.link(source, target) }
    }

    /// The names in the directory at `path` (not `.` and `..`), in the order the directory gives.
    static func names(inDirectory path: String) throws(Errno) -> [String] {
        guard let directory = opendir(path) else { throw Errno(rawValue: errno) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// The whole of the file at `path`, not following a symbolic link unless `followingLinks`;
    /// `nil` when there is none. Throws `EFBIG` when it is larger than `limit` bytes.
    package static func readAll(_ path: String, limit: Int, followingLinks: Bool = false) throws(Errno) -> [UInt8]? {
        let fd: FileDescriptor
        do {
            let options: FileDescriptor.OpenOptions = followingLinks ? [.closeOnExec] : [.noFollow, .closeOnExec]
            fd = try system { try FileDescriptor.open(FilePath(path), .readOnly, options: options) }
        } catch .noSuchFileOrDirectory {
            return nil
        }
        defer { try? fd.close() }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = try system { try chunk.withUnsafeMutableBytes { try fd.read(into: $0) } }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[..<count])
            if bytes.count > limit { throw .fileTooLarge }
        }
    }

    /// Creates `path` with `bytes` in it, failing if it exists; `O_NOFOLLOW`, mode 0600.
    /// With `durable`, the data reaches the disk before this returns. On failure the file is gone.
    static func createFile(_ path: String, containing bytes: [UInt8], durable: Bool) throws(Errno) {
        let fd = try system {
            try FileDescriptor.open(FilePath(path), .writeOnly, options: [.create, .exclusiveCreate, .noFollow, .closeOnExec],
                                    permissions: [.ownerReadWrite])
        }
        do throws(Errno) {
            _ = try system { try fd.writeAll(bytes) }
            if durable { try sync(fd, dataOnly: false) }
            try system { try fd.close() }
        } catch {
            try? fd.close()
            _ = try? remove(path)
            throw error
        }
    }

    /// `fsync` (or `fdatasync` with `dataOnly`) of an open file.
    static func sync(_ fd: FileDescriptor, dataOnly: Bool) throws(Errno) {
        try retryingInterrupts { dataOnly ? fdatasync(fd.rawValue) : fsync(fd.rawValue) }
    }

    /// `fsync` of a directory, which makes the renames and links in it durable. File systems that
    /// cannot sync a directory (`EINVAL`) are taken at their word.
    static func syncDirectory(_ path: String) throws(Errno) {
        let fd = try system { try FileDescriptor.open(FilePath(path), .readOnly, options: [.directory, .closeOnExec]) }
        defer { try? fd.close() }
        do {
            try sync(fd, dataOnly: false)
        } catch .invalidArgument {
            return
        }
    }

    /// An advisory exclusive lock (`flock`) that does not wait; `false` when another open file
    /// description holds it.
    static func lockWithoutWaiting(_ fd: FileDescriptor) throws(Errno) -> Bool {
        do {
            try retryingInterrupts { flock(fd.rawValue, LOCK_EX | LOCK_NB) }
            return true
        } catch .wouldBlock {
            return false
        }
    }

    /// Bytes an unprivileged user may still write on the file system of `fd`, or `nil` if it
    /// cannot say.
    static func availableBytes(_ fd: FileDescriptor) -> Int64? {
        var info = statvfs()
        guard (try? retryingInterrupts({ fstatvfs(fd.rawValue, &info) })) != nil else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// The process's file size limit (`ulimit -f`) in bytes, or `nil` when there is none.
    static func fileSizeLimit() -> Int64? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        return Int64(clamping: limit.rlim_cur)
    }

    /// Reserves `size` bytes (`posix_fallocate`); where the file system cannot, sets the length.
    static func allocate(_ fd: FileDescriptor, size: Int64) throws(Errno) {
        while true {
            let rc = posix_fallocate(fd.rawValue, 0, off_t(size))  // returns the error, not -1
            if rc == 0 { return }
            let error = Errno(rawValue: rc)
            if error == .interrupted { continue }
            guard error == .notSupported || error == .invalidArgument else { throw error }
            return try system { try fd.resize(to: size) }
        }
    }

    /// Asks the kernel to start writing `fd`'s dirty pages in `[offset, offset + length)` (all of
    /// them for length 0) without waiting (`sync_file_range`).
    /// Errors are ignored: this only moves work earlier.
    static func startWriteback(_ fd: FileDescriptor, offset: Int64 = 0, length: Int64 = 0) {
        _ = sf_start_writeback(fd.rawValue, offset, length)
    }

    /// `$TMPDIR`, or `/tmp`.
    static var temporaryDirectory: String {
        if let value = getenv("TMPDIR"), value.pointee != 0 { return String(cString: value) }
        return "/tmp"
    }

    /// The directory part of a path (`.` for a bare name).
    static func parentDirectory(of path: String) -> String {
        let parent = FilePath(path).removingLastComponent()
        return parent.isEmpty ? "." : parent.string
    }
}
