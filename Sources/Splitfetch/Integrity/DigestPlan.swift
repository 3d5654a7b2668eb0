/// What a download hashes and what the result must match: a value decided from what the caller
/// gave, what the server said and what the caller wants reported.
///
/// Precedence:
/// 1. The caller's digests (``DownloadOptions/Integrity-swift.struct/expectedDigests``: `--checksum`, checksum files)
///    are all checked. A server digest of the same algorithm that disagrees is named in a
///    warning, and the caller's wins: the publisher's list is what the user trusts, a mirror's
///    header is what might be stale.
/// 2. Otherwise one server digest is checked: by source, `Repr-Digest`, then `Content-Digest`,
///    `x-amz-checksum-*`, `x-goog-hash`, then `Digest`; within a source, the strongest
///    algorithm.
///
/// Every algorithm of ``DownloadOptions/Integrity-swift.struct/reportedDigests`` is computed as well, checked or not.
package struct DigestPlan: Sendable, Equatable {
    /// What the file must match; empty when nothing is checked.
    package var checks: [ExpectedDigest] = []
    /// Every algorithm computed, strongest first.
    package var algorithms: [DigestAlgorithm] = []
    /// Disagreements between the caller's digests and the server's.
    package var warnings: [DownloadWarning] = []

    /// Nothing hashed, nothing checked.
    package init() {}

    /// Whether anything is hashed at all.
    package var hashes: Bool { !algorithms.isEmpty }

    /// The server's digest this plan would keep in a manifest, to tell a changed file on resume.
    package static func serverDigest(of server: [ExpectedDigest]) -> ExpectedDigest? {
        server.min { (rank($0.source), $1.digest.algorithm) < (rank($1.source), $0.digest.algorithm) }
    }

    /// Decides the plan.
    ///
    /// - Throws: ``DownloadError`` (``DownloadError/Code/usage``) when two of the caller's
    ///   digests of one algorithm differ: no file could match both.
    package init(given: [ExpectedDigest], server: [ExpectedDigest], reported: [DigestAlgorithm]) throws(DownloadError) {
        for (index, a) in given.enumerated() {
            for b in given[..<index] where a.digest.algorithm == b.digest.algorithm && a.digest != b.digest {
                throw DownloadError(.usage, "the checksums given disagree: \(b) and \(a)")
            }
        }
        if given.isEmpty {
            checks = Self.serverDigest(of: server).map { [$0] } ?? []
        } else {
            checks = given.reduce(into: []) { kept, digest in
                if !kept.contains(where: { $0.digest == digest.digest }) { kept.append(digest) }
            }
            for theirs in server {
                guard let ours = given.first(where: { $0.digest.algorithm == theirs.digest.algorithm }),
                      ours.digest != theirs.digest, !warnings.contains(where: { $0.fields["digest"] == theirs.digest.description }) else { continue }
                warnings.append(DownloadWarning(
                    .digestsDisagree, "\(theirs.source) is \(theirs.digest) but \(ours.source) is \(ours.digest); checking \(ours.source)",
                    fields: ["source": "\(theirs.source)", "digest": theirs.digest.description,
                             "checkedSource": "\(ours.source)", "checkedDigest": ours.digest.description]))
            }
        }
        algorithms = Array(Set(checks.map(\.digest.algorithm) + reported)).sorted(by: >)
    }

    /// The error for digests that do not match; `nil` when every check holds.
    ///
    /// - Parameters:
    ///   - computed: the file's digests, one per algorithm of ``algorithms``.
    ///   - url: names the download in the message.
    package func mismatch(_ computed: [Digest], url: String) -> DownloadError? {
        for check in checks {
            guard let actual = computed.first(where: { $0.algorithm == check.digest.algorithm }), actual != check.digest else { continue }
            return DownloadError(.integrity,
                "\(url): the file's \(check.digest.algorithm.rawValue) is \(actual.hex), but \(check.source) says \(check.digest.hex)")
        }
        return nil
    }

    private static func rank(_ source: DigestSource) -> Int {
        switch source {
        case .reprDigest: 0
        case .contentDigest: 1
        case .amazonChecksum: 2
        case .googleHash: 3
        case .digestField: 4
        case .given, .checksumFile: 5
        }
    }
}
