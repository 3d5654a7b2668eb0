import CShims

/// The mark a run puts on its partial file before `NAME.part` can be seen: the extended attribute
/// `user.splitfetch.partial`, whose value is the URL (credentials removed).
///
/// A partial file without a manifest cannot be resumed: nothing says which of its bytes are on
/// disk. Most such files are not ours to remove, so ``PartialFile/openExisting()`` refuses them.
/// One kind is: a run of the same URL that was killed after naming its file and before saving its
/// first manifest (a window of a few milliseconds), or during a stream, which keeps no manifest.
/// Such a file carries this mark and is unlocked, and the next run of that URL removes it and
/// starts over, instead of failing until someone passes `--restart`. A daemon restarted after
/// `kill -9` needs exactly that.
///
/// A marked file is always locked while its run lives (the mark is set after the lock), so a run
/// never removes another live run's file. Where the file system keeps no user attributes, there is
/// no mark, and such a file is refused as before. The mark is removed from the finished file after
/// its rename.
///
/// Every call blocks: run them on the download's ``IOQueue``.
enum OwnerMark {
    static let attributeName = "user.splitfetch.partial"

    /// Marks `file` as the partial file of `url`. Best effort: a file left unmarked is only
    /// refused later, never trusted.
    static func set(_ url: String, on file: OutputFile) {
        let bytes = Array(url.utf8)
        _ = bytes.withUnsafeBytes { sf_set_attribute(file.descriptor.rawValue, attributeName, $0.baseAddress, UInt($0.count)) }
    }

    /// Whether the file at `path` carries the mark of `url`.
    static func names(_ url: String, on path: String) -> Bool {
        let expected = Array(url.utf8)
        // One byte more than the URL: a longer value is another URL.
        var buffer = [UInt8](repeating: 0, count: expected.count + 1)
        let length = buffer.withUnsafeMutableBytes { sf_get_attribute(path, attributeName, $0.baseAddress, UInt($0.count)) }
        return length == expected.count && buffer[..<length].elementsEqual(expected)
    }

    /// Removes the mark from a finished file (it no longer says anything).
    static func remove(from file: OutputFile) {
        _ = sf_remove_attribute(file.descriptor.rawValue, attributeName)
    }
}
