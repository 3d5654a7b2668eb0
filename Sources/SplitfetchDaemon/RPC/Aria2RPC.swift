import DownloadCore
import FoundationEssentials
import Splitfetch

/// aria2's JSON-RPC methods over the daemon: method names, parameter shapes, GIDs, the
/// `token:SECRET` first parameter, and the shapes of aria2's answers (numbers as strings).
public struct Aria2RPC: Sendable {
    public let daemon: Daemon
    let secret: Secret

    public init(daemon: Daemon, secret: Secret) {
        self.daemon = daemon
        self.secret = secret
    }

    /// Methods that take no token (aria2's own exception: they only name methods).
    static let open: Set<String> = ["system.listMethods", "system.listNotifications"]

    static let methods: [String] = [
        "aria2.addUri", "aria2.remove", "aria2.forceRemove", "aria2.pause", "aria2.pauseAll", "aria2.forcePause",
        "aria2.forcePauseAll", "aria2.unpause", "aria2.unpauseAll", "aria2.tellStatus", "aria2.getUris", "aria2.getFiles",
        "aria2.getServers", "aria2.tellActive", "aria2.tellWaiting", "aria2.tellStopped", "aria2.changePosition",
        "aria2.changeOption", "aria2.getOption", "aria2.changeGlobalOption", "aria2.getGlobalOption", "aria2.getGlobalStat",
        "aria2.purgeDownloadResult", "aria2.removeDownloadResult", "aria2.getVersion", "aria2.getSessionInfo",
        "aria2.shutdown", "aria2.forceShutdown", "aria2.saveSession", "system.multicall", "system.listMethods",
        "system.listNotifications", "splitfetch.tellConnections", "splitfetch.getStatistics", "splitfetch.watchProgress", "splitfetch.getFleetStat",
    ]

    static let notifications = ["aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStop",
                                "aria2.onDownloadComplete", "aria2.onDownloadError", "splitfetch.onProgress"]

    /// The outcome of one HTTP body or WebSocket message.
    public struct Reply: Sendable {
        /// The JSON to send back.
        public var body: [UInt8]
        /// A call was refused for its token (the caller slows the next answer down).
        public var unauthorized: Bool
        /// `aria2.shutdown` was called.
        public var shutdown: Bool
        /// `splitfetch.watchProgress` was called: the WebSocket it came on gets
        /// `splitfetch.onProgress` notifications from now on.
        public var watchProgress = false
    }

    /// Answers one request or a batch.
    public func reply(to body: [UInt8]) async -> Reply {
        var context = CallContext()
        let answer: JSONValue
        if let request = try? JSONValue.parse(body) {
            if case .array(let batch) = request {
                if batch.isEmpty {
                    answer = Self.response(id: .null, .failure(.invalidRequest("empty batch")))
                } else {
                    var answers: [JSONValue] = []
                    for item in batch.prefix(1000) { answers.append(await respond(to: item, &context)) }
                    answer = .array(answers)
                }
            } else {
                answer = await respond(to: request, &context)
            }
        } else {
            answer = Self.response(id: .null, .failure(.parseError))
        }
        let reply = Reply(body: answer.serialized(), unauthorized: context.unauthorized, shutdown: context.shutdown,
                          watchProgress: context.watchProgress)
        if body.count >= HeapTrim.requestBytes { HeapTrim.soon() }
        return reply
    }

    struct CallContext {
        var unauthorized = false
        var shutdown = false
        var watchProgress = false
    }

    static func response(id: JSONValue, _ result: Result<JSONValue, RPCError>) -> JSONValue {
        switch result {
        case .success(let value): ["jsonrpc": "2.0", "id": id, "result": value]
        case .failure(let error):
            ["jsonrpc": "2.0", "id": id, "error": ["code": .number(Double(error.code)), "message": .string(error.message)]]
        }
    }

    private func respond(to request: JSONValue, _ context: inout CallContext) async -> JSONValue {
        guard case .object(let fields) = request else {
            return Self.response(id: .null, .failure(.invalidRequest("not an object")))
        }
        let id = fields["id"] ?? .null
        guard let method = fields["method"]?.string else {
            return Self.response(id: id, .failure(.invalidRequest("no method")))
        }
        let params: [JSONValue]
        switch fields["params"] {
        case nil, .null?: params = []
        case .array(let values)?: params = values
        default: return Self.response(id: id, .failure(.invalidRequest("params is not an array")))
        }
        return Self.response(id: id, await call(method, params, &context))
    }

