import DownloadCore
import FoundationEssentials
import Splitfetch

/// The shapes of aria2's answers and parameters: a job's status, URIs, windows of lists, options.
extension Aria2RPC {

    func gid(_ p: [JSONValue]) throws(RPCError) -> String {
        guard let gid = p.first?.string, !gid.isEmpty, gid.count <= 64 else { throw RPCError.invalidParams("a GID is expected") }
        return gid
    }

    /// aria2's `offset, num` window: a negative offset counts from the end, in reverse order.
    static func window(_ list: [Job], _ p: [JSONValue]) throws(RPCError) -> ArraySlice<Job> {
        guard p.count >= 2, let offset = p[0].integer, let count = p[1].integer, count >= 0 else {
            throw RPCError.invalidParams("offset and num are expected")
        }
        if offset >= 0 {
            guard offset < list.count else { return [] }
            return list[offset..<min(list.count, offset + count)]
        }
        let reversed = Array(list.reversed())
        let start = -offset - 1
        guard start < reversed.count else { return [] }
        return reversed[start..<min(reversed.count, start + count)]
    }

    static func keys(_ value: JSONValue?) -> Set<String>? {
        guard let array = value?.array else { return nil }
        return Set(array.compactMap(\.string))
    }

    static func options(_ value: JSONValue?) throws(RPCError) -> [String: String] {
        guard let value, value != .null else { return [:] }
        guard let object = value.object else { throw RPCError.invalidParams("options must be an object") }
        var options: [String: String] = [:]
        for (name, value) in object {
            switch value {
            case .string(let s): options[name] = s
            case .number: options[name] = value.integer.map(String.init) ?? "\(value)"
            case .bool(let b): options[name] = b ? "true" : "false"
            case .array(let items): options[name] = items.compactMap(\.string).joined(separator: "\n")
            default: throw RPCError.invalidParams("option \(name.prefix(64)) must be a string")
            }
        }
        return options
    }

    static func uris(_ job: Job) -> [JSONValue] {
        job.uris.enumerated().map { ["uri": .string($1), "status": $0 == 0 ? "used" : "waiting"] }
    }

    static func json(_ value: some Encodable) throws(RPCError) -> JSONValue {
        do {
            return try JSONDecoder().decode(JSONValue.self, from: JSONEncoder().encode(value))
        } catch {
            throw RPCError.failed("\(error)")
        }
    }

    /// aria2's status of one job, with only `keys` if given.
    func status(_ gid: String, keys: Set<String>?) -> JSONValue? {
        guard let job = daemon.job(gid) else { return nil }
        let snapshot = job.state.isFinal ? nil : daemon.queue.snapshot(gid)
        let total = snapshot?.progress?.totalBytes ?? job.totalLength ?? 0
        let done = snapshot?.progress?.bytesWritten ?? job.completedLength ?? 0
        let speed = job.state == .active ? Int64(snapshot?.progress?.bytesPerSecond ?? 0) : 0
        let connections = job.state == .active ? snapshot?.progress?.activeConnections ?? 0 : 0
        let status: String = switch job.state {
        case .failed: "error"
        case let state: state.rawValue
        }
        let file: JSONValue = ["index": "1", "path": .string(job.destination), "length": .string(String(total)),
                               "completedLength": .string(String(done)), "selected": "true", "uris": .array(Self.uris(job))]
        var fields: [String: JSONValue] = [
            "gid": .string(gid), "status": .string(status), "totalLength": .string(String(total)),
            "completedLength": .string(String(done)), "uploadLength": "0", "downloadSpeed": .string(String(speed)),
            "uploadSpeed": "0", "connections": .string(String(connections)), "numPieces": "1",
            "pieceLength": .string(String(max(total, 1))), "dir": .string(FilePathLite.parent(job.destination)),
            "files": [file], "verifiedLength": "0", "verifyIntegrityPending": "false", "numSeeders": "0", "seeder": "false",
        ]
        if job.state == .failed {
            fields["errorCode"] = "1"
            fields["errorMessage"] = .string(job.errorMessage ?? "failed")
        } else if job.state == .complete || job.state == .removed {
            fields["errorCode"] = "0"
        }
        if let sha256 = job.sha256 { fields["splitfetch.sha256"] = .string(sha256) }
        fields["splitfetch.priority"] = .string(String(job.priority))
        if let position = snapshot?.position { fields["splitfetch.position"] = .string(String(position)) }
        if let keys { fields = fields.filter { keys.contains($0.key) } }
        return .object(fields)
    }
}

/// Path text without Foundation.
enum FilePathLite {
    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func lastComponent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}
