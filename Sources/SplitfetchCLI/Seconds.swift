import ArgumentParser
import Splitfetch
import SystemPackage

/// A time on the command line, in seconds: `15`, `0.5`.
struct Seconds: ExpressibleByArgument, Sendable {
    var duration: Duration

    init(_ duration: Duration) { self.duration = duration }

    init?(argument: String) {
        guard let value = Double(argument), value.isFinite, value >= 0, value < 1e9 else { return nil }
        duration = .seconds(value)
    }

    var defaultValueDescription: String {
        let seconds = duration.seconds
        return seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}
