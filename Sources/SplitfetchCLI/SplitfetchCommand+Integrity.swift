import Splitfetch

/// `--checksum-file` and the digests printed after a download.
extension SplitfetchCommand {
    /// The checksum list of `--checksum-file`, loaded once; `nil` without one.
    func loadChecksumList(options: DownloadOptions) async throws(DownloadError) -> ChecksumList? {
        guard let source = integrity.checksumFile else { return nil }
        return try await ChecksumList.load(source, options: options)
    }

    /// The digests of the list's entry for a file: named like the output, or else like the URL's
    /// file. A list without an entry for it is an error: the user asked for a check.
    func expected(from list: ChecksumList?, path: String, url: String) throws(DownloadError) -> [ExpectedDigest] {
        guard let list, let source = integrity.checksumFile else { return [] }
        let names = [String(path.split(separator: "/").last ?? Substring(path)), defaultFileName(forURL: url)]
        let found = list.expected(for: names, from: redactedURL(source))
        if found.isEmpty {
            let also = names[1] != names[0] ? " or \(names[1])" : ""
            throw DownloadError(.usage, "\(redactedURL(source)) has no checksum for \(names[0])\(also)")
        }
        return found
    }

    /// One line per digest: `sha-256 9f86…  NAME (matches the checksum given)`.
    func writeDigests(_ statistics: DownloadStatistics) {
        for digest in statistics.digests {
            let checked = statistics.verified.filter { $0.digest == digest }.map(\.source.description)
            let note = checked.isEmpty ? "" : " (matches \(checked.joined(separator: ", ")))"
            writeRaw("\(digest.algorithm.rawValue) \(digest.hex)  \(statistics.path)\(note)\n")
        }
    }
}
