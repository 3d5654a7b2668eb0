import ArgumentParser
import Splitfetch
import SystemPackage

/// Where the file goes and what is kept.
struct OutputOptions: ParsableArguments {
    @Flag(name: [.customShort("v"), .long], help: "Log each request, retry and decision to standard error (swift-log, debug level).")
    var verbose = false

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "Progress display: bar (live, with a line per connection on a wide terminal), lines (a plain line every 5 s) or none (default: bar on a terminal, else lines).",
        valueName: "style"))
    var progress: ProgressStyle?

    @Option(name: [.customShort("o", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Output file name (default: the last path component of the URL); '-' writes the file to standard output, in order.", valueName: "name"))
    var output: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("With -o -: the most bytes fetched ahead of what standard output has taken, held in a temporary file in $TMPDIR (default 64M).",
                                                        valueName: "size"))
    var window = ByteSize(defaults.window)

    /// `-o -`: the file goes to standard output.
    var toStandardOutput: Bool { output == "-" }

    @Option(name: [.customShort("d", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Directory for the output, created when missing; a relative --output is taken inside it.", valueName: "dir"))
    var directory: String?

    @Flag(name: [.customShort("f"), .long], help: "Replace an existing output file.")
    var force = false

    @Flag(name: [.customShort("N"), .customLong("timestamping"), .customLong("conditional-get")],
          help: "Conditional refresh: fetch an existing output only if it changed on the server (If-None-Match, and If-Modified-Since from the server's Last-Modified, as recorded when it was downloaded); an unchanged file is left as it is, a changed one replaced once complete.")
    var refresh = false

    @Flag(name: [.customShort("R"), .customLong("remote-time")], help: "Set the file's modification time from the server's Last-Modified.")
    var remoteTime = false

    @Flag(name: .customLong("no-sync"), help: "No syncs: no fdatasync before the final rename, no directory fsync after it (faster, not power-cut safe).")
    var noSync = false

    @Flag(help: "Discard a partial file and manifest from an earlier run and start over.")
    var restart = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Seconds between durable checkpoints of the resume manifest; 0 saves only on stop.",
                               valueName: "seconds"))
    var checkpointInterval = Seconds(defaults.durability.checkpointInterval)

    @Flag(help: "Name the file from the server's Content-Disposition (reduced to a safe base name).")
    var contentDisposition = false

    @Option(parsing: .unconditional, help: ArgumentHelp("Refuse files larger than this, e.g. 4G.", valueName: "size"))
    var maxSize: ByteSize?

    @Option(parsing: .unconditional, help: ArgumentHelp("Write final statistics as JSON to this file.", valueName: "file"))
    var statsJson: String?

    @Option(parsing: .unconditional, help: ArgumentHelp("Write every download's events as JSON lines to FILE ('-' for standard output), progress every 0.5 s; the schema is in the manual (Documentation/Manual/Events.md).",
                                                        valueName: "file"))
    var events: String?

    @Flag(name: [.customShort("q"), .long], help: "Print nothing but errors.")
    var quiet = false
}
