/// Times as seconds, and numbers as the messages print them, without Foundation.

extension Duration {
    /// The duration in seconds, as a `Double`.
    package var seconds: Double {
        let c = components
        return Double(c.seconds) + Double(c.attoseconds) / 1e18
    }
}

/// `42.1`, one decimal, without Foundation.
func formatPercent(_ value: Double) -> String {
    let tenths = Int((value * 10).rounded(.down))
    return "\(tenths / 10).\(tenths % 10)"
}

/// `20`, `1.5` or `0.268` (to the millisecond), without Foundation.
func formatSeconds(_ value: Double) -> String {
    let milliseconds = (value * 1000).rounded()
    guard milliseconds.isFinite, abs(milliseconds) < 1e15 else { return String(value) }
    let whole = Int(milliseconds)
    if whole % 1000 == 0 { return String(whole / 1000) }
    var fraction = String(abs(whole) % 1000)
    fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
    while fraction.hasSuffix("0") { fraction.removeLast() }
    return (whole < 0 ? "-" : "") + String(abs(whole) / 1000) + "." + fraction
}
