/// Reads and atomically replaces a manifest file.
///
/// A save writes a temporary file in the same directory (created with `O_EXCL`, `O_NOFOLLOW`,
/// mode 0600), optionally `fsync`s it, renames it over the manifest, and optionally `fsync`s the
/// directory, so a reader sees either the old manifest or the new one, never a mix.
/// Blocking: call on an ``IOQueue``, not on Swift's cooperative pool.
struct ManifestStore: Sendable {
    let path: String

    var directory: String { FileSystem.parentDirectory(of: path) }
    var temporaryPath: String { path + ".tmp" }
    /// The quick checkpoints' manifest, overwritten in place (``QuickManifestSlot``):
    /// `NAME.part.json` → `NAME.part.quick.json`.
    var quickPath: String { path.hasSuffix(".json") ? String(path.dropLast(5)) + ".quick.json" : path + ".quick" }

    /// The manifest's bytes, or `nil` if there is no file.
    func read() throws(DownloadError) -> [UInt8]? {
        do { return try FileSystem.readAll(path, limit: 64 << 20) } catch { throw .fileSystem(error, .read, path: path) }
    }

    /// Replaces the manifest with `bytes`.
    ///
    /// - Parameter durable: `fsync` the new file and the directory.
    func save(_ bytes: [UInt8], durable: Bool) throws(DownloadError) {
        do {
            try FileSystem.remove(temporaryPath)
            try FileSystem.createFile(temporaryPath, containing: bytes, durable: durable)
        } catch {
            throw .fileSystem(error, .create, path: temporaryPath)
        }
        do {
            try FileSystem.rename(temporaryPath, to: path)
        } catch {
            _ = try? FileSystem.remove(temporaryPath)
            throw .fileSystem(error, .rename(to: path), path: temporaryPath)
        }
        if durable { try syncDirectory() }
    }

    /// Removes the manifest (after the download completed); a manifest that cannot be removed only
    /// means a later run with the same name finds it, and checks it against the finished file.
    func remove() {
        _ = try? FileSystem.remove(path)
        _ = try? FileSystem.remove(temporaryPath)
        _ = try? FileSystem.remove(quickPath)
    }

    /// The newest trustworthy record of a partial file: the durable manifest, or the quick
    /// checkpoints' when it may stand in for it (``QuickManifestSlot/newer(at:than:currentBootID:)``).
    func newest(_ durable: Manifest) -> Manifest {
        QuickManifestSlot.newer(at: quickPath, than: durable, currentBootID: currentBootID) ?? durable
    }

    /// `fsync` of the manifest's directory, making renames in it durable.
    func syncDirectory() throws(DownloadError) {
        do { try FileSystem.syncDirectory(directory) } catch { throw .fileSystem(error, .syncDirectory, path: directory) }
    }
}

/// This boot of the kernel (Linux `boot_id`); `nil` where unknown.
let currentBootID: String? = {
    guard let bytes = try? FileSystem.readAll("/proc/sys/kernel/random/boot_id", limit: 64) else { return nil }
    let text = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
    return text.isEmpty ? nil : text
}()
