import FoundationEssentials
import Splitfetch

#if canImport(Glibc)
import Glibc
#endif

/// Where a PostgreSQL queue is: `postgres://USER@HOST:PORT/DATABASE`, with what the URL leaves
/// out taken from libpq's environment variables (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`), as
/// `psql` takes them. The password comes from a file or `PGPASSWORD`, never from the URL: a URL
/// is a command-line argument, and those are in `/proc/PID/cmdline` for every local user to read.
public struct PostgresAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var user: String
    public var database: String
    /// A secret: never in ``description``.
    public var password: String?

    /// `postgres://user@host:port/database`, without the password.
    public var description: String {
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "postgres://\(user)@\(shownHost):\(port)/\(database)"
    }

    public init(host: String, port: Int, user: String, database: String, password: String?) {
        self.host = host
        self.port = port
        self.user = user
        self.database = database
        self.password = password
    }

    /// Reads `text` (`postgres://` or `postgresql://`), then the environment.
    ///
    /// - Parameters:
    ///   - environment: the variables to read (`PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`,
    ///     `PGPASSWORD`); the process's by default.
    ///   - password: the password read from a file, before `PGPASSWORD`.
    /// - Throws: ``AddressError`` naming what is wrong.
    public static func parse(_ text: String, environment: [String: String] = ProcessEnvironment.current,
                             password given: String? = nil) throws(AddressError) -> PostgresAddress {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), scheme == "postgres" || scheme == "postgresql" else {
            throw .invalid("\(Self.redacted(text)) is not a postgres:// URL")
        }
        if url.password != nil {
            throw .invalid("the queue's URL has a password, which would show in the process list: put it in --queue-password-file or PGPASSWORD")
        }
        let host = url.host.flatMap { $0.isEmpty ? nil : $0 } ?? environment["PGHOST"] ?? "127.0.0.1"
        let port = url.port ?? environment["PGPORT"].map { Int($0) ?? -1 } ?? 5432
        guard (1...65535).contains(port) else {
            throw .invalid("the queue's port is not a port number")
        }
        guard let user = url.user.flatMap({ $0.isEmpty ? nil : $0.removingPercentEncoding ?? $0 }) ?? environment["PGUSER"]
                ?? LocalUser.name else {
            throw .invalid("the queue's URL names no user, and neither does PGUSER")
        }
        var database = String(url.path.drop { $0 == "/" })
        if database.isEmpty { database = environment["PGDATABASE"] ?? user }
        return PostgresAddress(host: host, port: port, user: user, database: database, password: given ?? environment["PGPASSWORD"])
    }

    /// `text` with anything between `://` and `@` dropped: for messages about a URL refused.
    static func redacted(_ text: String) -> String {
        guard let scheme = text.range(of: "://"), let at = text[scheme.upperBound...].firstIndex(of: "@") else { return text }
        return String(text[..<scheme.upperBound]) + "…" + String(text[at...])
    }

    public enum AddressError: Error, CustomStringConvertible, Equatable {
        case invalid(String)
        public var description: String {
            switch self {
            case .invalid(let message): message
            }
        }
    }
}

/// The process's environment variables, read once per call.
public enum ProcessEnvironment {
    public static var current: [String: String] {
        var variables: [String: String] = [:]
        var entry = environ
        while let pointer = entry.pointee {
            let pair = String(cString: pointer)
            if let equals = pair.firstIndex(of: "=") {
                variables[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
            }
            entry += 1
        }
        return variables
    }
}
