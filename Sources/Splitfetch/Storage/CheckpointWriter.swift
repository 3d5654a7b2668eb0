/// Saves manifest snapshots of one partial file: the storage half of a checkpoint. What goes in a
/// snapshot, and when, is the download core's decision (`DownloadMachine.Checkpoint`).
///
/// A durable save syncs the data file first (`fdatasync`), then replaces the manifest with
/// `fsync` of the file and its directory, so the manifest never claims a byte that is not on
/// disk. A quick save starts the data's write-back and overwrites the quick slot in place
/// (``QuickManifestSlot``), without syncing.
///
/// Thread safety: a value; call it from one thread at a time (the download's ``IOQueue``).
struct CheckpointWriter: Sendable {
    let file: OutputFile
    let store: ManifestStore
    let quick: QuickManifestSlot
    /// Everything but the segments and the boot id (its ``Manifest/instance`` included).
    let template: Manifest

    /// The manifest for these segments, as of this boot.
    func manifest(_ segments: [Manifest.Segment]) -> Manifest {
        var manifest = template
        manifest.bootID = currentBootID
        manifest.segments = segments
        return manifest
    }

    /// Saves one snapshot; blocking.
    ///
    /// - Throws: ``DownloadError`` with code `fileIO` when the sync or the save fails.
    func save(_ segments: [Manifest.Segment], durable: Bool) throws(DownloadError) {
        if durable {
            try file.sync()
            try store.save(ManifestCodec.encode(manifest(segments)), durable: true)
            quick.baseSaved()
        } else {
            file.startWriteback()
            try quick.save(manifest(segments), base: store)
        }
    }
}