    /// Runs one method with its parameters (the token first, unless the method is open).
    func call(_ method: String, _ given: [JSONValue], _ context: inout CallContext) async -> Result<JSONValue, RPCError> {
        var params = given
        if method == "system.multicall" {
            return await multicall(params, &context)
        }
        if !Self.open.contains(method) {
            guard let token = params.first?.string, token.hasPrefix("token:"), secret.matches(String(token.dropFirst(6))) else {
                context.unauthorized = true
                return .failure(.unauthorized)
            }
            params.removeFirst()
        }
        do {
            return .success(try await dispatch(method, params, &context))
        } catch {
            return .failure(error)
        }
    }

    /// aria2's `system.multicall`: the calls in order, each answered as `[result]` or an error.
    /// Consecutive `addUri`s are added together, in batches that share a commit (``Daemon/add(_:)``).
    private func multicall(_ params: [JSONValue], _ context: inout CallContext) async -> Result<JSONValue, RPCError> {
        guard let calls = params.first?.array else { return .failure(.invalidParams("system.multicall takes an array of calls")) }
        var results: [JSONValue] = []
        var adds: [(uris: [String], options: [String: String], position: Int?)] = []
        func flush() async {
            guard !adds.isEmpty else { return }
            for result in await daemon.add(adds) { results.append(Self.multicallEntry(result.map { .string($0) })) }
            adds = []
        }
        for call in calls.prefix(10_000) {
            guard let name = call.object?["methodName"]?.string, name != "system.multicall" else {
                await flush()
                results.append(["code": 1, "message": "each call needs a methodName (and no nested system.multicall)"])
                continue
            }
            let params = call.object?["params"]?.array ?? []
            if name == "aria2.addUri", let token = params.first?.string, token.hasPrefix("token:"),
               secret.matches(String(token.dropFirst(6))), let uris = params.dropFirst().first?.array?.compactMap(\.string),
               let options = try? Self.options(params.count > 2 ? params[2] : nil) {
                adds.append((uris, options, params.count > 3 ? params[3].integer : nil))
                continue
            }
            await flush()
            results.append(Self.multicallEntry(await self.call(name, params, &context)))
        }
        await flush()
        return .success(.array(results))
    }

    static func multicallEntry(_ result: Result<JSONValue, RPCError>) -> JSONValue {
        switch result {
        case .success(let value): [value]
        case .failure(let error): ["code": .number(Double(error.code)), "message": .string(error.message)]
        }
    }

    // MARK: - Methods

