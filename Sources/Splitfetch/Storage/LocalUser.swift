#if canImport(Glibc)
import Glibc
#endif

/// The user the process runs as: their name (what `ssh` and `psql` log in as when told no
/// other) and their home directory (`HOME`, else the password database's).
package enum LocalUser {
    package static var name: String? {
        guard let entry = getpwuid(getuid()), let name = entry.pointee.pw_name else { return nil }
        return String(cString: name)
    }

    package static var homeDirectory: String? {
        if let home = getenv("HOME") { return String(cString: home) }
        guard let entry = getpwuid(getuid()), let dir = entry.pointee.pw_dir else { return nil }
        return String(cString: dir)
    }
}
