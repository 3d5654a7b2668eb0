// libFuzzer targets for every parser of untrusted input. Built by scripts/fuzz with
// `-sanitize=fuzzer,address -D FUZZING`, where `main` hands over to libFuzzer's driver; built
// normally (as `swift build` does), it replays the files it is given through a target.
//
//     scripts/fuzz --seconds 60                    # every target
//     .build-fuzz/debug/sf-fuzz content-range ...  # one target, libFuzzer's own options after it
//
// Each target feeds the input to one parser and checks what the parser promises, so a wrong
// answer is a crash too, not only a memory error. A crash found becomes a regression test.

import DownloadCore
import Splitfetch

#if canImport(Glibc)
import Glibc
#endif

/// The target names, in the order scripts/fuzz runs them.
let fuzzTargets = ["content-range", "content-length", "content-disposition", "retry-after", "location", "manifest",
                   "digest-fields", "checksum-list", "link"]

/// Stops the fuzzer with a message naming the broken promise.
func broken(_ promise: String, _ input: String) -> Never {
    fatalError("\(promise): \(input.debugDescription)")
}

/// Runs one input through one target.
func fuzz(_ target: String, _ bytes: [UInt8]) {
    let text = String(decoding: bytes, as: UTF8.self)
    switch target {
    case "content-range":
        switch HTTPFields.contentRange(text) {
        case .range(let range, let total)?:
            if range.isEmpty { broken("an empty range was accepted", text) }
            if let total, range.upperBound > total { broken("a range past its total was accepted", text) }
        case .unsatisfied(let total)?:
            if total < 0 { broken("a negative total was accepted", text) }
        case nil:
            break
        }
    case "content-length":
        let values = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if case .success(let length?) = HTTPFields.contentLength(values), length < 0 {
            broken("a negative length was accepted", text)
        }
    case "content-disposition":
        if let raw = ContentDisposition.fileName(text), let name = safeFileName(raw) {
            if name.contains("/") || name.contains("\\") || name.hasPrefix(".") || name.isEmpty || name.utf8.count > 255
                || name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                broken("an unsafe file name came through: \(name.debugDescription)", text)
            }
        }
    case "retry-after":
        if let after = HTTPFields.retryAfterValue(text, receivedAt: 1_800_000_000) {
            let delay = after.delay
            if !(delay >= 0) || !delay.isFinite { broken("a negative or infinite delay", text) }
        }
    case "location":
        // A redirect target: libcurl's parser decides, and no secret may survive redaction.
        let origin = "http://alice:s3cret@127.0.0.1:8080/start"
        let policy = RequestPolicy(url: origin, options: DownloadOptions())
        _ = policy.checkRedirect(from: origin, to: text)
        let request = policy.request(text)
        if request.credentials != nil, CurlURL(text)?.origin != "http://127.0.0.1:8080" {
            broken("credentials for another origin", text)
        }
        // Unless the input brings the word itself, in its path (a fuzzer found "s3cret=\u{FFFD}").
        if !text.contains("s3cret"), redactedURL(origin + text).contains("s3cret") { broken("a password survived redaction", text) }
        // Nor a signature in the query, whatever follows it.
        let signed = "https://b.example/k?X-Amz-Signature=SIGSECRET&" + text
        if !text.contains("SIGSECRET"), redactedURL(signed).contains("SIGSECRET") { broken("a signature survived redaction", text) }
    case "link":
        // RFC 8288 Link fields announcing mirrors: only absolute http(s) URLs come out, each once,
        // and the parse of the same text is the same.
        let fields = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let mirrors = MirrorLinks.duplicates(in: fields, base: "http://127.0.0.1:8080/dir/file.iso")
        if Set(mirrors).count != mirrors.count { broken("a mirror came out twice", text) }
        // Bytes, not `origin.hasPrefix("http://")`: String compares characters, and a host
        // starting with a combining mark (U+065E) joins the "/" before it into one.
        for mirror in mirrors where !(CurlURL(mirror).map { $0.origin.utf8.starts(with: "http://".utf8) || $0.origin.utf8.starts(with: "https://".utf8) } ?? false) {
            broken("a mirror that is not http(s): \(mirror)", text)
        }
        if MirrorLinks.parse(text) != MirrorLinks.parse(text) { broken("two parses of the same field differ", text) }
    case "manifest":
        if let manifest = try? ManifestCodec.decode(bytes, path: "fuzz") {
            if let problem = ManifestCodec.problem(in: manifest) { broken("an inconsistent manifest was accepted (\(problem))", text) }
            let again = try? ManifestCodec.decode(ManifestCodec.encode(manifest), path: "fuzz")
            if again?.segments != manifest.segments || again?.url != manifest.url {
                broken("a manifest did not survive saving again", text)
            }
        }
    case "digest-fields":
        // Repr-Digest / Content-Digest (structured), RFC 3230 Digest: every digest found has its
        // algorithm's length, and survives being written and read again.
        for found in DigestFields.structured(text, source: .reprDigest) + DigestFields.legacy(text) {
            let digest = found.digest
            if digest.bytes.count != digest.algorithm.byteCount { broken("a digest of the wrong length", text) }
            if Digest(digest.algorithm, text: digest.base64) != digest || Digest(digest.algorithm, text: digest.hex) != digest {
                broken("a digest did not survive base64 or hex", text)
            }
        }
    case "checksum-list":
        // A list names files by what it says; a name matched must be listed, and values have
        // their algorithm's length.
        let list = ChecksumList(parsing: text)
        for entry in list.entries where entry.digest.bytes.count != entry.digest.algorithm.byteCount {
            broken("a list entry of the wrong length", text)
        }
        for entry in list.entries {
            guard let name = entry.name, !name.isEmpty else { continue }
            if list.expected(for: [name], from: "fuzz").isEmpty { broken("a listed name found nothing", text) }
        }
    default:
        fatalError("unknown fuzz target \(target); targets: \(fuzzTargets.joined(separator: ", "))")
    }
}

/// The target, chosen once before fuzzing starts.
nonisolated(unsafe) var selectedTarget = ""

#if FUZZING
/// libFuzzer's entry point for a program with a `main` of its own (SwiftPM supplies ours).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt
#endif

@main
struct FuzzMain {
    static func main() {
        let arguments = CommandLine.arguments
        guard arguments.count > 1, fuzzTargets.contains(arguments[1]) else {
            print("usage: sf-fuzz TARGET [libFuzzer options and corpus directories]; targets: \(fuzzTargets.joined(separator: ", "))")
            exit(2)
        }
        // Single-threaded until the fuzzer starts: set once, read by every input after.
        selectedTarget = arguments[1]
        #if FUZZING
        // libFuzzer gets every argument but the target's name.
        var cArguments: [UnsafeMutablePointer<CChar>?] = ([arguments[0]] + arguments.dropFirst(2)).map { strdup($0) } + [nil]
        var argc = CInt(cArguments.count - 1)
        let status = cArguments.withUnsafeMutableBufferPointer { buffer -> CInt in
            var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
            return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
                fuzz(selectedTarget, data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
                return 0
            }
        }
        exit(status)
        #else
        // Without libFuzzer (a plain build): run each file given once, to replay a crash or a corpus.
        for path in arguments.dropFirst(2) {
            guard let bytes = try? FileSystem.readAll(path, limit: .max, followingLinks: true) else { continue }
            fuzz(selectedTarget, bytes)
        }
        #endif
    }
}
