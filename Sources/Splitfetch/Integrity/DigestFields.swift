import RawStructuredFieldValues

/// Reads the digests a server states for the whole file from a response's header fields.
///
/// - `Repr-Digest` (RFC 9530): the digest of the selected representation, valid on a `200`, a
///   `206` and a `HEAD` alike.
/// - `Content-Digest` (RFC 9530): the digest of this response's content, so it describes the
///   file only on a `200` (or a `HEAD` of one) without a content coding; on a `206` it covers
///   the range alone and is ignored.
/// - `Digest` (RFC 3230): `SHA-256=<base64>`, `SHA-512=…`, `MD5=…`, the instance's digest.
/// - `x-amz-checksum-sha256` / `-sha1` (Amazon S3, with `x-amz-checksum-mode: ENABLED`), when it
///   is the full-object kind: a multipart object's composite value (`…-3`) is not a digest of
///   the file and is ignored.
/// - `x-goog-hash` (Google Cloud Storage): its `md5=` part.
///
/// Unknown algorithms, malformed values and fields that do not parse are ignored: a server's
/// digest can only add a check, never stop a download by being unreadable.
package enum DigestFields {
    /// The structured fields (RFC 8941 dictionaries) of RFC 9530.
    package static func structured(_ value: String, source: DigestSource) -> [ExpectedDigest] {
        var parser = StructuredFieldValueParser(Array(value.utf8))
        guard let dictionary = try? parser.parseDictionaryFieldValue() else { return [] }
        var found: [ExpectedDigest] = []
        for (key, member) in dictionary {
            guard let algorithm = DigestAlgorithm(name: key), case .item(let item) = member,
                  case .undecodedByteSequence(let encoded) = item.rfc9651BareItem,
                  let bytes = Digest.base64Bytes(encoded), bytes.count == algorithm.byteCount else { continue }
            found.append(ExpectedDigest(Digest(algorithm, bytes: bytes), source: source))
        }
        return found
    }

    /// RFC 3230 `Digest`: `ALG=base64` pairs separated by commas, names in any case.
    package static func legacy(_ value: String) -> [ExpectedDigest] {
        value.split(separator: ",").compactMap { pair in
            guard let equals = pair.firstIndex(of: "="),
                  let algorithm = DigestAlgorithm(name: pair[..<equals].trimmingSpaces()) else { return nil }
            let text = String(pair[pair.index(after: equals)...]).trimmingSpaces()
            guard let bytes = Digest.base64Bytes(text), bytes.count == algorithm.byteCount else { return nil }
            return ExpectedDigest(Digest(algorithm, bytes: bytes), source: .digestField)
        }
    }

    /// Every digest of the whole file that `head` states.
    ///
    /// - Parameter wholeBody: whether the response is (or, for a `HEAD`, describes) the whole
    ///   file without a content coding: only then does `Content-Digest` count.
    static func digests(in head: ResponseHead, wholeBody: Bool) -> [ExpectedDigest] {
        var found: [ExpectedDigest] = []
        for value in head.all("repr-digest") { found += structured(value, source: .reprDigest) }
        if wholeBody {
            for value in head.all("content-digest") { found += structured(value, source: .contentDigest) }
        }
        for (name, algorithm) in [("x-amz-checksum-sha256", DigestAlgorithm.sha256), ("x-amz-checksum-sha1", .sha1)] {
            if let value = head.first(name), let bytes = Digest.base64Bytes(value.trimmingSpaces()), bytes.count == algorithm.byteCount {
                found.append(ExpectedDigest(Digest(algorithm, bytes: bytes), source: .amazonChecksum))
            }
        }
        for value in head.all("x-goog-hash") {
            for part in value.split(separator: ",") {
                let trimmed = part.trimmingSpaces()
                guard trimmed.lowercased().hasPrefix("md5="), let bytes = Digest.base64Bytes(String(trimmed.dropFirst(4))),
                      bytes.count == 16 else { continue }
                found.append(ExpectedDigest(Digest(.md5, bytes: bytes), source: .googleHash))
            }
        }
        for value in head.all("digest") { found += legacy(value) }
        return found
    }

    /// The value of `Want-Repr-Digest` sent with the probe: SHA-256 preferred, SHA-512 accepted.
    static let wantReprDigest = "Want-Repr-Digest: sha-256=10, sha-512=5"
}
