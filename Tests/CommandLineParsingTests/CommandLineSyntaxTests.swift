import Testing

@testable import CommandLineParsing

private let syntax = CommandLineSyntax([
    OptionSpec("connections", short: "n", value: "n", help: "Parallel connections.", default: "8"),
    OptionSpec("output", short: "o", value: "name", help: "Output file name."),
    OptionSpec("header", short: "H", value: "header", help: "Extra request header (repeatable).", repeatable: true),
    OptionSpec("quiet", short: "q", help: "Print nothing but errors."),
    OptionSpec("insecure", short: "k", help: "Do not verify certificates."),
    OptionSpec("no-sync", help: "Skip the fdatasync."),
    OptionSpec("max-size", value: "size", help: "Refuse larger files."),
])

private func parse(_ arguments: String) throws(CommandLineError) -> ParsedCommandLine {
    try syntax.parse(arguments.split(separator: " ").map(String.init))
}

private func failure(_ arguments: [String]) -> String? {
    do {
        _ = try syntax.parse(arguments)
        return nil
    } catch {
        return error.message
    }
}

@Suite struct CommandLineSyntaxTests {
    @Test func longOptionsTakeTheirValueAfterASpaceOrAnEqualsSign() throws {
        let spaced = try parse("--connections 16 --output a.bin http://h/x")
        #expect(spaced.value("connections") == "16")
        #expect(spaced.value("output") == "a.bin")
        #expect(spaced.operands == ["http://h/x"])
        let joined = try parse("--connections=16 --output=a=b.bin")
        #expect(joined.value("connections") == "16")
        #expect(joined.value("output") == "a=b.bin")
        #expect(try syntax.parse(["--output="]).value("output") == "")
    }

    @Test func shortOptionsTakeTheRestOfTheClusterOrTheNextArgument() throws {
        let separate = try parse("-n 4 -o x")
        #expect(separate.value("connections") == "4")
        #expect(separate.value("output") == "x")
        let attached = try parse("-n4")
        #expect(attached.value("connections") == "4")
        let cluster = try parse("-qkn16 u")
        #expect(cluster.has("quiet") && cluster.has("insecure"))
        #expect(cluster.value("connections") == "16")
        #expect(cluster.operands == ["u"])
        let endsWithValueOption = try parse("-qn 2")
        #expect(endsWithValueOption.value("connections") == "2" && endsWithValueOption.has("quiet"))
    }

    @Test func theValueOfAnOptionMayStartWithADash() throws {
        let parsed = try syntax.parse(["-o", "-file-", "--header", "--x: y"])
        #expect(parsed.value("output") == "-file-")
        #expect(parsed.values("header") == ["--x: y"])
        #expect(parsed.operands.isEmpty)
    }

    @Test func doubleDashEndsTheOptionsAndALoneDashIsAnOperand() throws {
        let parsed = try syntax.parse(["-q", "-", "--", "-n", "--quiet", "x"])
        #expect(parsed.has("quiet"))
        #expect(!parsed.has("connections"))
        #expect(parsed.operands == ["-", "-n", "--quiet", "x"])
    }

    @Test func repeatableOptionsKeepEveryValueAndOthersKeepTheLast() throws {
        let parsed = try parse("-H A:1 -n 2 --header B:2 -n 3 -HC:3")
        #expect(parsed.values("header") == ["A:1", "B:2", "C:3"])
        #expect(parsed.value("connections") == "3")
        #expect(parsed.values("connections") == ["3"])
    }

    @Test func absentOptionsAreAbsent() throws {
        let parsed = try parse("u1 u2")
        #expect(!parsed.has("quiet") && parsed.value("output") == nil && parsed.values("header").isEmpty)
        #expect(parsed.operands == ["u1", "u2"])
    }

    @Test func mistakesAreNamedInTheError() {
        #expect(failure(["--conections", "4"]) == "unknown option '--conections' (did you mean '--connections'?)")
        #expect(failure(["--max"]) == "unknown option '--max' (did you mean '--max-size'?)")
        #expect(failure(["--bogus"]) == "unknown option '--bogus'")
        #expect(failure(["-x"]) == "unknown option '-x'")
        #expect(failure(["-qx"]) == "unknown option '-x'")
        #expect(failure(["--quiet=yes"]) == "option --quiet takes no value")
        #expect(failure(["-n"]) == "option -n needs a value (--connections <n>)")
        #expect(failure(["u", "--output"]) == "option --output needs a value (--output <name>)")
    }

    @Test func helpListsEveryOptionWrappedToTheWidth() {
        let help = syntax.optionsHelp(width: 60)
        let lines = help.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.allSatisfy { $0.count <= 60 })
        for option in syntax.options { #expect(help.contains(option.usage)) }
        #expect(lines.first == "  -n, --connections <n>   Parallel connections. (default: 8)")
        #expect(lines.contains("  --no-sync               Skip the fdatasync."))
    }

    @Test func wrappingBreaksAtSpacesAndKeepsLongWords() {
        #expect(wrap("aa bb cc dd", width: 5) == ["aa bb", "cc dd"])
        #expect(wrap("a verylongword b", width: 4) == ["a", "verylongword", "b"])
        #expect(wrap("", width: 10).isEmpty)
    }

    @Test func editDistanceCountsSingleCharacterEdits() {
        #expect(editDistance("kitten", "sitting") == 3)
        #expect(editDistance("", "abc") == 3)
        #expect(editDistance("abc", "abc") == 0)
        #expect(editDistance("retries", "retires") == 2)
    }
}
