import DownloadCore
import Synchronization
import SystemPackage

/// The partial file a download writes into, at absolute offsets.
///
/// Opened without following symlinks and created with mode 0644. `pwrite` is safe from any thread
/// at distinct offsets, so the transport thread writes while other tasks sync.
///
/// A file may also start without a name (``createUnnamed(path:injectedFullDiskOffset:)``): then
/// ``path`` is the name it will get, and it is gone if the process dies before ``name()``.
///
/// Thread safety: immutable after creation but for two atomics; the descriptor is closed by
/// `close()` once, and named by `name()` on the download's I/O queue.
final class OutputFile: Sendable {
    let path: String
    let descriptor: FileDescriptor
    /// For tests: writes reaching past this offset fail as if the disk were full.
    let injectedFullDiskOffset: Int64?
    /// A ring (``createRing(capacity:inDirectory:)``): the file's byte at offset `o` is kept at
    /// `o % ringCapacity`. `nil`: a plain file.
    let ringCapacity: Int64?
    private let closed = Atomic<Bool>(false)
    private let named: Atomic<Bool>
    private let writebacks = Atomic<Int>(0)

    private init(path: String, descriptor: FileDescriptor, injectedFullDiskOffset: Int64?, named: Bool = true,
                 ringCapacity: Int64? = nil) {
        self.path = path
        self.descriptor = descriptor
        self.injectedFullDiskOffset = injectedFullDiskOffset
        self.named = Atomic(named)
        self.ringCapacity = ringCapacity
    }

    /// A ring of `capacity` bytes in an anonymous file in `directory` (gone when closed), for a
    /// download read in order: it holds the bytes between the reader and the end of its window,
    /// each at its offset modulo the capacity. The caller keeps every byte written within
    /// `capacity` of the lowest byte not yet read back.
    static func createRing(capacity: Int64, inDirectory directory: String) throws(DownloadError) -> OutputFile {
        precondition(capacity > 0)
        let path = directory + "/(window buffer)"
        let fd: FileDescriptor
        do { fd = try FileSystem.createAnonymous(inDirectory: directory) } catch { throw .fileSystem(error, .create, path: path) }
        let ring = OutputFile(path: path, descriptor: fd, injectedFullDiskOffset: nil, named: false, ringCapacity: capacity)
        do throws(DownloadError) {
            try ring.checkFreeSpace(for: capacity)
            try ring.preallocate(capacity)
        } catch {
            ring.close()
            throw error
        }
        return ring
    }

    /// Calls `body` with the file's own offset and the part of `count` bytes at the download's
    /// offset `offset` stored contiguously there: once for a plain file, twice where a ring wraps.
    private func forEachStoredPart(at offset: Int64, count: Int,
                                   _ body: (_ fileOffset: Int64, _ range: Range<Int>) throws(DownloadError) -> Void) throws(DownloadError) {
        guard let capacity = ringCapacity else { return try body(offset, 0..<count) }
        var done = 0
        while done < count {
            let at = (offset + Int64(done)) % capacity
            let part = Int(min(Int64(count - done), capacity - at))
            try body(at, done..<(done + part))
            done += part
        }
    }

    /// A second descriptor of the same file, for a reader (the hasher) that must be able to go on
    /// reading after this one is closed: a descriptor number is never read after it could have
    /// been reused. The reader closes it.
    func duplicate() throws(DownloadError) -> OutputFile {
        let copy = try perform(.open) { () throws(Errno) in try FileSystem.system { try descriptor.duplicate() } }
        return OutputFile(path: path, descriptor: copy, injectedFullDiskOffset: nil, named: isNamed, ringCapacity: ringCapacity)
    }

    /// Whether the file has a name on disk (``path``) yet.
    var isNamed: Bool { named.load(ordering: .acquiring) }

    /// A new file without a name, in the directory of `path`, to be named `path` or another name
    /// later; `nil` where the file system cannot make one.
    static func createUnnamed(path: String, injectedFullDiskOffset: Int64? = nil) throws(DownloadError) -> OutputFile? {
        let directory = FileSystem.parentDirectory(of: path)
        let fd: FileDescriptor?
        do { fd = try FileSystem.createUnnamed(inDirectory: directory) } catch {
            throw .fileSystem(error, .create, path: path)
        }
        return fd.map { OutputFile(path: path, descriptor: $0, injectedFullDiskOffset: injectedFullDiskOffset, named: false) }
    }