    private func dispatch(_ method: String, _ p: [JSONValue], _ context: inout CallContext) async throws(RPCError) -> JSONValue {
        switch method {
        case "aria2.addUri":
            guard let uris = p.first?.array?.compactMap(\.string), !uris.isEmpty else {
                throw RPCError.invalidParams("addUri takes an array of URIs first")
            }
            let options = try Self.options(p.count > 1 ? p[1] : nil)
            let position = p.count > 2 ? p[2].integer : nil
            return .string(try await daemon.add(uris: uris, options: options, position: position))
        case "aria2.remove", "aria2.forceRemove":
            let gid = try gid(p)
            try await daemon.remove(gid)
            return .string(gid)
        case "aria2.pause", "aria2.forcePause":
            let gid = try gid(p)
            try await daemon.pause(gid)
            return .string(gid)
        case "aria2.unpause":
            let gid = try gid(p)
            try await daemon.unpause(gid)
            return .string(gid)
        case "aria2.pauseAll", "aria2.forcePauseAll", "aria2.unpauseAll":
            try await daemon.pauseAll(method != "aria2.unpauseAll")
            return "OK"
        case "aria2.tellStatus":
            let gid = try gid(p)
            guard let status = status(gid, keys: Self.keys(p.count > 1 ? p[1] : nil)) else { throw RPCError.notFound(gid) }
            return status
        case "aria2.getUris":
            guard let job = daemon.job(try gid(p)) else { throw RPCError.notFound(try gid(p)) }
            return .array(Self.uris(job))
        case "aria2.getFiles":
            guard let files = status(try gid(p), keys: ["files"])?.object?["files"] else { throw RPCError.notFound(try gid(p)) }
            return files
        case "aria2.getServers":
            let gid = try gid(p)
            guard let job = daemon.job(gid), job.state == .active, let snapshot = daemon.queue.snapshot(gid) else {
                throw RPCError.failed("Active Download not found for GID#\(gid)")
            }
            let speed = Int64(snapshot.progress?.bytesPerSecond ?? 0)
            let servers: [JSONValue] = job.uris.prefix(1).map {
                ["uri": .string($0), "currentUri": .string($0), "downloadSpeed": .string(String(speed))]
            }
            return [["index": "1", "servers": .array(servers)]]
        case "aria2.tellActive":
            let keys = Self.keys(p.first)
            return .array(daemon.unfinished([.active], offset: 0, count: .max).compactMap { status($0.gid, keys: keys) })
        case "aria2.tellWaiting":
            guard p.count >= 2, let offset = p[0].integer, let count = p[1].integer, count >= 0 else {
                throw RPCError.invalidParams("offset and num are expected")
            }
            let keys = Self.keys(p.count > 2 ? p[2] : nil)
            return .array(daemon.unfinished([.waiting, .paused], offset: offset, count: count).compactMap { status($0.gid, keys: keys) })
        case "aria2.tellStopped":
            let list = daemon.allJobs().filter(\.state.isFinal).sorted { ($0.finishedAt ?? 0, $0.order) < ($1.finishedAt ?? 0, $1.order) }
            return .array(try Self.window(list, p).compactMap { status($0.gid, keys: Self.keys(p.count > 2 ? p[2] : nil)) })
        case "aria2.changePosition":
            let gid = try gid(p)
            guard p.count >= 3, let offset = p[1].integer, let how = p[2].string else {
                throw RPCError.invalidParams("changePosition takes a GID, a position and POS_SET, POS_CUR or POS_END")
            }
            let live = daemon.unfinished([.waiting, .paused, .active], offset: 0, count: .max)
            guard let current = live.firstIndex(where: { $0.gid == gid }) else { throw RPCError.notFound(gid) }
            let target: Int = switch how {
            case "POS_SET": offset
            case "POS_CUR": current + offset
            case "POS_END": live.count - 1 + offset
            default: throw RPCError.invalidParams("how must be POS_SET, POS_CUR or POS_END")
            }
            let moved = try await daemon.move(gid, to: max(0, min(live.count - 1, target)))
            return .number(Double(moved))
        case "aria2.changeOption":
            let gid = try gid(p)
            let options = try Self.options(p.count > 1 ? p[1] : nil)
            guard daemon.job(gid).map({ !$0.state.isFinal }) == true else { throw RPCError.notFound(gid) }
            for (name, _) in options where name != "max-download-limit" && name != "priority" {
                throw RPCError.invalidParams("option \(name.prefix(64)) cannot be changed while a download is in the queue; "
                    + "only max-download-limit and priority can")
            }
            if let value = options["priority"] {
                let priority = try Aria2Options.count("priority", value, in: -1000...1000)
                _ = daemon.queue.setPriority(gid, priority)
                try await daemon.update(gid) { job in
                    job.priority = priority
                    job.options["priority"] = value
                }
            }
            if let value = options["max-download-limit"] {
                let rate = try Aria2Options.size("max-download-limit", value, atLeast: 0)
                _ = daemon.queue.setBytesPerSecond(rate == 0 ? nil : rate, for: gid)
                try await daemon.update(gid) { job in
                    job.bytesPerSecond = rate == 0 ? nil : rate
                    job.options["max-download-limit"] = value
                }
            }
            return "OK"
        case "aria2.getOption":
            let gid = try gid(p)
            guard let job = daemon.job(gid) else { throw RPCError.notFound(gid) }
            var options = daemon.state.withLockedValue { $0.globalOptions }
            options.removeValue(forKey: "max-concurrent-downloads")
            options.removeValue(forKey: "max-overall-download-limit")
            options["dir"] = FilePathLite.parent(job.destination)
            options["out"] = FilePathLite.lastComponent(job.destination)
            for (name, value) in job.options where name != "dir" && name != "out" { options[name] = value }
            return .object(options.mapValues { .string($0) })
        case "aria2.changeGlobalOption":
            try changeGlobal(try Self.options(p.first))
            return "OK"
        case "aria2.getGlobalOption":
            var options = daemon.state.withLockedValue { $0.globalOptions }
            options["schedule"] = daemon.limits.scheduleText
            return .object(options.mapValues { .string($0) })
        case "aria2.getGlobalStat":
            let counts = daemon.counts()
            let active = daemon.unfinished([.active], offset: 0, count: .max)
            let speed = active.reduce(0.0) { $0 + (daemon.queue.snapshot($1.gid)?.progress?.bytesPerSecond ?? 0) }
            let stopped = (counts[.complete] ?? 0) + (counts[.failed] ?? 0) + (counts[.removed] ?? 0)
            return ["downloadSpeed": .string(String(Int64(speed))), "uploadSpeed": "0",
                    "numActive": .string(String(counts[.active] ?? 0)),
                    "numWaiting": .string(String((counts[.waiting] ?? 0) + (counts[.paused] ?? 0))),
                    "numStopped": .string(String(stopped)), "numStoppedTotal": .string(String(stopped))]
        case "aria2.purgeDownloadResult":
            try await daemon.purge(daemon.allJobs().filter(\.state.isFinal).map(\.gid))
            return "OK"
        case "aria2.removeDownloadResult":
            let gid = try gid(p)
            guard let job = daemon.job(gid), job.state.isFinal else { throw RPCError.failed("Could not remove download result of GID#\(gid)") }
            try await daemon.purge([gid])
            return "OK"
        case "aria2.getVersion":
            return ["version": .string(splitfetchVersion), "enabledFeatures": ["HTTPS", "Message Digest", "Async DNS"]]
        case "aria2.getSessionInfo":
            return ["sessionId": .string(daemon.sessionID)]
        case "aria2.saveSession":
            return "OK"  // every change is committed as it happens
        case "aria2.shutdown", "aria2.forceShutdown":
            context.shutdown = true
            return "OK"
        case "system.listMethods":
            return .array(Self.methods.map { .string($0) })
        case "system.listNotifications":
            return .array(Self.notifications.map { .string($0) })
        case "splitfetch.tellConnections":
            let gid = try gid(p)
            guard daemon.job(gid) != nil else { throw RPCError.notFound(gid) }
            return try Self.json(daemon.queue.snapshot(gid)?.progress?.connections ?? [])
        case "splitfetch.watchProgress":
            // Splitfetch's own: only a WebSocket can be sent notifications.
            context.watchProgress = true
            return "OK"
        case "splitfetch.getFleetStat":
            // Splitfetch's own: this daemon's part in a fleet (an error without a shared queue).
            guard let fleet = daemon.fleet else { throw RPCError.failed("this daemon's queue is its own (no --queue)") }
            let (statistics, held) = fleet.state.withLockedValue { ($0.statistics, $0.held.count) }
            var answer: [String: JSONValue] = [
                "worker": .string(fleet.worker), "held": .string(String(held)),
                "claims": .string(String(statistics.claims)), "claimedJobs": .string(String(statistics.claimedJobs)),
                "claimMilliseconds": .string(String(format: "%.3f", statistics.claimSeconds * 1000)),
                "renewals": .string(String(statistics.renewals)), "leasesLost": .string(String(statistics.leasesLost)),
            ]
            if let slots = fleet.slots?.statistics {
                answer["slotQueries"] = .string(String(slots.queries))
                answer["slotsGranted"] = .string(String(slots.granted))
                answer["slotMilliseconds"] = .string(String(format: "%.3f", slots.seconds * 1000))
            }
            return .object(answer)
        case "splitfetch.getStatistics":
            let gid = try gid(p)
            guard let job = daemon.job(gid) else { throw RPCError.notFound(gid) }
            guard let statistics = daemon.queue.snapshot(gid)?.statistics else {
                return ["gid": .string(gid), "state": .string(job.state.rawValue), "sha256": job.sha256.map { .string($0) } ?? .null]
            }
            return try Self.json(statistics)
        default:
            throw RPCError.methodNotFound(method)
        }
    }

    private func changeGlobal(_ options: [String: String]) throws(RPCError) {
        for (name, value) in options.sorted(by: { $0.key < $1.key }) {
            switch name {
            case "max-overall-download-limit":
                let rate = try Aria2Options.size(name, value, atLeast: 0)
                daemon.limits.setOwn(bytesPerSecond: .some(rate == 0 ? nil : rate))
            case "max-concurrent-downloads":
                daemon.limits.setOwn(maximumActive: try Aria2Options.count(name, value, in: 1...1000))
            case "schedule":
                // Splitfetch's own: the limit by day and time (`--schedule`); empty clears it.
                do {
                    daemon.limits.setSchedule(value.isEmpty ? nil : try BandwidthSchedule(parsing: value), text: value)
                } catch {
                    throw RPCError.invalidParams("schedule: \(error)")
                }
            default:
                if Aria2Options.isDaemonOnly(name) {
                    throw RPCError.forbidden("option \(name) can only be set in the daemon's configuration, not through the API")
                }
                throw RPCError.invalidParams("option \(name.prefix(64)) cannot be changed through changeGlobalOption")
            }
            daemon.state.withLockedValue { $0.globalOptions[name] = value }
        }
    }

}
