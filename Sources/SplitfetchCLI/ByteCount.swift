/// Parses and formats byte counts for the command line.
enum ByteCount {
    /// Parses `1048576`, `512K`, `1M`, `2G`, `1MiB`, `64KB` (binary multiples) to bytes.
    static func parse(_ text: String) -> Int64? {
        var digits = Substring(text.trimmingCharacters())
        var multiplier: Int64 = 1
        let lower = digits.lowercased()
        let suffixes: [(String, Int64)] = [("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("kb", 1 << 10),
                                           ("mb", 1 << 20), ("gb", 1 << 30), ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("b", 1)]
        for (suffix, m) in suffixes where lower.hasSuffix(suffix) {
            digits = digits.dropLast(suffix.count)
            multiplier = m
            break
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let n = Int64(digits), n >= 0 else { return nil }
        let (product, overflow) = n.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }

    /// `1.5 GiB`, `312.0 MiB`, `17 B`.
    static func format(_ bytes: Double) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = bytes
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(Int(value)) B" : "\(fixed(value, 1)) \(units[unit])"
    }

    /// A number with `digits` decimals, without Foundation's formatters.
    static func fixed(_ value: Double, _ digits: Int) -> String {
        guard value.isFinite else { return "-" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let rounded = (value * scale).rounded() / scale
        var text = String(Int64(rounded))
        if digits > 0 {
            var fraction = Int64(((abs(rounded) - Double(Int64(abs(rounded)))) * scale).rounded())
            if fraction >= Int64(scale) { fraction = 0 }
            var f = String(fraction)
            while f.count < digits { f = "0" + f }
            if rounded < 0 && Int64(rounded) == 0 { text = "-0" }
            text += "." + f
        }
        return text
    }

    /// `1:02:03` or `2:03`.
    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "--:--" }
        let s = Int(seconds.rounded())
        let (h, m, r) = (s / 3600, (s % 3600) / 60, s % 60)
        let mm = m < 10 && h > 0 ? "0\(m)" : "\(m)"
        let ss = r < 10 ? "0\(r)" : "\(r)"
        return h > 0 ? "\(h):\(mm):\(ss)" : "\(mm):\(ss)"
    }
}

extension String {
    func trimmingCharacters() -> String {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return String(s)
    }
}