    /// Gives an unnamed file the name `target` (by default ``path``), never replacing a file that
    /// has it. Blocking.
    ///
    /// - Throws: ``DownloadError`` (`outputExists` when `target` exists).
    func name(as target: String? = nil) throws(DownloadError) {
        let target = target ?? path
        do { try FileSystem.name(descriptor, as: target) } catch {
            throw .fileSystem(error, .name(to: target), path: target)
        }
        named.store(true, ordering: .releasing)
    }

    /// Creates a new file (or, with `replace`, truncates an existing regular file).
    ///
    /// - Throws: ``DownloadError`` (`fileIO`, or `outputExists` when the file exists and
    ///   `replace` is false) naming the path and errno text.
    static func create(path: String, replace: Bool, injectedFullDiskOffset: Int64? = nil) throws(DownloadError) -> OutputFile {
        var options: FileDescriptor.OpenOptions = [.create, .noFollow, .closeOnExec]
        if replace { options.insert(.truncate) } else { options.insert(.exclusiveCreate) }
        return try open(path: path, options: options, operation: .create, injectedFullDiskOffset: injectedFullDiskOffset)
    }

    /// Opens an existing partial file for resuming; never follows a symlink.
    static func openExisting(path: String, injectedFullDiskOffset: Int64? = nil) throws(DownloadError) -> OutputFile {
        try open(path: path, options: [.noFollow, .closeOnExec], operation: .open, injectedFullDiskOffset: injectedFullDiskOffset)
    }

    /// Opens read-write with `options` (which include `.noFollow`) and refuses anything but a
    /// regular file; errors name the path and say what failed.
    private static func open(path: String, options: FileDescriptor.OpenOptions, operation: FileOperation,
                             injectedFullDiskOffset: Int64?) throws(DownloadError) -> OutputFile {
        let fd: FileDescriptor
        do {
            fd = try FileSystem.system {
                try FileDescriptor.open(FilePath(path), .readWrite, options: options,
                                        permissions: [.ownerReadWrite, .groupRead, .otherRead])
            }
        } catch {
            throw .fileSystem(error, operation, path: path)
        }
        if let info = try? fd.stat(), info.type != .regular {
            try? fd.close()
            throw DownloadError(.fileIO, "\(path): not a regular file")
        }
        return OutputFile(path: path, descriptor: fd, injectedFullDiskOffset: injectedFullDiskOffset)
    }

    /// Runs a file-system call on this file, naming the file and `operation` if it fails.
    private func perform<T>(_ operation: FileOperation, _ body: () throws(Errno) -> T) throws(DownloadError) -> T {
        do { return try body() } catch { throw .fileSystem(error, operation, path: path) }
    }

    /// Takes an advisory lock so a second process cannot write the same partial file.
    func lockExclusively() throws(DownloadError) {
        guard try perform(.lock, { () throws(Errno) in try FileSystem.lockWithoutWaiting(descriptor) }) else {
            throw .fileSystem(.wouldBlock, .lock, path: path)
        }
    }

    /// The file's current length.
    func currentSize() throws(DownloadError) -> Int64 {
        try perform(.stat) { () throws(Errno) in try descriptor.stat().size }
    }

    /// Refuses a size larger than the free space of the file's file system, or than the process's
    /// file size limit (`ulimit -f`), before allocating.
    func checkFreeSpace(for size: Int64, alreadyAllocated: Int64 = 0) throws(DownloadError) {
        if let limit = FileSystem.fileSizeLimit(), size > limit {
            throw DownloadError(.fileIO, "\(path): the file size limit (ulimit -f) is \(limit) bytes; \(size) bytes needed")
        }
        if let free = FileSystem.availableBytes(descriptor), size - alreadyAllocated > free {
            throw DownloadError(.fileIO, "\(path): not enough free space: \(size) bytes needed, \(free) available")
        }
    }

    /// Reserves `size` bytes on disk (`posix_fallocate`), or sets the length (`ftruncate`) where
    /// the file system cannot preallocate.
    func preallocate(_ size: Int64) throws(DownloadError) {
        guard size > 0 else { return }
        try perform(.preallocate(size)) { () throws(Errno) in try FileSystem.allocate(descriptor, size: size) }
    }

