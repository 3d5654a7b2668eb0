import ArgumentParser
import Splitfetch
import SystemPackage

/// The library's defaults, the one place the command's defaults come from.
let defaults = DownloadOptions()

/// Which files, and how many at once.
struct InputOptions: ParsableArguments {
    @Argument(help: "The http, https, ftp, ftps or sftp URL(s) to download.")
    var urls: [String] = []

    @Option(name: [.customShort("i"), .long], parsing: .unconditional, help: ArgumentHelp("Read URLs from FILE, one per line ('-' for standard input).",
                                                                  valueName: "file"))
    var inputFile: String?

    @Option(name: [.customShort("j", allowingJoined: true), .long],
            parsing: .unconditional, help: ArgumentHelp("Files downloaded at the same time when there are several URLs.", valueName: "n"))
    var jobs = 1

    @Option(name: .long, help: ArgumentHelp("Resume every partial download under DIR (from its manifests), with the other URLs.",
                                            valueName: "dir"))
    var resumePartials: String?

    @Option(name: .long, help: ArgumentHelp("List the partial downloads under DIR as JSON lines, and exit.", valueName: "dir"))
    var listPartials: String?
}
