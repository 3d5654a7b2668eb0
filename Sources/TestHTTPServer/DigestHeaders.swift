import PercentEncoding
import Crypto
import FoundationEssentials
import NIOConcurrencyHelpers
import NIOHTTP1

/// The digest fields the test server sends when a URL asks for them, and the one-byte
/// corruption it can apply while still stating the right digests.
///
/// - `digest=LIST`, comma-separated: `repr` (`Repr-Digest: sha-256=:…:`), `repr512` (sha-512),
///   `content` (`Content-Digest` of this response's content: a `206` gets its range's digest,
///   which is not the file's), `legacy` (RFC 3230 `Digest: SHA-256=…,MD5=…`), `amz`
///   (`x-amz-checksum-sha256`), `goog` (`x-goog-hash: crc32c=…,md5=…`).
/// - `addheader=LINES`: percent-encoded `Name: value` lines separated by `|`, sent as they are
///   after replacing `{sha256b64}`, `{sha256b64nopad}`, `{sha256hex}`, `{sha256HEX}`,
///   `{sha512b64}` and `{md5b64}` with the whole file's digests: any format a test needs.
/// - `corrupt=OFFSET`: the byte at that offset of the file is flipped in every body that
///   carries it; the digests stay those of the true file.
/// - `digestchange=head`: a `HEAD` states the digests of other content of the same size and
///   ETag, as if the file had changed since the last `GET`.
enum DigestHeaders {
    struct FileDigests: Sendable {
        var sha256: [UInt8]
        var sha512: [UInt8]
        var md5: [UInt8]
    }

    static func fields(query: [String: String], content: SyntheticContent, range: Range<Int64>, status: HTTPResponseStatus,
                       cache: DigestCache) -> [(String, String)] {
        let kinds = query["digest"].map { $0.split(separator: ",").map(String.init) } ?? []
        guard !kinds.isEmpty || query["addheader"] != nil else { return [] }
        let file = cache.digests(of: content)
        var fields: [(String, String)] = []
        for kind in kinds {
            switch kind {
            case "repr": fields.append(("Repr-Digest", "sha-256=:\(base64(file.sha256)):"))
            case "repr512": fields.append(("Repr-Digest", "sha-512=:\(base64(file.sha512)):"))
            case "content":
                let bytes = status == .ok ? file.sha256 : Array(SHA256.hash(data: content.bytes(range)))
                fields.append(("Content-Digest", "sha-256=:\(base64(bytes)):"))
            case "legacy": fields.append(("Digest", "SHA-256=\(base64(file.sha256)),MD5=\(base64(file.md5))"))
            case "amz": fields.append(("x-amz-checksum-sha256", base64(file.sha256)))
            case "goog": fields.append(("x-goog-hash", "crc32c=AAAAAA==,md5=\(base64(file.md5))"))
            default: break
            }
        }
        for line in (query["addheader"].map { percentDecoded(Substring($0)) } ?? "").split(separator: "|") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            var value = String(line[line.index(after: colon)...]).trimmingCharactersInSpaces()
            let sha256 = base64(file.sha256)
            for (placeholder, text) in [("{sha256b64nopad}", String(sha256.prefix { $0 != "=" })), ("{sha256b64}", sha256),
                                        ("{sha256hex}", hex(file.sha256)), ("{sha256HEX}", hex(file.sha256).uppercased()),
                                        ("{sha512b64}", base64(file.sha512)), ("{md5b64}", base64(file.md5))] {
                value = value.replacingPlaceholder(placeholder, with: text)
            }
            fields.append((String(line[..<colon]), value))
        }
        return fields
    }

    static func compute(_ content: SyntheticContent) -> FileDigests {
        var sha256 = SHA256(), sha512 = SHA512(), md5 = Insecure.MD5()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        while offset < content.size {
            let n = Int(min(Int64(buffer.count), content.size - offset))
            buffer.withUnsafeMutableBytes { raw in
                let slice = UnsafeMutableRawBufferPointer(rebasing: raw[0..<n])
                content.fill(slice, from: offset)
                sha256.update(bufferPointer: UnsafeRawBufferPointer(slice))
                sha512.update(bufferPointer: UnsafeRawBufferPointer(slice))
                md5.update(bufferPointer: UnsafeRawBufferPointer(slice))
            }
            offset += Int64(n)
        }
        return FileDigests(sha256: Array(sha256.finalize()), sha512: Array(sha512.finalize()), md5: Array(md5.finalize()))
    }

    static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { byte in
            let s = String(byte, radix: 16)
            return s.count == 1 ? "0" + s : s
        }.joined()
    }
}

/// Whole-file digests by content, computed once per content.
final class DigestCache: Sendable {
    private let box = NIOLockedValueBox<[SyntheticContent: DigestHeaders.FileDigests]>([:])

    func digests(of content: SyntheticContent) -> DigestHeaders.FileDigests {
        if let known = box.withLockedValue({ $0[content] }) { return known }
        let computed = DigestHeaders.compute(content)
        box.withLockedValue { $0[content] = computed }
        return computed
    }
}

extension String {
    func replacingPlaceholder(_ placeholder: String, with text: String) -> String {
        var result = ""
        var rest = Substring(self)
        while let start = rest.firstRange(of: placeholder) {
            result += rest[..<start.lowerBound] + text
            rest = rest[start.upperBound...]
        }
        return result + rest
    }
}