    /// The most bytes one `pwrite` hands the kernel: 32 KiB, the largest page-cache folio
    /// (order 3) the kernel takes from its per-CPU lists of recently freed pages.
    ///
    /// A larger write makes the page cache allocate a larger folio, from the buddy allocator's
    /// high-order free blocks. A virtual machine that hands free memory back to its host
    /// (virtio-balloon free page reporting, of blocks of 2 MiB and up, as on this project's
    /// machines) hands back exactly those blocks, and writing into them faults every page in
    /// again from the host. `dd` of 200 MiB into the page cache (2026-11-24): 1 MiB writes took
    /// 0.19–0.21 s after 20 s idle against 0.06 s right after another such write; 16 KiB writes
    /// took 0.09–0.12 s either way. Held first bytes of a response were written in their 256 KiB
    /// chunks; in the many-files bench (200 × 1 MiB, 8 at a time, 10 runs, one bench run each)
    /// cutting them into 32 KiB pieces gave 0.35 s against 0.50 (CPU 2.36 against 3.69 s/GiB), and
    /// in the final build 0.32 s (0.26–0.38) against 0.37 (0.28–0.77). libcurl hands over at most
    /// 16 KiB at a time, so only held bytes are cut.
    static let largestWrite = 32 << 10

    /// `range` cut into consecutive pieces of at most `largest` bytes, in order.
    static func pieces(of range: Range<Int>, largest: Int = largestWrite) -> some Sequence<Range<Int>> {
        precondition(largest > 0)
        return stride(from: range.lowerBound, to: range.upperBound, by: largest).lazy.map {
            $0..<min($0 + largest, range.upperBound)
        }
    }

    /// Writes all of `bytes` at `offset`, retrying partial writes and `EINTR`, at most
    /// ``largestWrite`` bytes per call.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws(DownloadError) {
        try perform(.write(bytes: bytes.count, offset: offset)) { () throws(Errno) in
            if let limit = injectedFullDiskOffset, offset + Int64(bytes.count) > limit { throw .noSpace }
        }
        try forEachStoredPart(at: offset, count: bytes.count) { (at, range) throws(DownloadError) in
            try perform(.write(bytes: bytes.count, offset: offset)) { () throws(Errno) in
                for piece in Self.pieces(of: range) {
                    let pieceOffset = at + Int64(piece.lowerBound - range.lowerBound)
                    _ = try FileSystem.system {
                        try descriptor.writeAll(toAbsoluteOffset: pieceOffset, UnsafeRawBufferPointer(rebasing: bytes[piece]))
                    }
                }
            }
        }
    }

    /// Fills `buffer` from `offset`, retrying short reads and `EINTR`; reading past the end is an
    /// error (the hasher reads only bytes already written).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws(DownloadError) {
        try forEachStoredPart(at: offset, count: buffer.count) { (at, range) throws(DownloadError) in
            try perform(.read) { () throws(Errno) in
                var done = range.lowerBound
                while done < range.upperBound {
                    let count = try FileSystem.system {
                        try descriptor.read(fromAbsoluteOffset: at + Int64(done - range.lowerBound),
                                            into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<range.upperBound]))
                    }
                    if count == 0 { throw Errno.ioError }  // the file is shorter than what was written to it
                    done += count
                }
            }
        }
    }

    /// Sets the file length (for downloads of unknown size).
    func truncate(to size: Int64) throws(DownloadError) {
        try perform(.resize(size)) { () throws(Errno) in try FileSystem.system { try descriptor.resize(to: size) } }
    }

    /// Asks the kernel to start writing dirty pages (of `range`, or all) to disk without waiting, so
    /// the `fdatasync` of a later checkpoint or of the finish has little left to do.
    func startWriteback(_ range: ByteRange? = nil) {
        guard ringCapacity == nil else { return }  // a ring's bytes are read back and overwritten, never kept
        writebacks.wrappingAdd(1, ordering: .relaxed)
        FileSystem.startWriteback(descriptor, offset: range?.lowerBound ?? 0, length: range?.count ?? 0)
    }

    /// How many times ``startWriteback(_:)`` asked the kernel to start writing.
    var writebacksStarted: Int { writebacks.load(ordering: .relaxed) }

    /// Makes written data durable (`fdatasync`).
    func sync() throws(DownloadError) {
        try perform(.sync) { () throws(Errno) in try FileSystem.sync(descriptor, dataOnly: true) }
    }

    /// Closes the descriptor once; later calls do nothing (a second `close` could close a
    /// descriptor number the process has reused meanwhile).
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        try? descriptor.close()
    }
}
