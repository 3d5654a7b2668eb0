import Splitfetch

#if canImport(Glibc)
import Glibc
#endif

/// Draws progress on standard error: a live bar on a terminal, a plain line every few seconds
/// otherwise, and a one-line summary at the end.
struct ProgressRenderer {
    let isTerminal: Bool
    /// Seconds between plain lines when standard error is not a terminal.
    var plainInterval = 5.0
    private var lastPlain = -1.0
    private var lastWidth = 0

    init() {
        self.isTerminal = isatty(STDERR_FILENO) == 1
    }

    mutating func handle(_ event: DownloadEvent) {
        switch event {
        case .probed(let resource):
            if !isTerminal {
                let size = resource.size.map { ByteCount.format(Double($0)) } ?? "unknown size"
                writeLine("probed \(resource.finalURL): \(size), ranges \(resource.acceptsRanges ? "yes" : "no")")
            }
        case .started(let mode, let connections, _):
            if !isTerminal { writeLine("downloading: \(mode.rawValue), \(connections) connection\(connections == 1 ? "" : "s")") }
        case .progress(let p):
            if isTerminal {
                draw(bar(p))
            } else if lastPlain < 0 || p.elapsed.seconds - lastPlain >= plainInterval {
                lastPlain = p.elapsed.seconds
                writeLine(line(p))
            }
        case .retrying(let connection, let error, let delay):
            clearBar()
            writeLine("connection \(connection): \(error.message); retrying in \(ByteCount.fixed(delay.seconds, 1)) s")
        case .connectionsReduced(let remaining, let reason):
            clearBar()
            writeLine("server busy (\(reason)); continuing with \(remaining) connection\(remaining == 1 ? "" : "s")")
        case .warning(let text):
            clearBar()
            writeLine("warning: \(text)")
        case .split:
            break  // the bar shows the connections; a split changes what one of them fetches
        case .finished, .failed:
            clearBar()
        }
    }

    func line(_ p: DownloadProgress) -> String {
        var parts: [String] = []
        if let total = p.totalBytes, total > 0 {
            parts.append("\(ByteCount.fixed(Double(p.bytesWritten) * 100 / Double(total), 1))%")
            parts.append("\(ByteCount.format(Double(p.bytesWritten))) / \(ByteCount.format(Double(total)))")
        } else {
            parts.append(ByteCount.format(Double(p.bytesWritten)))
        }
        parts.append("\(ByteCount.format(p.bytesPerSecond))/s")
        if let eta = p.estimatedTimeLeft?.seconds { parts.append("ETA \(ByteCount.duration(eta))") }
        parts.append("\(p.activeConnections) conn")
        return parts.joined(separator: "  ")
    }

    func bar(_ p: DownloadProgress) -> String {
        let width = 24
        var fraction = 0.0
        if let total = p.totalBytes, total > 0 { fraction = min(1, Double(p.bytesWritten) / Double(total)) }
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "=", count: filled) + (filled < width ? ">" : "")
            + String(repeating: " ", count: max(0, width - filled - 1))
        return "[\(bar)] " + line(p)
    }

    private mutating func draw(_ text: String) {
        var out = "\r" + text
        if text.count < lastWidth { out += String(repeating: " ", count: lastWidth - text.count) }
        lastWidth = text.count
        writeRaw(out)
    }

    private mutating func clearBar() {
        guard isTerminal, lastWidth > 0 else { return }
        writeRaw("\r" + String(repeating: " ", count: lastWidth) + "\r")
        lastWidth = 0
    }

    func writeLine(_ text: String) { writeRaw(text + "\n") }
}

/// Writes to standard error without buffering.
func writeRaw(_ text: String) {
    var t = text
    t.withUTF8 { buffer in
        var offset = 0
        while offset < buffer.count {
            let n = write(STDERR_FILENO, buffer.baseAddress! + offset, buffer.count - offset)
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                return
            }
            offset += n
        }
    }
}
