import CCurl

/// RFC 6249 mirrors announced in a response: `Link: <URL>; rel=duplicate; pri=N` (RFC 8288
/// syntax), as MirrorBrain and MirrorCache send next to a file's digest.
package enum MirrorLinks {
    /// The `http`/`https` targets of the `rel=duplicate` links in `fields` (each a `Link` field
    /// value), resolved against `base`, in `pri` order (lowest first; a link without `pri`
    /// after those with one; ties in the order given), without repeats.
    package static func duplicates(in fields: [String], base: String) -> [String] {
        var found: [(url: String, priority: Int, order: Int)] = []
        for field in fields {
            for link in parse(field) where link.relations.contains("duplicate") {
                // Resolved, and a URL libcurl itself parses with an http(s) scheme (a request to
                // one it cannot parse would fail).
                guard let url = CurlURL.resolve(link.target, against: base), let parsed = CurlURL(url),
                      parsed.scheme == "http" || parsed.scheme == "https" else { continue }
                found.append((url, link.priority ?? Int.max, found.count))
            }
        }
        var seen = Set<String>()
        return found.sorted { ($0.priority, $0.order) < ($1.priority, $1.order) }.map(\.url).filter { seen.insert($0).inserted }
    }

    package struct Link: Equatable {
        package var target: String
        /// `rel`'s values, lowercased.
        package var relations: [String]
        package var priority: Int?
    }

    /// The links of one `Link` field value; a malformed link ends the parse (what came before it
    /// is kept).
    package static func parse(_ value: String) -> [Link] {
        var links: [Link] = []
        var rest = Substring(value)
        while true {
            rest = rest.drop { $0 == " " || $0 == "\t" || $0 == "," }
            guard rest.first == "<", let close = rest.firstIndex(of: ">") else { return links }
            var link = Link(target: String(rest[rest.index(after: rest.startIndex)..<close]), relations: [], priority: nil)
            rest = rest[rest.index(after: close)...]
            // Parameters: `; name=value` or `; name="quoted, value"`, up to the next top-level comma.
            while true {
                rest = rest.drop { $0 == " " || $0 == "\t" }
                guard rest.first == ";" else { break }
                rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" }
                let nameEnd = rest.firstIndex { $0 == "=" || $0 == ";" || $0 == "," } ?? rest.endIndex
                let name = rest[..<nameEnd].trimmingCharacters(in: " \t").lowercased()
                rest = rest[nameEnd...]
                var parameter = ""
                if rest.first == "=" {
                    rest = rest.dropFirst().drop { $0 == " " || $0 == "\t" }
                    if rest.first == "\"" {
                        rest = rest.dropFirst()
                        var escaped = false
                        var end = rest.endIndex
                        for index in rest.indices {
                            if escaped { escaped = false; parameter.append(rest[index]); continue }
                            if rest[index] == "\\" { escaped = true; continue }
                            if rest[index] == "\"" { end = index; break }
                            parameter.append(rest[index])
                        }
                        guard end < rest.endIndex else { return links }  // unterminated quote
                        rest = rest[rest.index(after: end)...]
                    } else {
                        let valueEnd = rest.firstIndex { $0 == ";" || $0 == "," } ?? rest.endIndex
                        parameter = rest[..<valueEnd].trimmingCharacters(in: " \t")
                        rest = rest[valueEnd...]
                    }
                }
                switch name {
                case "rel" where link.relations.isEmpty:  // the first rel counts (RFC 8288 §3.3)
                    link.relations = parameter.lowercased().split(separator: " ").map(String.init)
                case "pri" where link.priority == nil:
                    link.priority = Int(parameter).flatMap { $0 >= 0 ? $0 : nil }
                default:
                    break
                }
            }
            links.append(link)
            guard rest.first == "," else { return links }
        }
    }
}

extension Substring {
    func trimmingCharacters(in set: String) -> String {
        String(drop { set.contains($0) }.reversed().drop { set.contains($0) }.reversed())
    }
}

extension CurlURL {
    /// `reference` (absolute, or relative to `base`) as an absolute URL, as libcurl resolves a
    /// redirect; `nil` when libcurl refuses either.
    static func resolve(_ reference: String, against base: String) -> String? {
        guard let handle = curl_url() else { return nil }
        defer { curl_url_cleanup(handle) }
        guard curl_url_set(handle, CURLUPART_URL, base, 0) == CURLUE_OK,
              curl_url_set(handle, CURLUPART_URL, reference, UInt32(CURLU_URLENCODE)) == CURLUE_OK else { return nil }
        var value: UnsafeMutablePointer<CChar>?
        guard curl_url_get(handle, CURLUPART_URL, &value, 0) == CURLUE_OK, let value else { return nil }
        defer { curl_free(value) }
        return String(cString: value)
    }
}
