/// The JSON form of an event: the schema of `--events` and of the daemon's notifications
/// (Documentation/Manual/Events.md). `event` names the kind; the fields of the kind follow, flat.
extension DownloadEvent: Codable {
    enum CodingKeys: String, CodingKey {
        case event
        // probed
        case url, finalURL, size, acceptsRanges, etag, lastModified, contentType, probeMethod, mirrors
        // started
        case mode, connectionCount
        // progress
        case bytes, total, bytesPerSecond, connections
        // retry, split
        case connection, delay, range
        // connectionsReduced
        case to, reason
        // warning
        case message, warningKind, details
        // finished, failed, retry, sourceDropped
        case statistics, error
    }

    /// A connection of a progress event as the schema writes it.
    struct Connection: Codable {
        var id: Int
        var state: String
        var bytes: Int64
        var bytesPerSecond: Double
        var range: [Int64]?
        var source: Int?

        static let stateNames: [ConnectionProgress.State: String] = [
            .idle: "idle", .receiving: "receiving", .waitingToRetry: "waitingToRetry", .done: "done",
        ]

        init(_ c: ConnectionProgress) {
            (id, state, bytes, bytesPerSecond, source) = (c.id, Self.stateNames[c.state] ?? "idle", c.bytes, c.bytesPerSecond, c.source)
            range = c.range.map { [$0.lowerBound, $0.upperBound] }
        }

        var progress: ConnectionProgress {
            let state = Self.stateNames.first { $0.value == self.state }?.key ?? .idle
            return ConnectionProgress(id: id, state: state, bytes: bytes, range: Self.range(range), bytesPerSecond: bytesPerSecond,
                                      source: source)
        }

        static func range(_ pair: [Int64]?) -> Range<Int64>? {
            guard let pair, pair.count == 2, pair[0] <= pair[1] else { return nil }
            return pair[0]..<pair[1]
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(kind, forKey: .event)
        if let r = resource {
            try c.encode(r.url, forKey: .url)
            try c.encode(r.finalURL, forKey: .finalURL)
            try c.encodeIfPresent(r.size, forKey: .size)
            try c.encode(r.acceptsRanges, forKey: .acceptsRanges)
            try c.encodeIfPresent(r.etag, forKey: .etag)
            try c.encodeIfPresent(r.lastModified, forKey: .lastModified)
            try c.encodeIfPresent(r.contentType, forKey: .contentType)
            try c.encode(r.probeMethod, forKey: .probeMethod)
            if !r.mirrors.isEmpty { try c.encode(r.mirrors, forKey: .mirrors) }
        }
        try c.encodeIfPresent(mode, forKey: .mode)
        try c.encodeIfPresent(connectionCount, forKey: .connectionCount)
        if resource == nil { try c.encodeIfPresent(size, forKey: .size) }
        if let p = progress {
            try c.encode(p.bytesWritten, forKey: .bytes)
            try c.encodeIfPresent(p.totalBytes, forKey: .total)
            try c.encode(p.bytesPerSecond, forKey: .bytesPerSecond)
            try c.encode(p.connections.map(Connection.init), forKey: .connections)
        }
        try c.encodeIfPresent(connection, forKey: .connection)
        try c.encodeIfPresent(delay?.seconds, forKey: .delay)
        try c.encodeIfPresent(range.map { [$0.lowerBound, $0.upperBound] }, forKey: .range)
        try c.encodeIfPresent(reducedTo, forKey: .to)
        try c.encodeIfPresent(reason, forKey: .reason)
        if resource == nil { try c.encodeIfPresent(url, forKey: .url) }
        if let w = warning {
            try c.encode(w.message, forKey: .message)
            try c.encode(w.kind, forKey: .warningKind)
            if !w.fields.isEmpty { try c.encode(w.fields, forKey: .details) }
        }
        try c.encodeIfPresent(statistics, forKey: .statistics)
        try c.encodeIfPresent(error, forKey: .error)
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(Kind.self, forKey: .event))
        let url = try c.decodeIfPresent(String.self, forKey: .url)
        let size = try c.decodeIfPresent(Int64.self, forKey: .size)
        if kind == .probed, let url {
            var r = RemoteResource(url: url, finalURL: try c.decodeIfPresent(String.self, forKey: .finalURL) ?? url, size: size,
                                   acceptsRanges: try c.decodeIfPresent(Bool.self, forKey: .acceptsRanges) ?? false,
                                   etag: try c.decodeIfPresent(String.self, forKey: .etag),
                                   lastModified: try c.decodeIfPresent(String.self, forKey: .lastModified),
                                   contentType: try c.decodeIfPresent(String.self, forKey: .contentType), contentDisposition: nil,
                                   probeMethod: try c.decodeIfPresent(String.self, forKey: .probeMethod) ?? "")
            r.mirrors = try c.decodeIfPresent([String].self, forKey: .mirrors) ?? []
            resource = r
        } else {
            (self.url, self.size) = (url, size)
        }
        mode = try c.decodeIfPresent(DownloadStatistics.Mode.self, forKey: .mode)
        connectionCount = try c.decodeIfPresent(Int.self, forKey: .connectionCount)
        if let bytes = try c.decodeIfPresent(Int64.self, forKey: .bytes) {
            let connections = try c.decodeIfPresent([Connection].self, forKey: .connections) ?? []
            progress = DownloadProgress(bytesWritten: bytes, totalBytes: try c.decodeIfPresent(Int64.self, forKey: .total),
                                        bytesPerSecond: try c.decodeIfPresent(Double.self, forKey: .bytesPerSecond) ?? 0,
                                        elapsed: .zero, connections: connections.map(\.progress))
        }
        connection = try c.decodeIfPresent(Int.self, forKey: .connection)
        delay = try c.decodeIfPresent(Double.self, forKey: .delay).map { .seconds($0) }
        range = Connection.range(try c.decodeIfPresent([Int64].self, forKey: .range))
        reducedTo = try c.decodeIfPresent(Int.self, forKey: .to)
        reason = try c.decodeIfPresent(String.self, forKey: .reason)
        if let kind = try c.decodeIfPresent(DownloadWarning.Kind.self, forKey: .warningKind) {
            warning = DownloadWarning(kind, try c.decodeIfPresent(String.self, forKey: .message) ?? "",
                                      fields: try c.decodeIfPresent([String: String].self, forKey: .details) ?? [:])
        }
        statistics = try c.decodeIfPresent(DownloadStatistics.self, forKey: .statistics)
        error = try c.decodeIfPresent(DownloadError.self, forKey: .error)
    }
}

/// An error's JSON form: `code`, `message`, and `httpStatus` when there is one.
extension DownloadError: Codable {
    enum CodingKeys: String, CodingKey {
        case code, message, httpStatus
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(code, forKey: .code)
        try c.encode(message, forKey: .message)
        try c.encodeIfPresent(httpStatus, forKey: .httpStatus)
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(try c.decode(Code.self, forKey: .code), try c.decode(String.self, forKey: .message),
                  httpStatus: try c.decodeIfPresent(Int.self, forKey: .httpStatus))
    }
}
