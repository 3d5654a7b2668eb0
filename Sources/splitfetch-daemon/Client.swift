import ArgumentParser
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SplitfetchDaemon

/// A client command's failure: printed as `Error: …`, status 1, without the usage.
struct ClientFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// What every client command takes: where the daemon's state is (its address and secret).
struct ClientOptions: ParsableArguments {
    @Option(help: "The daemon's state directory (default: as `serve`'s).")
    var stateDir: String?
    @Option(help: "A file holding the RPC secret, if not the state directory's.")
    var secretFile: String?

    /// A client for the running daemon; fails with a clear message when none runs.
    func client() throws -> RPCClient {
        let state = stateDir ?? Serve.defaultStateDirectory()
        guard let address = try? String(contentsOfFile: state + "/address", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
              !address.isEmpty else {
            throw ClientFailure("no daemon runs with the state directory \(state) (start one with `splitfetch serve`)")
        }
        let secretPath = secretFile ?? state + "/secret"
        let secret: String
        if secretFile == nil, let value = ProcessInfo.processInfo.environment[Secret.environmentVariable] {
            secret = value
        } else {
            guard let text = try? String(contentsOfFile: secretPath, encoding: .utf8) else {
                throw ClientFailure("cannot read the secret \(secretPath)")
            }
            secret = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        // The daemon is local: never send its token through a proxy named in the environment
        // (libcurl, under URLSession, would otherwise honour http_proxy and all_proxy).
        for name in ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "https_proxy", "HTTPS_PROXY"] { unsetenv(name) }
        return RPCClient(address: address, secret: secret)
    }
}

/// aria2's JSON-RPC over HTTP, as the client commands use it.
struct RPCClient {
    let address: String
    let secret: String

    /// Calls `method` with the token and `params`.
    func call(_ method: String, _ params: [JSONValue] = []) async throws -> JSONValue {
        let body: JSONValue = ["jsonrpc": "2.0", "id": "c", "method": .string(method), "params": .array([.string("token:" + secret)] + params)]
        return try await post(body)
    }

    /// Several calls in one `system.multicall`: their results, in order.
    func multicall(_ calls: [(String, [JSONValue])]) async throws -> [Result<JSONValue, RPCError>] {
        let list: [JSONValue] = calls.map { ["methodName": .string($0.0), "params": .array([.string("token:" + secret)] + $0.1)] }
        let answer = try await post(["jsonrpc": "2.0", "id": "c", "method": "system.multicall", "params": [.array(list)]])
        return (answer.array ?? []).map { entry in
            if let value = entry.array?.first { return .success(value) }
            return .failure(RPCError(code: entry.object?["code"]?.integer ?? 1, message: entry.object?["message"]?.string ?? "failed"))
        }
    }

    private func post(_ body: JSONValue) async throws -> JSONValue {
        guard let url = URL(string: "http://\(address)/jsonrpc") else { throw ClientFailure("bad daemon address \(address)") }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data(body.serialized())
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        let data: Data
        do {
            (data, _) = try await URLSession.shared.data(for: request)
        } catch {
            throw ClientFailure("the daemon at \(address) does not answer (\(error.localizedDescription))")
        }
        let answer = try JSONValue.parse(Array(data))
        if let error = answer.object?["error"]?.object {
            throw RPCError(code: error["code"]?.integer ?? 1, message: error["message"]?.string ?? "failed")
        }
        return answer.object?["result"] ?? .null
    }
}

struct Add: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Add downloads to the running daemon; prints each one's ID.")
    @OptionGroup var client: ClientOptions
    @Argument(help: "URLs, one download each.") var urls: [String]
    @Option(name: .shortAndLong, help: "Directory under the daemon's download root.") var dir: String?
    @Option(name: .shortAndLong, help: "File name (one URL only).") var out: String?
    @Option(help: "A mirror of the URL (one URL only; repeatable).") var mirror: [String] = []
    @Option(help: "The file's digest, ALGORITHM=HEX (one URL only).") var checksum: String?
    @Option(name: [.customShort("n"), .long], help: "Connections.") var connections: Int?
    @Flag(help: "Add paused.") var paused = false

    func validate() throws {
        if urls.count > 1 && (out != nil || !mirror.isEmpty || checksum != nil) {
            throw ValidationError("--out, --mirror and --checksum go with one URL")
        }
    }

    func run() async throws {
        let rpc = try client.client()
        var options: [String: JSONValue] = [:]
        if let dir { options["dir"] = .string(dir) }
        if let out { options["out"] = .string(out) }
        if let checksum { options["checksum"] = .string(checksum) }
        if let connections { options["split"] = .string(String(connections)) }
        if paused { options["pause"] = "true" }
        let results = try await rpc.multicall(urls.map { ("aria2.addUri", [.array(([$0] + mirror).map { .string($0) }), .object(options)]) })
        var failed = false
        for (url, result) in zip(urls, results) {
            switch result {
            case .success(let gid): print(gid.string ?? "")
            case .failure(let error):
                failed = true
                FileHandle.standardError.write(Data("splitfetch add: \(url): \(error.message)\n".utf8))
            }
        }
        if failed { throw ExitCode(1) }
    }
}

/// One download as the list shows it.
struct Listed {
    let fields: [String: JSONValue]
    var gid: String { fields["gid"]?.string ?? "" }
    var status: String { fields["status"]?.string ?? "" }
    func number(_ key: String) -> Int64 { Int64(fields[key]?.string ?? "") ?? 0 }
    var name: String {
        let path = fields["files"]?.array?.first?.object?["path"]?.string ?? ""
        return path.split(separator: "/").last.map(String.init) ?? path
    }
}

