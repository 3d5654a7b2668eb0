import ArgumentParser
import Splitfetch
import SystemPackage

/// What the finished file is checked against, and which digests are reported.
struct IntegrityOptions: ParsableArguments {
    @Option(name: .customLong("checksum"), parsing: .unconditionalSingleValue, help: ArgumentHelp(
        "ALG=VALUE the file must match: sha-256, sha-512, sha-1 or md5, in hex or base64 (repeatable). Checked as the file downloads.",
        valueName: "alg=value"))
    var checksums: [String] = []

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "A checksum list (sha256sum or BSD format, or a NAME.sha256 sidecar), as a file or an http(s) URL; the entry named like the output, or else like the URL's file, is checked.",
        valueName: "file|url"))
    var checksumFile: String?

    @Option(name: .customLong("hash"), parsing: .unconditionalSingleValue, help: ArgumentHelp(
        "Compute this digest (sha-256, sha-512, sha-1, md5) and report it, in the summary and --stats-json (repeatable).",
        valueName: "alg"))
    var hashes: [String] = []

    @Flag(name: .customLong("no-server-digest"),
          help: "Ignore the digests the server states (Repr-Digest, Content-Digest, Digest, x-amz-checksum-*, x-goog-hash).")
    var noServerDigest = false

    /// The algorithms of `--hash`.
    func reportedAlgorithms() throws -> [DigestAlgorithm] {
        try hashes.map { name in
            guard let algorithm = DigestAlgorithm(name: name) else {
                throw ValidationError("--hash: unknown algorithm \"\(name)\" (use sha-256, sha-512, sha-1 or md5)")
            }
            return algorithm
        }
    }

    /// The digests of `--checksum`.
    func givenDigests() throws -> [ExpectedDigest] {
        try checksums.map { text in
            do throws(DownloadError) { return try ExpectedDigest(parsing: text) } catch { throw ValidationError("--checksum: \(error.message)") }
        }
    }
}
