import ArgumentParser
import Splitfetch

#if canImport(Glibc)
import Glibc
#endif

/// `--progress`: how a download's progress is shown.
enum ProgressStyle: String, ExpressibleByArgument, CaseIterable {
    /// A live bar on a terminal (with a line per connection on a wide one); plain lines otherwise.
    case bar
    /// A plain line every few seconds, terminal or not.
    case lines
    /// No progress; messages and the summary still appear.
    case none
}
