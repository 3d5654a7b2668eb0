import Glibc
public import SystemPackage

/// The daemon's RPC secret. It is read from a file or the environment, never from the command
/// line, never printed or logged (its description is redacted), and compared in constant time.
public struct Secret: Sendable, CustomStringConvertible {
    private let bytes: [UInt8]

    public init(_ text: String) throws(RPCError) {
        let trimmed = text.trimmingWhitespace
        guard trimmed.utf8.count >= 16 else { throw RPCError.failed("the secret must be at least 16 characters") }
        bytes = Array(trimmed.utf8)
    }

    public var description: String { "<secret>" }

    /// Whether `candidate` is the secret; the time taken depends on neither's content.
    public func matches(_ candidate: String) -> Bool {
        let given = Array(candidate.utf8)
        var difference = UInt8(truncatingIfNeeded: given.count ^ bytes.count)
        for index in bytes.indices {
            difference |= bytes[index] ^ (index < given.count ? given[index] : 0)
        }
        return difference == 0
    }

    /// The environment variable the secret may come from.
    public static let environmentVariable = "SPLITFETCH_RPC_SECRET"

    /// The secret from `file`, else from the environment, else from `stateDirectory/secret`,
    /// created there (mode 0600) at first start.
    public static func load(file: FilePath?, stateDirectory: FilePath) throws(RPCError) -> Secret {
        if let file { return try Secret(read(file)) }
        if let value = getenv(environmentVariable) { return try Secret(String(cString: value)) }
        let path = stateDirectory.appending("secret")
        if access(path.string, F_OK) == 0 { return try Secret(read(path)) }
        var random = SystemRandomNumberGenerator()
        let text = (0..<4).map { _ in
            let hex = String(random.next() as UInt64, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
        let fd = open(path.string, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw RPCError.failed("cannot create \(path): \(Errno(rawValue: errno))") }
        defer { close(fd) }
        let line = Array((text + "\n").utf8)
        guard write(fd, line, line.count) == line.count, fsync(fd) == 0 else {
            throw RPCError.failed("cannot write \(path): \(Errno(rawValue: errno))")
        }
        return try Secret(text)
    }

    /// A secret file's text; it must not be readable by others.
    static func read(_ path: FilePath) throws(RPCError) -> String {
        let fd = open(path.string, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw RPCError.failed("cannot read the secret file \(path): \(Errno(rawValue: errno))") }
        defer { close(fd) }
        var stats = stat()
        guard fstat(fd, &stats) == 0 else { throw RPCError.failed("cannot read the secret file \(path)") }
        guard stats.st_mode & 0o077 == 0 else {
            throw RPCError.failed("the secret file \(path) is readable by others; chmod 600 it")
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = Glibc.read(fd, &buffer, buffer.count)
        guard count > 0 else { throw RPCError.failed("the secret file \(path) is empty") }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }
}

extension String {
    var trimmingWhitespace: String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}
