import Synchronization
import CShims
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The partial file a download writes into, at absolute offsets.
///
/// Opened without following symlinks and created with mode 0644. `pwrite` is safe from any thread
/// at distinct offsets, so the transport thread writes while other tasks sync.
///
/// Thread safety: immutable after creation; the descriptor is closed by `close()` once.
final class OutputFile: Sendable {
    let path: String
    let descriptor: FileDescriptor
    /// For tests: writes reaching past this offset fail as if the disk were full.
    let injectedFullDiskOffset: Int64?
    private let closed = Atomic<Bool>(false)

    private init(path: String, descriptor: FileDescriptor, injectedFullDiskOffset: Int64?) {
        self.path = path
        self.descriptor = descriptor
        self.injectedFullDiskOffset = injectedFullDiskOffset
    }

    /// Creates a new file (or, with `replace`, truncates an existing regular file).
    ///
    /// - Throws: ``DownloadError`` (`fileIO`, or `outputExists` when the file exists and
    ///   `replace` is false) naming the path and errno text.
    static func create(path: String, replace: Bool, injectedFullDiskOffset: Int64? = nil) throws(DownloadError) -> OutputFile {
        var options: FileDescriptor.OpenOptions = [.create, .noFollow, .closeOnExec]
        if replace { options.insert(.truncate) } else { options.insert(.exclusiveCreate) }
        return try open(path: path, options: options, verb: "create", injectedFullDiskOffset: injectedFullDiskOffset)
    }

    /// Opens an existing partial file for resuming; never follows a symlink.
    static func openExisting(path: String, injectedFullDiskOffset: Int64? = nil) throws(DownloadError) -> OutputFile {
        try open(path: path, options: [.noFollow, .closeOnExec], verb: "open", injectedFullDiskOffset: injectedFullDiskOffset)
    }

    /// Opens read-write with `options` (which include `.noFollow`) and refuses anything but a
    /// regular file; errors name the path and say what failed.
    private static func open(path: String, options: FileDescriptor.OpenOptions, verb: String,
                             injectedFullDiskOffset: Int64?) throws(DownloadError) -> OutputFile {
        let fd: FileDescriptor
        do {
            fd = try FileDescriptor.open(FilePath(path), .readWrite, options: options,
                                         permissions: [.ownerReadWrite, .groupRead, .otherRead])
        } catch let error as Errno {
            if error == .fileExists {
                throw DownloadError(.outputExists, "\(path) already exists", remedy: .allowOverwrite)
            }
            if error == .tooManySymbolicLinkLevels {
                throw DownloadError(.fileIO, "\(path) is a symbolic link; refusing to follow it")
            }
            throw DownloadError(.fileIO, "cannot \(verb) \(path): \(error.description)")
        } catch {
            throw DownloadError(.fileIO, "cannot \(verb) \(path): \(error)")
        }
        var info = stat()
        if fstat(fd.rawValue, &info) == 0 && (info.st_mode & S_IFMT) != S_IFREG {
            try? fd.close()
            throw DownloadError(.fileIO, "\(path): not a regular file")
        }
        return OutputFile(path: path, descriptor: fd, injectedFullDiskOffset: injectedFullDiskOffset)
    }

    /// Takes an advisory lock so a second process cannot write the same partial file.
    func lockExclusively() throws(DownloadError) {
        if flock(descriptor.rawValue, LOCK_EX | LOCK_NB) != 0 {
            if errno == EWOULDBLOCK {
                throw DownloadError(.resumeConflict, "another splitfetch process is downloading to \(path)")
            }
            throw DownloadError(.fileIO, "cannot lock \(path): \(String(cString: strerror(errno)))")
        }
    }

    /// The file's current length.
    func currentSize() throws(DownloadError) -> Int64 {
        var info = stat()
        if fstat(descriptor.rawValue, &info) != 0 {
            throw DownloadError(.fileIO, "cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        return Int64(info.st_size)
    }

    /// Refuses a size larger than the free space of the file's file system, or than the process's
    /// file size limit (`ulimit -f`), before allocating.
    func checkFreeSpace(for size: Int64, alreadyAllocated: Int64 = 0) throws(DownloadError) {
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_FSIZE.rawValue), &limit) == 0 && limit.rlim_cur != rlim_t.max && UInt64(size) > UInt64(limit.rlim_cur) {
            throw DownloadError(.fileIO, "\(path): the file size limit (ulimit -f) is \(limit.rlim_cur) bytes; \(size) bytes needed")
        }
        var fs = statvfs()
        guard fstatvfs(descriptor.rawValue, &fs) == 0 else { return }
        let free = Int64(fs.f_bavail) * Int64(fs.f_frsize)
        let needed = size - alreadyAllocated
        if needed > free {
            throw DownloadError(.fileIO, "\(path): not enough free space: \(size) bytes needed, \(free) available")
        }
    }

    /// Reserves `size` bytes on disk (`posix_fallocate`), or sets the length (`ftruncate`) where
    /// the file system cannot preallocate.
    func preallocate(_ size: Int64) throws(DownloadError) {
        guard size > 0 else { return }
        let rc = posix_fallocate(descriptor.rawValue, 0, off_t(size))
        if rc == 0 { return }
        if rc == EOPNOTSUPP || rc == EINVAL {
            do { try descriptor.resize(to: size) } catch {
                throw DownloadError(.fileIO, "cannot set the size of \(path) to \(size) bytes: \(error)")
            }
            return
        }
        let text = String(cString: strerror(rc))
        if rc == ENOSPC {
            throw DownloadError(.fileIO, "\(path): no space left to preallocate \(size) bytes (\(text))")
        }
        throw DownloadError(.fileIO, "cannot preallocate \(size) bytes for \(path): \(text)")
    }


    /// Writes all of `bytes` at `offset`, retrying partial writes and `EINTR`.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(DownloadError) {
        if let limit = injectedFullDiskOffset, offset + Int64(bytes.count) > limit {
            throw DownloadError(.fileIO, "cannot write \(bytes.count) bytes at offset \(offset) of \(path): No space left on device (injected by a test)")
        }
        do {
            try descriptor.writeAll(toAbsoluteOffset: offset, bytes)
        } catch {
            throw DownloadError(.fileIO, "cannot write \(bytes.count) bytes at offset \(offset) of \(path): \(error)")
        }
    }

    /// Sets the file length (for downloads of unknown size).
    func truncate(to size: Int64) throws(DownloadError) {
        do { try descriptor.resize(to: size) } catch {
            throw DownloadError(.fileIO, "cannot set the size of \(path): \(error)")
        }
    }

    /// Asks the kernel to start writing dirty pages to disk without waiting, so the `fdatasync` of
    /// a later checkpoint or of the finish has little left to do. Errors are ignored: this only
    /// moves work earlier.
    func startWriteback() {
        _ = sf_start_writeback(descriptor.rawValue, 0, 0)
    }

    /// Makes written data durable (`fdatasync`).
    func sync() throws(DownloadError) {
        if fdatasync(descriptor.rawValue) != 0 {
            throw DownloadError(.fileIO, "fdatasync of \(path) failed: \(String(cString: strerror(errno)))")
        }
    }

    /// Closes the descriptor once; later calls do nothing (a second `close` could close a
    /// descriptor number the process has reused meanwhile).
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        try? descriptor.close()
    }
}
