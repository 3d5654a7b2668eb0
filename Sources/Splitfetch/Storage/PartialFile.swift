import CShims
import DownloadCore

import SystemPackage

/// The files of one download on disk and the rules for them: the partial file `NAME.part` and its
/// manifest `NAME.part.json` beside the destination. Opening an earlier run's data (and deciding
/// whether it may be resumed), discarding it, creating a new one, and putting a finished file in
/// place under its final name.
///
/// Thread safety: a value; the blocking calls run on the caller's thread, which is never one of
/// Swift's cooperative pool (the download's ``IOQueue``), except where noted.
struct PartialFile: Sendable {
    /// The URL the caller gave, for manifests and messages (credentials removed).
    let url: String
    let destination: String
    let options: DownloadOptions

    /// What the partial file's and the manifest's names add to the destination's.
    static let partialSuffix = ".part"
    static let manifestSuffix = ".part.json"

    var partialPath: String { destination + Self.partialSuffix }
    /// Whether the destination may be replaced: asked for (``DownloadOptions/allowOverwrite``), or
    /// a conditional refresh, which replaces the file it refreshes.
    var replacesDestination: Bool { options.allowOverwrite || options.refresh }
    var manifestPath: String { destination + Self.manifestSuffix }
    var store: ManifestStore { ManifestStore(path: manifestPath) }

    /// An earlier run's partial file, locked, with its manifest.
    struct Existing: Sendable {
        let file: OutputFile
        let manifest: Manifest
    }

    /// Removes a partial file and manifest left by an earlier run (`restart`); only regular files.
    func discard() throws(DownloadError) {
        for path in [partialPath, manifestPath, store.temporaryPath] {
            let info: Stat?
            do { info = try FileSystem.status(path) } catch { throw .fileSystem(error, .stat, path: path) }
            guard let info else { continue }
            guard info.type == .regular else {
                throw DownloadError(.fileIO, "\(path) is not a regular file; refusing to remove it")
            }
            do { try FileSystem.remove(path) } catch { throw .fileSystem(error, .remove, path: path) }
        }
    }

    /// Removes this run's own partial data after a failure that makes it worthless. A file that
    /// never got its name has nothing on disk to remove (and `NAME.part`, if there, is not ours).
    func removeOwnData(of file: OutputFile?) {
        if let file, !file.isNamed { return }
        _ = try? FileSystem.remove(partialPath)
        store.remove()
    }

    /// What is at the download's paths before it starts, each looked up once for the checks that
    /// follow (``finishedEarlier(_:)``, ``checkDestination(_:)``, ``openExisting(_:)``, a refresh's
    /// look at the file): each check looking for itself made nine lookups of three paths.
    struct OnDisk {
        /// The destination (a symbolic link not followed); `nil` when nothing is there.
        var destination: Stat?
        var hasPartial: Bool
        /// The manifest's bytes; `nil` when there is none.
        var manifest: [UInt8]?
    }

    /// Looks at the destination, the partial file and the manifest.
    func look() throws(DownloadError) -> OnDisk {
        let info: Stat?
        do { info = try FileSystem.status(destination) } catch { throw .fileSystem(error, .stat, path: destination) }
        return OnDisk(destination: info, hasPartial: FileSystem.exists(partialPath), manifest: try store.read())
    }

    /// The manifest of a run killed after renaming the finished file but before removing its
    /// manifest; `nil` when that is not what is on `disk`. The manifest is then removed (from
    /// `disk` too).
    func finishedEarlier(_ disk: inout OnDisk) -> Manifest? {
        guard !options.allowOverwrite, let info = disk.destination, !disk.hasPartial, let bytes = disk.manifest,
              let manifest = try? ManifestCodec.decode(bytes, path: manifestPath), manifest.url == url,
              info.type == .regular, info.size == manifest.size else { return nil }
        store.remove()
        disk.manifest = nil
        return manifest
    }

    /// The destination may be written: not there (or `allowOverwrite` and a regular file), and its
    /// directory exists. `info`: what ``look()`` found at the destination.
    func checkDestination(_ info: Stat?) throws(DownloadError) {
        if let info {
            if info.type != .regular {
                throw DownloadError(.fileIO, "\(destination) exists and is not a regular file; refusing to replace it")
            }
            if !replacesDestination {
                throw DownloadError(.outputExists, "\(destination) already exists", remedy: .allowOverwrite)
            }
            // Found, so every directory on its path is there.
            return
        }
        let directory = FileSystem.parentDirectory(of: destination)
        if !FileSystem.isDirectory(directory) {
            throw DownloadError(.fileIO, "directory \(directory) does not exist")
        }
    }

