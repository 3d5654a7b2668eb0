/// What the probe learned about the file to download.
public struct RemoteResource: Sendable, Equatable, Codable {
    /// The URL the caller gave (credentials removed).
    public var url: String
    /// The URL after redirects; segment requests go here.
    public var finalURL: String
    /// The size in bytes, when the server said.
    public var size: Int64?
    /// Whether the server answers range requests with `206`.
    public var acceptsRanges: Bool
    /// The `ETag` validator, if any.
    public var etag: String?
    /// The `Last-Modified` validator, if any.
    public var lastModified: String?
    /// The `Content-Type`, if any.
    public var contentType: String?
    /// The raw `Content-Disposition`, if any (not used for the file name by default).
    public var contentDisposition: String?
    /// How the size was learned: `head` or `range-get`.
    public var probeMethod: String
    /// The response's `Date`, if any: it tells whether `Last-Modified` is a strong validator.
    public var date: String?
    /// The digests of the whole file that the server stated (RFC 9530 `Repr-Digest`, a whole
    /// body's `Content-Digest`, RFC 3230 `Digest`, `x-amz-checksum-*`, `x-goog-hash`).
    public var digests: [ExpectedDigest] = []
    /// Mirrors the response announced (RFC 6249 `Link: <URL>; rel=duplicate; pri=N`), in
    /// priority order.
    public var mirrors: [String] = []
    /// The server answered a conditional refresh with `304 Not Modified`: nothing else here is
    /// known but the validators it sent again.
    public var notModified: Bool = false

    /// This resource as the caller may see it: URLs without credentials or query secrets.
    var redacted: RemoteResource {
        var copy = self
        copy.url = redactedURL(url)
        copy.finalURL = redactedURL(finalURL)
        copy.mirrors = mirrors.map(redactedURL)
        return copy
    }

    /// Whether `other` (a later probe of the same URL) describes the same file: the same size,
    /// and the same `ETag` (compared weakly) or else `Last-Modified`, where both have one.
    func isSameFile(as other: RemoteResource) -> Bool {
        guard size == other.size else { return false }
        if let a = etag, let b = other.etag { return HTTPFields.sameEntityTag(a, b) }
        if let a = lastModified, let b = other.lastModified { return a == b }
        return true
    }

    /// Whether the download can use several connections.
    public var isSegmentable: Bool { acceptsRanges && size != nil }

    public init(url: String, finalURL: String, size: Int64?, acceptsRanges: Bool, etag: String?, lastModified: String?,
                contentType: String?, contentDisposition: String?, probeMethod: String,
                date: String? = nil, digests: [ExpectedDigest] = []) {
        self.digests = digests
        self.url = url
        self.finalURL = finalURL
        self.size = size
        self.acceptsRanges = acceptsRanges
        self.etag = etag
        self.lastModified = lastModified
        self.contentType = contentType
        self.contentDisposition = contentDisposition
        self.probeMethod = probeMethod
        self.date = date
    }
}
