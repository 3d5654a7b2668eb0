import ArgumentParser
import Splitfetch
import SystemPackage

/// A byte count on the command line: `1048576`, `512K`, `1M`, `4G`.
struct ByteSize: ExpressibleByArgument, Sendable {
    var bytes: Int64

    init(_ bytes: Int64) { self.bytes = bytes }

    init?(argument: String) {
        guard let bytes = ByteCount.parse(argument) else { return nil }
        self.bytes = bytes
    }

    var defaultValueDescription: String {
        bytes > 0 && bytes % (1 << 20) == 0 ? "\(bytes >> 20)M" : bytes > 0 && bytes % (1 << 10) == 0 ? "\(bytes >> 10)K" : "\(bytes)"
    }
}