    /// Opens and locks the partial file of an earlier run, with its manifest; `nil` when `disk`
    /// has neither. Anything else is a conflict with a message saying what to do.
    func openExisting(_ disk: OnDisk) throws(DownloadError) -> Existing? {
        switch (disk.hasPartial, disk.manifest) {
        case (false, nil):
            return nil
        case (false, .some):
            throw DownloadError(.resumeConflict,
                "\(manifestPath) exists but \(partialPath) does not; start over", remedy: .restart)
        case (true, nil):
            // Lock first: an active download may not have written its manifest yet.
            let file = try OutputFile.openExisting(path: partialPath)
            defer { file.close() }
            try file.lockExclusively()
            // A run of this URL killed before its first manifest (or a stream's, which has none)
            // promised none of these bytes: nothing is lost by starting over.
            if OwnerMark.names(url, on: partialPath) {
                do { try FileSystem.remove(partialPath) } catch { throw .fileSystem(error, .remove, path: partialPath) }
                return nil
            }
            throw DownloadError(.resumeConflict,
                "\(partialPath) exists without a manifest, so its bytes cannot be trusted; start over to discard it",
                remedy: .restart)
        case (true, .some):
            let file = try OutputFile.openExisting(path: partialPath, injectedFullDiskOffset: options.injectedFullDiskOffset)
            do throws(DownloadError) {
                try file.lockExclusively()
                // Read again under the lock: the manifest may have changed while another run held it.
                guard let bytes = try store.read() else {
                    throw DownloadError(.resumeConflict, "\(manifestPath) disappeared; run again")
                }
                return Existing(file: file, manifest: store.newest(try ManifestCodec.decode(bytes, path: manifestPath)))
            } catch {
                file.close()
                throw error
            }
        }
    }

    /// Checks that an earlier run's data belongs to this URL and to the file the server has now.
    func checkResumable(_ existing: Existing, resource: RemoteResource) throws(DownloadError) {
        let manifest = existing.manifest
        if manifest.url != url {
            throw DownloadError(.resumeConflict,
                "\(manifestPath) belongs to \(manifest.url), not \(url); use another output name, or start over",
                remedy: .restart)
        }
        let changed = "the file changed on the server since the download began"
        if resource.size != manifest.size {
            throw DownloadError(.remoteChanged,
                "\(url): \(changed) (size \(manifest.size) is now \(resource.size.map(String.init) ?? "unknown")); start over to download the new file",
                remedy: .restart)
        }
        if let old = manifest.etag, let new = resource.etag, !HTTPFields.sameEntityTag(old, new) {
            throw DownloadError(.remoteChanged, "\(url): \(changed) (ETag \(old) is now \(new)); start over to download the new file",
                                remedy: .restart)
        }
        if manifest.etag == nil || resource.etag == nil, let old = manifest.lastModified, let new = resource.lastModified, old != new {
            throw DownloadError(.remoteChanged,
                "\(url): \(changed) (Last-Modified \(old) is now \(new)); start over to download the new file",
                remedy: .restart)
        }
        if let old = manifest.serverDigest,
           let new = resource.digests.first(where: { $0.digest.algorithm == old.algorithm })?.digest, old != new {
            throw DownloadError(.remoteChanged, "\(url): \(changed) (its \(old.algorithm.rawValue) was \(old.hex), now \(new.hex)); start over to download the new file",
                                remedy: .restart)
        }
        if !resource.acceptsRanges {
            throw DownloadError(.resumeConflict, "\(url): the server no longer accepts ranges; start over to download it whole",
                                remedy: .restart)
        }
        let length = try existing.file.currentSize()
        if length != manifest.size {
            throw DownloadError(.resumeConflict, "\(partialPath) has \(length) bytes but its manifest says \(manifest.size); start over",
                                remedy: .restart)
        }
    }

    /// Creates, locks and marks (``OwnerMark``) a new partial file and, when the size is known,
    /// preallocates it (about 0.3 ms per GiB on ext4 here). Blocking.
    ///
    /// Where the file system can, the file is locked and marked before it has its name, so
    /// `NAME.part` never exists unmarked; elsewhere (and when replacing, `--force`) it is marked
    /// just after it is locked, so a marked file is always locked while its run lives.
    func create(size: Int64?) throws(DownloadError) -> OutputFile {
        let unnamed = options.allowOverwrite ? nil
            : try OutputFile.createUnnamed(path: partialPath, injectedFullDiskOffset: options.injectedFullDiskOffset)
        let file: OutputFile
        if let unnamed {
            file = unnamed
        } else {
            file = try OutputFile.create(path: partialPath, replace: options.allowOverwrite,
                                         injectedFullDiskOffset: options.injectedFullDiskOffset)
        }
        do throws(DownloadError) {
            try file.lockExclusively()
            OwnerMark.set(url, on: file)
            if unnamed != nil { try file.name() }
            if let size {
                try file.checkFreeSpace(for: size)
                try file.preallocate(size)
            }
            return file
        } catch {
            file.close()
            if file.isNamed { _ = try? FileSystem.remove(partialPath) }
            throw error
        }
    }

