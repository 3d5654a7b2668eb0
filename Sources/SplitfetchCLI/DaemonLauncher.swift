import Glibc

/// `splitfetch serve …` runs the daemon, a binary of its own (`splitfetch-daemon`), so that the
/// one-shot tool links none of its server, database or WebSocket code and starts as fast.
enum DaemonLauncher {
    /// The subcommands that belong to the daemon's binary.
    static let subcommands: Set<String> = ["serve", "add", "ls", "pause", "resume", "rm", "watch"]

    /// Replaces this process with the daemon's binary if `arguments` start with one of its
    /// subcommands; returns only if they do not, or with an error message if it cannot be run.
    static func execIfDaemonCommand(_ arguments: [String]) -> String? {
        guard arguments.count > 1, subcommands.contains(arguments[1]) else { return nil }
        let beside = executableDirectory().map { $0 + "/splitfetch-daemon" }
        let program = beside.flatMap { access($0, X_OK) == 0 ? $0 : nil } ?? "splitfetch-daemon"
        var argv: [UnsafeMutablePointer<CChar>?] = ([program] + arguments.dropFirst()).map { strdup($0) }
        argv.append(nil)
        execvp(program, &argv)
        return "cannot run \(program): \(String(cString: strerror(errno))) (it is built beside splitfetch: "
            + "swift build --product splitfetch-daemon)"
    }

    /// The directory of the running executable (`/proc/self/exe`).
    static func executableDirectory() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        let path = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let slash = path.lastIndex(of: "/") else { return nil }
        return String(path[..<slash])
    }
}
