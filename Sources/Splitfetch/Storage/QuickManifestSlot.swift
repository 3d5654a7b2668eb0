import NIOConcurrencyHelpers
import SystemPackage

/// The quick checkpoints' manifest (`NAME.part.quick.json`): one file, opened once per run and
/// overwritten in place, where the durable manifest is replaced by a new file and a rename.
///
/// A quick checkpoint promises only what a killed process keeps: bytes in the kernel's page
/// cache, on this boot. Writing it in place costs one `pwrite` instead of a create, a write, a
/// close, a rename and the old file's unlink (a quick checkpoint comes every 0.1 s). A save
/// never shrinks the file: the manifest is padded with spaces inside its JSON to the length
/// before (``ManifestCodec/encode(_:paddedTo:)``), so its checksum line always ends the file.
///
/// A torn write (a power cut during the `pwrite`) fails the checksum, and the slot is then
/// ignored: it is trusted only with the durable manifest's ``Manifest/instance``, on the boot
/// that wrote it, and when it records more bytes than the durable one (``newer(than:)``).
///
/// Thread safety: one lock guards the descriptor and the length; saves come from the download's
/// ``IOQueue`` one at a time.
final class QuickManifestSlot: Sendable {
    let path: String
    private struct State {
        var descriptor: FileDescriptor?
        var length = 0
        var closed = false
        /// This run has saved `NAME.part.json` (its first checkpoint, or a durable one).
        var baseSaved = false
        /// Encodes this run's manifests (remade when anything but the segments changes).
        var splicer: ManifestCodec.SegmentSplicer?
    }
    private let state = NIOLockedValueBox(State())

    init(path: String) {
        self.path = path
    }

    /// Records that this run has saved the durable manifest (`NAME.part.json`).
    func baseSaved() {
        state.withLockedValue { $0.baseSaved = true }
    }

    /// Saves a quick checkpoint (blocking): the run's first one replaces `NAME.part.json` (with
    /// a rename, unsynced), so that the file always has a manifest and a resumed run's best
    /// record is kept before the slot is reused; every later one overwrites the slot in place.
    func save(_ manifest: Manifest, base: ManifestStore) throws(DownloadError) {
        let result = state.withLockedValue { state -> Result<Void, DownloadError> in
            guard !state.closed else { return .success(()) }
            if !state.baseSaved {
                do throws(DownloadError) {
                    try base.save(ManifestCodec.encode(manifest), durable: false)
                } catch {
                    return .failure(error)
                }
                state.baseSaved = true
                return .success(())
            }
            var operation = FileOperation.create
            do throws(Errno) {
                if state.descriptor == nil {
                    // A slot left by an earlier run is replaced by a new file (this run's first
                    // checkpoint, in NAME.part.json, already holds at least as much): unlinked,
                    // never truncated, so a link planted there cannot lead the write elsewhere.
                    _ = try FileSystem.remove(path)
                    state.descriptor = try FileSystem.system {
                        try FileDescriptor.open(FilePath(path), .writeOnly,
                                                options: [.create, .exclusiveCreate, .noFollow, .closeOnExec],
                                                permissions: [.ownerReadWrite])
                    }
                    state.length = 0
                }
                if state.splicer.map({ !$0.fits(manifest) }) ?? true { state.splicer = ManifestCodec.SegmentSplicer(manifest) }
                let bytes = state.splicer?.encode(manifest, paddedTo: state.length)
                    ?? ManifestCodec.encode(manifest, paddedTo: state.length)
                operation = .write(bytes: bytes.count, offset: 0)
                _ = try FileSystem.system { try state.descriptor!.writeAll(toAbsoluteOffset: 0, bytes) }
                state.length = max(state.length, bytes.count)
                return .success(())
            } catch {
                return .failure(.fileSystem(error, operation, path: path))
            }
        }
        try result.get()
    }

    /// Closes the descriptor; later saves do nothing.
    func close() {
        state.withLockedValue { state in
            state.closed = true
            try? state.descriptor?.close()
            state.descriptor = nil
        }
    }

    /// The slot's manifest when it may stand in for `durable`: it decodes and passes its
    /// checksum, belongs to the same partial file (``Manifest/instance``) and the same file on the
    /// server, was written on this boot, and records more stored bytes. `nil` otherwise.
    static func newer(at path: String, than durable: Manifest, currentBootID: String?) -> Manifest? {
        guard let instance = durable.instance, let bootID = currentBootID,
              let bytes = try? FileSystem.readAll(path, limit: 64 << 20),
              let quick = try? ManifestCodec.decode(bytes, path: path),
              quick.instance == instance, quick.bootID == bootID, quick.url == durable.url, quick.size == durable.size,
              quick.etag == durable.etag, quick.lastModified == durable.lastModified,
              quick.storedBytes(currentBootID: bootID) > durable.storedBytes(currentBootID: bootID) else { return nil }
        return quick
    }
}