func listAll(_ rpc: RPCClient) async throws -> [Listed] {
    let keys: JSONValue = ["gid", "status", "totalLength", "completedLength", "downloadSpeed", "files", "errorMessage", "connections"]
    // One multicall: the three lists as of one moment.
    let results = try await rpc.multicall([("aria2.tellActive", [keys]), ("aria2.tellWaiting", [0, 100_000, keys]),
                                           ("aria2.tellStopped", [0, 100_000, keys])])
    return try results.flatMap { try $0.get().array ?? [] }.compactMap { $0.object.map(Listed.init) }
}

func human(_ bytes: Int64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"]
    var value = Double(bytes), unit = 0
    while value >= 1024 && unit < units.count - 1 { value /= 1024; unit += 1 }
    return unit == 0 ? "\(bytes) B" : String(format: "%.1f %@", value, units[unit])
}

func row(_ item: Listed) -> String {
    let total = item.number("totalLength"), done = item.number("completedLength")
    let percent = total > 0 ? String(format: "%5.1f%%", Double(done) * 100 / Double(total)) : "    –"
    let speed = item.status == "active" ? human(item.number("downloadSpeed")) + "/s" : ""
    return [item.gid, item.status.padding(toLength: 8, withPad: " ", startingAt: 0), percent,
            human(total).padding(toLength: 10, withPad: " ", startingAt: 0), speed.padding(toLength: 12, withPad: " ", startingAt: 0),
            item.name].joined(separator: "  ")
}

struct List: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ls", abstract: "List the daemon's downloads.")
    @OptionGroup var client: ClientOptions
    @Flag(help: "One JSON object per line (aria2's status fields).") var json = false

    func run() async throws {
        let items = try await listAll(try client.client())
        for item in items {
            print(json ? String(decoding: JSONValue.object(item.fields).serialized(), as: UTF8.self) : row(item))
        }
    }
}

/// pause, resume and rm: one method on each ID.
protocol EachID: AsyncParsableCommand {
    var client: ClientOptions { get }
    var ids: [String] { get }
    static var method: String { get }
}

extension EachID {
    func run() async throws {
        let results = try await client.client().multicall(ids.map { (Self.method, [.string($0)]) })
        var failed = false
        for (id, result) in zip(ids, results) {
            if case .failure(let error) = result {
                failed = true
                FileHandle.standardError.write(Data("splitfetch: \(id): \(error.message)\n".utf8))
            }
        }
        if failed { throw ExitCode(1) }
    }
}

struct Pause: EachID {
    static let configuration = CommandConfiguration(abstract: "Pause downloads (their data is kept).")
    static let method = "aria2.pause"
    @OptionGroup var client: ClientOptions
    @Argument(help: "Download IDs.") var ids: [String]
}

struct Resume: EachID {
    static let configuration = CommandConfiguration(abstract: "Resume paused downloads.")
    static let method = "aria2.unpause"
    @OptionGroup var client: ClientOptions
    @Argument(help: "Download IDs.") var ids: [String]
}

struct Remove: EachID {
    static let configuration = CommandConfiguration(commandName: "rm", abstract: "Remove downloads (a finished one's result; a running one stops, its partial file kept).")
    static let method = "aria2.remove"
    @OptionGroup var client: ClientOptions
    @Argument(help: "Download IDs.") var ids: [String]

    func run() async throws {
        let rpc = try client.client()
        var failed = false
        for id in ids {
            // A finished download's result is removed; an unfinished one is removed from the queue.
            let status = try? await rpc.call("aria2.tellStatus", [.string(id), ["status"]]).object?["status"]?.string
            let method = ["complete", "error", "removed"].contains(status ?? "") ? "aria2.removeDownloadResult" : Self.method
            do {
                _ = try await rpc.call(method, [.string(id)])
            } catch {
                failed = true
                FileHandle.standardError.write(Data("splitfetch rm: \(id): \(error)\n".utf8))
            }
        }
        if failed { throw ExitCode(1) }
    }
}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Follow the daemon's downloads: a line per change of state, and progress (every second).",
        discussion: "Stops when interrupted, or with --until-idle once nothing runs or waits.")
    @OptionGroup var client: ClientOptions
    @Flag(help: "JSON lines: {\"gid\", \"status\", \"completedLength\", \"totalLength\", \"downloadSpeed\"} per change.") var json = false
    @Flag(help: "Return once no download is active or waiting.") var untilIdle = false
    @Option(help: "Seconds between looks.") var interval: Double = 1

    func run() async throws {
        let rpc = try client.client()
        var last: [String: String] = [:]
        while true {
            let items = try await listAll(rpc)
            for item in items {
                let key = item.status + (item.status == "active" ? ":\(item.number("completedLength"))" : "")
                guard last[item.gid] != key else { continue }
                last[item.gid] = key
                if json {
                    let line: JSONValue = ["gid": .string(item.gid), "status": .string(item.status),
                                           "completedLength": .number(Double(item.number("completedLength"))),
                                           "totalLength": .number(Double(item.number("totalLength"))),
                                           "downloadSpeed": .number(Double(item.number("downloadSpeed")))]
                    print(String(decoding: line.serialized(), as: UTF8.self))
                } else {
                    print(row(item))
                }
            }
            fflush(nil)
            if untilIdle, !items.contains(where: { $0.status == "active" || $0.status == "waiting" }) { return }
            try await Task.sleep(for: .seconds(max(0.1, interval)))
        }
    }
}