    /// A new partial file without a name (``OutputFile/createUnnamed(path:injectedFullDiskOffset:)``),
    /// preallocated like ``create(size:)``; `nil` where the file system cannot make one. It gets
    /// its name with its first manifest (``nameForResuming(_:)``) or, finished, its final name.
    func createUnnamed(size: Int64) throws(DownloadError) -> OutputFile? {
        guard let file = try OutputFile.createUnnamed(path: partialPath, injectedFullDiskOffset: options.injectedFullDiskOffset) else {
            return nil
        }
        do throws(DownloadError) {
            try file.checkFreeSpace(for: size)
            try file.preallocate(size)
            return file
        } catch {
            file.close()
            throw error
        }
    }

    /// Names an unnamed partial file `NAME.part`, locked and marked (``OwnerMark``), before its
    /// first manifest is saved: from then on a rerun can resume it, or, killed before that
    /// manifest, discard it. Does nothing for a named file.
    func nameForResuming(_ file: OutputFile) throws(DownloadError) {
        guard !file.isNamed else { return }
        try file.lockExclusively()
        OwnerMark.set(url, on: file)
        try file.name()
    }

    /// The end of every successful download (blocking: it waits for the disk): the data reaches
    /// the disk (unless `syncBeforeRename` is off), the file is closed and renamed into place and
    /// the manifest removed. The caller then syncs the directory so the rename lasts
    /// (``DirectorySync``, shared with the renames of other downloads), also unless
    /// `syncBeforeRename` is off.
    /// A file that never got a name (it had no manifest) gets the final name directly.
    ///
    /// Before the sync, the file gets its time from `Last-Modified` (``DownloadOptions/remoteTime``)
    /// and the server's validators are recorded with it (``RecordedValidators``), so that a later
    /// conditional refresh can ask for it only if it changed.
    ///
    /// - Returns: the record of the validators made with the file, if the server sent any.
    @discardableResult
    func putInPlace(_ file: OutputFile, removingManifest: Bool,
                    validators: (etag: String?, lastModified: String?) = (nil, nil)) throws(DownloadError) -> ConditionalRefresh.Recorded? {
        defer { file.close() }  // on every path; renaming an open file is fine
        if options.remoteTime, let seconds = validators.lastModified.flatMap(HTTPFields.httpDate) {
            do { try FileSystem.retryingInterrupts { sf_set_file_times(file.descriptor.rawValue, seconds) } } catch {
                throw .fileSystem(error, .setTimes, path: file.path)
            }
        }
        let record = RecordedValidators.record(etag: validators.etag, lastModified: validators.lastModified, on: file)
        if options.durability.syncBeforeRename { try file.sync() }
        if !file.isNamed && !replacesDestination {
            try file.name(as: destination)  // never replaces a file
        } else {
            if !file.isNamed {  // replacing takes a rename, and a rename a name
                OwnerMark.set(url, on: file)
                try file.name()
            }
            try moveIntoPlace()
            OwnerMark.remove(from: file)  // after the rename: a kill before it leaves a marked NAME.part
            if removingManifest { store.remove() }
        }
        // Without attributes here, a refresh keeps the record beside the file, once the file is
        // in place.
        if options.refresh {
            if let record, !record.kept {
                try? RecordedValidators.writeSidecar(record.recorded, for: destination)
            } else {
                RecordedValidators.removeSidecar(for: destination)
            }
        }
        return record?.recorded
    }

    /// Renames the partial file to the destination; without overwrite, never replaces a file that
    /// appeared meanwhile (`renameat2` with `RENAME_NOREPLACE`, or else `link`, fails if the name
    /// exists).
    private func moveIntoPlace() throws(DownloadError) {
        if replacesDestination {
            do { try FileSystem.rename(partialPath, to: destination) } catch {
                throw .fileSystem(error, .rename(to: destination), path: partialPath)
            }
            return
        }
        do {
            try FileSystem.renameWithoutReplacing(partialPath, to: destination)
            return
        } catch .fileExists {
            throw .fileSystem(.fileExists, .link(to: destination), path: partialPath)
        } catch {
            // Not supported here: link and unlink do the same in two steps.
        }
        do {
            try FileSystem.link(partialPath, to: destination)
        } catch .fileExists {
            throw .fileSystem(.fileExists, .link(to: destination), path: partialPath)
        } catch {
            // File systems without hard links: fall back to rename after a last check.
            if FileSystem.exists(destination) { throw .fileSystem(.fileExists, .link(to: destination), path: partialPath) }
            do { try FileSystem.rename(partialPath, to: destination) } catch {
                throw .fileSystem(error, .rename(to: destination), path: partialPath)
            }
            return
        }
        _ = try? FileSystem.remove(partialPath)
    }
}
