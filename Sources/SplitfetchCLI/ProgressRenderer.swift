import ArgumentParser
import Splitfetch

#if canImport(Glibc)
import Glibc
#endif

/// Draws progress on standard error: a live bar on a terminal, with one line per connection
/// (its range, speed, state and bytes) under it when the terminal is wide enough, as axel and
/// aria2 show; a plain line every few seconds otherwise; and a one-line summary at the end.
struct ProgressRenderer {
    let isTerminal: Bool
    let style: ProgressStyle
    /// Columns of the terminal, read when the renderer is made; 0 when unknown.
    let columns: Int
    /// Seconds between plain lines.
    var plainInterval = 5.0
    /// The narrowest terminal that gets the per-connection lines.
    static let connectionViewColumns = 60
    private var lastPlain = -1.0
    /// Lines the live block took when last drawn (0: nothing drawn).
    private var drawnLines = 0

    /// - Parameter style: `nil` chooses: a bar on a terminal, lines otherwise.
    init(style: ProgressStyle? = nil) {
        isTerminal = isatty(STDERR_FILENO) == 1
        self.style = style ?? (isTerminal ? .bar : .lines)
        var size = winsize()
        columns = isTerminal && ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0 ? Int(size.ws_col) : 0
    }

    /// Whether the live bar is drawn (`bar`, on a terminal).
    var isLive: Bool { style == .bar && isTerminal }

    mutating func handle(_ event: DownloadEvent) {
        switch event.kind {
        case .probed:
            if style == .lines, let resource = event.resource, resource.notModified {
                writeLine("probed \(resource.finalURL): not modified")
            } else if style == .lines, let resource = event.resource {
                let size = resource.size.map { ByteCount.format(Double($0)) } ?? "unknown size"
                writeLine("probed \(resource.finalURL): \(size), ranges \(resource.acceptsRanges ? "yes" : "no")")
            }
        case .started:
            if style == .lines, let mode = event.mode, let connections = event.connectionCount {
                writeLine("downloading: \(mode.rawValue), \(connections) connection\(connections == 1 ? "" : "s")")
            }
        case .progress:
            guard let p = event.progress else { break }
            if isLive {
                draw(block(p))
            } else if style == .lines, lastPlain < 0 || p.elapsed.seconds - lastPlain >= plainInterval {
                lastPlain = p.elapsed.seconds
                writeLine(line(p))
            }
        case .retry:
            clearBlock()
            writeLine("connection \(event.connection ?? 0): \(event.error?.message ?? "failed"); "
                + "retrying in \(ByteCount.fixed((event.delay ?? .zero).seconds, 1)) s")
        case .connectionsReduced:
            clearBlock()
            let remaining = event.reducedTo ?? 1
            writeLine("server busy (\(event.reason ?? "")); continuing with \(remaining) connection\(remaining == 1 ? "" : "s")")
        case .warning:
            clearBlock()
            writeLine("warning: \(event.warning?.message ?? "")")
        case .sourceDropped:
            clearBlock()
            writeLine("warning: source dropped: \(event.error?.message ?? "")")
        case .finished, .failed:
            clearBlock()
        default:
            break  // splits: the connection lines show the new ranges
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

    /// One line per connection: `#3 receiving  [12.0 MiB, 16.0 MiB)  3.1 MiB/s  9.5 MiB`, and
    /// `h2 stream` when it is a stream of a shared HTTP/2 connection.
    static func connectionLine(_ c: ConnectionProgress) -> String {
        let state: String
        switch c.state {
        case .idle: state = "idle"
        case .receiving: state = "receiving"
        case .waitingToRetry: state = "retry wait"
        case .done: state = "done"
        }
        let range = c.range.map { "[\(ByteCount.format(Double($0.lowerBound))), \(ByteCount.format(Double($0.upperBound))))" } ?? "-"
        let padded = state.padding(to: 10)
        return "  #\(c.id) \(padded) \(range.padding(to: 24)) \(ByteCount.format(c.bytesPerSecond))/s".padding(to: 58)
            + "  \(ByteCount.format(Double(c.bytes)))" + (c.http2 == true ? "  h2 stream" : "")
    }

    /// The live block: the bar, then a line per connection when the terminal is wide enough and
    /// there is more than one.
    func block(_ p: DownloadProgress) -> [String] {
        var lines = [bar(p)]
        if columns >= Self.connectionViewColumns && p.connections.count > 1 {
            lines += p.connections.sorted { $0.id < $1.id }.map(Self.connectionLine)
        }
        return lines
    }

    /// Redraws the block in place: back to its first line, each line cleared and rewritten (cut
    /// to the terminal's width, so nothing wraps), and lines left over from a taller block cleared.
    private mutating func draw(_ lines: [String]) {
        let width = columns > 1 ? columns - 1 : Int.max
        var out = drawnLines > 1 ? "\u{1B}[\(drawnLines - 1)A" : ""
        for (index, text) in lines.enumerated() {
            out += "\r\u{1B}[2K" + String(text.prefix(width))
            if index < lines.count - 1 { out += "\n" }
        }
        if drawnLines > lines.count {
            for _ in lines.count..<drawnLines { out += "\n\r\u{1B}[2K" }
            out += "\u{1B}[\(drawnLines - lines.count)A"
        }
        drawnLines = lines.count
        writeRaw(out)
    }

    /// Clears the block and leaves the cursor where it began, for a message or the summary.
    private mutating func clearBlock() {
        guard isLive, drawnLines > 0 else { return }
        var out = drawnLines > 1 ? "\u{1B}[\(drawnLines - 1)A" : ""
        for index in 0..<drawnLines {
            out += "\r\u{1B}[2K"
            if index < drawnLines - 1 { out += "\n" }
        }
        if drawnLines > 1 { out += "\u{1B}[\(drawnLines - 1)A" }
        out += "\r"
        drawnLines = 0
        writeRaw(out)
    }

    func writeLine(_ text: String) { writeRaw(text + "\n") }
}

extension String {
    /// Padded with spaces to `width` characters (never cut).
    func padding(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

/// Writes to standard error without buffering.
func writeRaw(_ text: String) { write(text, to: STDERR_FILENO) }

/// Writes to standard output without buffering.
func writeOut(_ text: String) { write(text, to: STDOUT_FILENO) }

private func write(_ text: String, to descriptor: Int32) {
    var t = text
    t.withUTF8 { buffer in
        var offset = 0
        while offset < buffer.count {
            let n = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                return
            }
            offset += n
        }
    }
}
