import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// Reads and atomically replaces a manifest file.
///
/// A save writes a temporary file in the same directory (created with `O_EXCL`, `O_NOFOLLOW`,
/// mode 0600), optionally `fsync`s it, renames it over the manifest, and optionally `fsync`s the
/// directory, so a reader sees either the old manifest or the new one, never a mix.
/// Blocking: call from a thread of its own, not from Swift's cooperative pool.
struct ManifestStore: Sendable {
    let path: String

    var directory: String { parentDirectory(of: path) }

    /// The manifest's bytes, or `nil` if there is no file.
    func read() throws(DownloadError) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return nil }
            if errno == ELOOP { throw DownloadError(.fileIO, "\(path) is a symbolic link; refusing to follow it") }
            throw DownloadError(.fileIO, "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw DownloadError(.fileIO, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            bytes.append(contentsOf: buffer[0..<n])
            if bytes.count > 64 << 20 { throw DownloadError(.badManifest, "manifest \(path) is larger than 64 MiB") }
        }
        return bytes
    }

    /// Replaces the manifest with `bytes`.
    ///
    /// - Parameter durable: `fsync` the new file and the directory.
    func save(_ bytes: [UInt8], durable: Bool) throws(DownloadError) {
        let tmp = path + ".tmp"
        unlink(tmp)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 { throw DownloadError(.fileIO, "cannot create \(tmp): \(String(cString: strerror(errno)))") }
        var ok = false
        defer {
            if !ok { unlink(tmp) }
        }
        do {
            try FileDescriptor(rawValue: fd).writeAll(bytes)
        } catch {
            close(fd)
            throw DownloadError(.fileIO, "cannot write \(tmp): \(error)")
        }
        if durable && fsync(fd) != 0 {
            let text = String(cString: strerror(errno))
            close(fd)
            throw DownloadError(.fileIO, "fsync of \(tmp) failed: \(text)")
        }
        close(fd)
        if rename(tmp, path) != 0 {
            throw DownloadError(.fileIO, "cannot rename \(tmp) to \(path): \(String(cString: strerror(errno)))")
        }
        ok = true
        if durable { try syncDirectory() }
    }

    /// Removes the manifest (after the download completed).
    func remove() {
        unlink(path)
        unlink(path + ".tmp")
    }

    /// `fsync` of the manifest's directory, making renames in it durable.
    func syncDirectory() throws(DownloadError) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd < 0 { throw DownloadError(.fileIO, "cannot open directory \(directory): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        if fsync(fd) != 0 && errno != EINVAL {
            throw DownloadError(.fileIO, "fsync of directory \(directory) failed: \(String(cString: strerror(errno)))")
        }
    }
}

/// This boot of the kernel (Linux `boot_id`); `nil` where unknown.
let currentBootID: String? = {
    guard let f = fopen("/proc/sys/kernel/random/boot_id", "r") else { return nil }
    defer { fclose(f) }
    var buffer = [CChar](repeating: 0, count: 64)
    guard fgets(&buffer, 64, f) != nil else { return nil }
    let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    let trimmed = text.trimmingSpaces().filter { $0 != "\n" }
    return trimmed.isEmpty ? nil : trimmed
}()
