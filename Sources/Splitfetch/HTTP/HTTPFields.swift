package import DownloadCore

#if canImport(Glibc)
import Glibc
#endif

/// Parsers for the header fields that decide what gets written where. Strict on purpose: a value
/// that is not exactly well formed is rejected rather than guessed at.
package enum HTTPFields {
    /// A parsed `Content-Range` value.
    package enum ContentRange: Equatable {
        /// `bytes first-last/total`; `total` is `nil` for `*`.
        case range(ByteRange, total: Int64?)
        /// `bytes */total` (sent with 416).
        case unsatisfied(total: Int64)
    }

    /// Parses a non-negative decimal that fits in `Int64`; `nil` for anything else.
    static func parseDecimal<S: StringProtocol>(_ text: S) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(text)
    }

    /// The `Content-Length` of a response, from all its values.
    ///
    /// - Returns: `.success(nil)` when absent, `.success(n)` when every value is the same valid
    ///   number, `.failure` when a value is malformed, negative, too large, or values disagree.
    package static func contentLength(_ values: [String]) -> Result<Int64?, DownloadError> {
        if values.isEmpty { return .success(nil) }
        var found: Int64?
        for value in values {
            for item in value.split(separator: ",", omittingEmptySubsequences: false) {
                let trimmed = String(item).trimmingSpaces()
                guard let n = parseDecimal(trimmed) else {
                    return .failure(DownloadError(.protocolViolation, "invalid Content-Length \"\(value.prefix(40))\""))
                }
                if let f = found, f != n {
                    return .failure(DownloadError(.protocolViolation, "conflicting Content-Length values \(f) and \(n)"))
                }
                found = n
            }
        }
        return .success(found)
    }

    /// Parses `Content-Range` (RFC 9110 §14.4); `nil` when malformed.
    package static func contentRange(_ value: String) -> ContentRange? {
        let v = value.trimmingSpaces()
        guard v.hasPrefix("bytes ") else { return nil }
        let spec = v.dropFirst(6).trimmingPrefixSpaces()
        let halves = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard halves.count == 2 else { return nil }
        let totalText = halves[1]
        let total: Int64? = totalText == "*" ? nil : parseDecimal(totalText)
        if totalText != "*" && total == nil { return nil }
        if halves[0] == "*" {
            guard let total else { return nil }
            return .unsatisfied(total: total)
        }
        let ends = halves[0].split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard ends.count == 2, let first = parseDecimal(ends[0]), let last = parseDecimal(ends[1]),
              first <= last, last < Int64.max else { return nil }
        if let total, last >= total { return nil }
        return .range(ByteRange(first, last + 1), total: total)
    }

    /// Parses a `Retry-After` value (delay-seconds or an HTTP date) received at wall-clock second
    /// `receivedAt`; `nil` when malformed.
    package static func retryAfterValue(_ value: String, receivedAt: Int64) -> RetryAfter? {
        let v = value.trimmingSpaces()
        if let seconds = parseDecimal(v) { return .seconds(seconds) }
        if let date = httpDate(v) { return .date(date, receivedAt: receivedAt) }
        return nil
    }

    /// Seconds since 1970 as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`): the inverse of
    /// ``httpDate(_:)``, for times learned over FTP (`MDTM`) and SFTP.
    static func httpDate(seconds: Int64) -> String {
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let inDay = seconds - days * 86400
        // Civil from days (Howard Hinnant's algorithm).
        let z = days + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]  // 1970-01-01 was a Thursday
        let weekday = weekdays[Int(((days % 7) + 7) % 7)]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(weekday), \(two(day)) \(months[Int(month - 1)]) \(year) \(two(inDay / 3600)):\(two(inDay / 60 % 60)):\(two(inDay % 60)) GMT"
    }

    /// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) to seconds since 1970.
    static func httpDate(_ value: String) -> Int64? {
        let parts = value.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT" else { return nil }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard let day = Int64(parts[1]), let monthIndex = months.firstIndex(of: String(parts[2])),
              let year = Int64(parts[3]) else { return nil }
        let hms = parts[4].split(separator: ":")
        guard hms.count == 3, let h = Int64(hms[0]), let m = Int64(hms[1]), let s = Int64(hms[2]) else { return nil }
        // An IMF-fixdate has a four-digit year; anything larger would overflow the arithmetic below
        // (a fuzzer found that a 19-digit year trapped).
        guard (1...9999).contains(year), (1...31).contains(day), (0...23).contains(h), (0...59).contains(m),
              (0...60).contains(s) else { return nil }
        // Days from civil (Howard Hinnant's algorithm).
        let month = Int64(monthIndex + 1)
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146097 + doe - 719468
        return days * 86400 + h * 3600 + m * 60 + s
    }

    /// What a response to a range request may be used for.
    enum RangeAnswer: Equatable {
        /// Write the body from `requested.lowerBound` up to `through` (exclusive): the range
        /// asked for, or less of it when the server caps range lengths. A `200` that carries the
        /// whole file from byte 0 is accepted for a range starting at 0 (the sink stops at the
        /// range's end).
        case accept(through: Int64)
        case reject(DownloadError)
    }

    /// Checks a response to a range request before a byte of it is written.
    ///
    /// - Parameter sentIfRange: the request carried `If-Range`; a `200` with unchanged
    ///   validators then means the server mishandles `If-Range`, and the range is worth asking
    ///   again without it.
    static func checkRangeResponse(_ head: ResponseHead, requested: ByteRange, total: Int64, url: String,
                                   etag: String? = nil, lastModified: String? = nil, sentIfRange: Bool = false) -> RangeAnswer {
        let where_ = redactedURL(url)
        if head.status == 200 || head.status == 206 {
            if let ours = etag, let theirs = head.first("etag"), !sameEntityTag(ours, theirs) {
                return .reject(DownloadError(.remoteChanged, "\(where_): the file changed on the server (ETag \(ours) is now \(theirs))",
                                             httpStatus: head.status))
            }
            if etag == nil, let ours = lastModified, let theirs = head.first("last-modified"), ours != theirs {
                return .reject(DownloadError(.remoteChanged,
                    "\(where_): the file changed on the server (Last-Modified \(ours) is now \(theirs))", httpStatus: head.status))
            }
            if let error = codingRefusal(head, url: where_) { return .reject(error) }
        }
        if head.status == 200 {
            let length: Int64?
            switch contentLength(head.all("content-length")) {
            case .failure(let error): return .reject(DownloadError(.protocolViolation, "\(where_): \(error.message)"))
            case .success(let value): length = value
            }
            if requested.lowerBound == 0, length == nil || length == total {
                return .accept(through: requested.upperBound)
            }
            // Only validators the 200 carries, equal to ours, show the file did not change.
            let unchanged = etag.map { ours in head.first("etag").map { sameEntityTag(ours, $0) } ?? false }
                ?? lastModified.map { head.first("last-modified") == $0 } ?? false
            if sentIfRange, unchanged {
                var error = DownloadError(.protocolViolation, "\(where_): the server answered If-Range with the whole file although it did not change",
                                          httpStatus: 200, kind: .protocolFault(.ignoredIfRange))
                error.ignoredIfRange = true
                return .reject(error)
            }
            return .reject(DownloadError(.protocolViolation, "\(where_): server ignored the range request (200 instead of 206)", httpStatus: 200,
                                         kind: .protocolFault(.rangeIgnored)))
        }
        if head.status != 206 {
            var error = httpStatusError(head.status, url: url, head: head)
            // A 416 saying the file has another size is the same news as a 206 with another
            // total: which of the two answers arrives first must not decide the outcome.
            if head.status == 416, let field = head.first("content-range"), case .unsatisfied(let actual)? = contentRange(field),
               actual != total {
                error.observedTotal = actual
            }
            return .reject(error)
        }
        if let type = head.first("content-type"), type.lowercased().hasPrefix("multipart/") {
            return .reject(DownloadError(.protocolViolation, "\(where_): range answered with \(type)", kind: .protocolFault(.wrongRange)))
        }
        let ranges = head.all("content-range")
        guard ranges.count == 1, let parsed = contentRange(ranges[0]) else {
            return .reject(DownloadError(.protocolViolation, "\(where_): 206 without a valid Content-Range (\(ranges.first ?? "none"))",
                                         kind: .protocolFault(.wrongRange)))
        }
        // The start must be the one asked for; an earlier end is a server capping range lengths.
        guard case .range(let got, let gotTotal) = parsed, got.lowerBound == requested.lowerBound,
              got.upperBound <= requested.upperBound, gotTotal == total else {
            var error = DownloadError(.protocolViolation,
                "\(where_): asked for bytes \(requested.lowerBound)-\(requested.upperBound - 1)/\(total), got Content-Range \(ranges[0])",
                kind: .protocolFault(.wrongRange))
            if case .range(let got, let gotTotal?) = parsed, got.lowerBound == requested.lowerBound { error.observedTotal = gotTotal }
            return .reject(error)
        }
        if let error = lengthDisagreement(head, range: got, contentRange: ranges[0], url: where_) { return .reject(error) }
        return .accept(through: got.upperBound)
    }

    /// Why a `206`'s `Content-Length` cannot be trusted: unreadable, or another count than its
    /// `Content-Range` names. Such a response disagrees with itself, and asking again gets the
    /// same answer (not transient). Taken whole, it would also leave bytes behind on a connection
    /// that libcurl then reuses, or end short. `url` is already redacted.
    static func lengthDisagreement(_ head: ResponseHead, range: ByteRange, contentRange: String, url: String) -> DownloadError? {
        switch contentLength(head.all("content-length")) {
        case .failure(let error):
            return DownloadError(.protocolViolation, "\(url): \(error.message)")
        case .success(let length?) where length != range.count:
            return DownloadError(.protocolViolation, "\(url): Content-Length \(length) does not match Content-Range \(contentRange)")
        case .success:
            return nil
        }
    }

    /// The refusal of a body sent with a content coding (`gzip`, …), or `nil`. Every request
    /// asks with `Accept-Encoding: identity`; a server that compresses anyway will again, so
    /// the error is not transient. `url` is already redacted.
    static func codingRefusal(_ head: ResponseHead, url: String) -> DownloadError? {
        guard let encoding = head.first("content-encoding"), encoding.trimmingSpaces().lowercased() != "identity" else { return nil }
        return DownloadError(.protocolViolation,
            "\(url): the server sent the body with Content-Encoding \(encoding) although asked for identity", httpStatus: head.status)
    }

    /// The weak comparison of two entity tags (RFC 9110, 8.8.3.2): equal once any `W/` is
    /// removed. Used to tell whether a file changed, where a weak tag is as good as a strong one.
    static func sameEntityTag(_ a: String, _ b: String) -> Bool {
        func opaque(_ tag: String) -> Substring {
            let t = tag.trimmingSpaces()
            return t.hasPrefix("W/") ? t.dropFirst(2) : Substring(t)
        }
        return opaque(a) == opaque(b)
    }

    /// The `If-Range` value that makes a server send the whole new file instead of a range of a
    /// changed one, or `nil` when there is no strong validator (RFC 9110, 13.1.5): a strong ETag;
    /// without an ETag, a `Last-Modified` at least a second before the response's `Date`. A weak
    /// ETag, or a date that may not be strong, never goes into `If-Range` (Apache, for one,
    /// answers such a request with the whole file every time).
    static func ifRangeValue(etag: String?, lastModified: String?, date: String?) -> String? {
        if let etag { return etag.trimmingSpaces().hasPrefix("W/") ? nil : etag }
        guard let lastModified, let modified = httpDate(lastModified), let date, let sent = httpDate(date),
              modified <= sent - 1 else { return nil }
        return lastModified
    }

    /// The error for an HTTP error status (the core judges which are transient: 408, 429, 5xx).
    static func httpStatusError(_ status: Int, url: String, head: ResponseHead?) -> DownloadError {
        if status == 407 { return .proxyRefused(status) }
        var error = DownloadError(.http, "\(redactedURL(url)): HTTP \(status)\(reasonSuffix(status))", httpStatus: status, kind: .http(status))
        error.retryAfter = head?.first("retry-after").flatMap { retryAfterValue($0, receivedAt: Int64(time(nil))) }
        return error
    }

    private static func reasonSuffix(_ status: Int) -> String {
        switch status {
        case 400: " Bad Request"
        case 401: " Unauthorized"
        case 403: " Forbidden"
        case 404: " Not Found"
        case 405: " Method Not Allowed"
        case 408: " Request Timeout"
        case 410: " Gone"
        case 416: " Range Not Satisfiable"
        case 429: " Too Many Requests"
        case 500: " Internal Server Error"
        case 502: " Bad Gateway"
        case 503: " Service Unavailable"
        case 504: " Gateway Timeout"
        default: ""
        }
    }
}

extension Substring {
    func trimmingPrefixSpaces() -> Substring {
        var s = self
        while s.first == " " { s.removeFirst() }
        return s
    }
}
