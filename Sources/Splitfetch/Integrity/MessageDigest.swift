import COpenSSLCrypto

/// One running digest computation, by OpenSSL's libcrypto (EVP).
///
/// Thread safety: not `Sendable`; one thread at a time (the hasher's).
final class MessageDigest {
    let algorithm: DigestAlgorithm
    private let context: OpaquePointer

    init(_ algorithm: DigestAlgorithm) {
        self.algorithm = algorithm
        // Failing to allocate a context or to find a built-in digest is not recoverable.
        guard let context = EVP_MD_CTX_new() else { fatalError("EVP_MD_CTX_new failed") }
        self.context = context
        let md: OpaquePointer? = switch algorithm {
        case .sha256: EVP_sha256()
        case .sha512: EVP_sha512()
        case .sha1: EVP_sha1()
        case .md5: EVP_md5()
        }
        guard EVP_DigestInit_ex(context, md, nil) == 1 else { fatalError("EVP_DigestInit_ex(\(algorithm.rawValue)) failed") }
    }

    deinit { EVP_MD_CTX_free(context) }

    func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        guard EVP_DigestUpdate(context, base, bytes.count) == 1 else { fatalError("EVP_DigestUpdate failed") }
    }

    /// The digest of everything given; the computation cannot go on after it.
    func finish() -> Digest {
        var bytes = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard EVP_DigestFinal_ex(context, &bytes, &length) == 1 else { fatalError("EVP_DigestFinal_ex failed") }
        return Digest(algorithm, bytes: Array(bytes[0..<Int(length)]))
    }

    /// The digest of `bytes`, at once.
    static func of(_ bytes: some Sequence<UInt8>, _ algorithm: DigestAlgorithm) -> Digest {
        let digest = MessageDigest(algorithm)
        Array(bytes).withUnsafeBytes { digest.update($0) }
        return digest.finish()
    }
}
