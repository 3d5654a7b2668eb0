/// A small, table-driven command-line parser with getopt_long conventions, as curl, wget and
/// aria2 users know them:
///
/// - `--name value` and `--name=value`; `-n value`, `-nvalue`, and clusters of short flags
///   (`-qk`, `-qn16`): in a cluster the first option that takes a value takes the rest of the
///   cluster, or the next argument when the cluster ends there;
/// - the argument after an option that takes a value is its value, even when it starts with `-`;
/// - `--` ends the options; a lone `-` is an operand;
/// - an option given again replaces the earlier value, unless it is repeatable.
///
/// It exists because the command starts on every download: swift-argument-parser's reflection
/// took 3.8 ms of the 6.6 ms CPU time of `splitfetch --version` here (perf), before any request
/// could go out. Parsing with this table takes microseconds and no reflection.
public struct CommandLineSyntax: Sendable {
    public let options: [OptionSpec]

    public init(_ options: [OptionSpec]) {
        var longs = Set<String>()
        var shorts = Set<Character>()
        for option in options {
            precondition(longs.insert(option.long).inserted, "--\(option.long) is declared twice")
            if let short = option.short {
                precondition(shorts.insert(short).inserted, "-\(short) is declared twice")
            }
        }
        self.options = options
    }

    /// Parses `arguments` (without the program name).
    public func parse(_ arguments: [String]) throws(CommandLineError) -> ParsedCommandLine {
        var parsed = ParsedCommandLine()
        var index = 0
        func takeValue(for option: OptionSpec, spelled: String) throws(CommandLineError) -> String {
            index += 1
            guard index < arguments.count else { throw CommandLineError("option \(spelled) needs a value (\(option.usage))") }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--" {
                parsed.operands += arguments[(index + 1)...]
                break
            }
            if argument.hasPrefix("--") {
                let body = argument.dropFirst(2)
                let equals = body.firstIndex(of: "=")
                let name = String(body[..<(equals ?? body.endIndex)])
                let inline = equals.map { String(body[body.index(after: $0)...]) }
                guard let option = options.first(where: { $0.long == name }) else {
                    throw CommandLineError("unknown option '--\(name)'" + suggestion(for: name))
                }
                if option.takesValue {
                    if let inline {
                        parsed.record(option, inline)
                    } else {
                        parsed.record(option, try takeValue(for: option, spelled: "--\(name)"))
                    }
                } else {
                    guard inline == nil else { throw CommandLineError("option --\(name) takes no value") }
                    parsed.record(option, nil)
                }
            } else if argument.hasPrefix("-") && argument.count > 1 {
                var rest = argument.dropFirst()
                while let letter = rest.first {
                    rest = rest.dropFirst()
                    guard let option = options.first(where: { $0.short == letter }) else {
                        throw CommandLineError("unknown option '-\(letter)'")
                    }
                    if option.takesValue {
                        parsed.record(option, rest.isEmpty ? try takeValue(for: option, spelled: "-\(letter)") : String(rest))
                        break
                    }
                    parsed.record(option, nil)
                }
            } else {
                parsed.operands.append(argument)
            }
            index += 1
        }
        return parsed
    }

    /// " (did you mean '--x'?)" when one long option is a close spelling of `name`, else "".
    func suggestion(for name: String) -> String {
        let close = options.filter { $0.long.hasPrefix(name) || editDistance($0.long, name) <= 2 }
        return close.count == 1 ? " (did you mean '--\(close[0].long)'?)" : ""
    }

    /// The option list for `--help`: one entry per option, its help wrapped to `width` columns.
    public func optionsHelp(width: Int = 80) -> String {
        options.flatMap { option in
            let names = "  " + (option.short.map { "-\($0), " } ?? "") + option.usage
            var text = option.help
            if let shown = option.defaultText { text += " (default: \(shown))" }
            return helpEntry(names, text, column: 26, width: width)
        }.joined(separator: "\n")
    }
}

/// One entry of a help list: `label`, then `text` wrapped into the columns from `column` to
/// `width`, continuation lines indented to `column`. A label too long to leave two spaces before
/// `column` gets a line of its own.
public func helpEntry(_ label: String, _ text: String, column: Int, width: Int = 80) -> [String] {
    let indent = String(repeating: " ", count: column)
    let wrapped = wrap(text, width: width - column)
    var lines: [String]
    if label.count + 2 <= column {
        lines = [label + String(repeating: " ", count: column - label.count) + (wrapped.first ?? "")]
    } else {
        lines = [label, indent + (wrapped.first ?? "")]
    }
    lines += wrapped.dropFirst().map { indent + $0 }
    return lines
}

/// One option of a ``CommandLineSyntax``.
public struct OptionSpec: Sendable {
    /// The long name, without the leading `--`.
    public let long: String
    public let short: Character?
    /// What the value is called in the help (`"n"` shows as `--connections <n>`); nil for a flag.
    public let valueName: String?
    public let help: String
    /// The default shown in the help, if any.
    public let defaultText: String?
    /// Whether every occurrence is kept (`-H a -H b`) instead of the last one winning.
    public let repeatable: Bool

    public init(_ long: String, short: Character? = nil, value valueName: String? = nil, help: String,
                default defaultText: String? = nil, repeatable: Bool = false) {
        self.long = long
        self.short = short
        self.valueName = valueName
        self.help = help
        self.defaultText = defaultText
        self.repeatable = repeatable
    }

    public var takesValue: Bool { valueName != nil }

    /// `--long <value>` or `--long`.
    public var usage: String { "--\(long)" + (valueName.map { " <\($0)>" } ?? "") }
}

/// What a command line said: the options given, by long name, and the operands in order.
public struct ParsedCommandLine: Sendable, Equatable {
    public var operands: [String] = []
    private var given: [String: [String]] = [:]

    public init() {}

    mutating func record(_ option: OptionSpec, _ value: String?) {
        let value = value ?? ""
        if option.repeatable {
            given[option.long, default: []].append(value)
        } else {
            given[option.long] = [value]
        }
    }

    /// Whether the flag or option `long` was given.
    public func has(_ long: String) -> Bool { given[long] != nil }

    /// The value of option `long` (the last one given), or nil.
    public func value(_ long: String) -> String? { given[long]?.last }

    /// Every value of a repeatable option, in order.
    public func values(_ long: String) -> [String] { given[long] ?? [] }
}

/// A usage error: what was wrong with the command line, for a person to read.
public struct CommandLineError: Error, Equatable, CustomStringConvertible {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Splits `text` into lines of at most `width` characters at spaces (a longer word gets a line
/// of its own).
public func wrap(_ text: String, width: Int) -> [String] {
    var lines: [String] = []
    var line = ""
    for word in text.split(separator: " ") {
        if !line.isEmpty && line.count + 1 + word.count > width {
            lines.append(line)
            line = ""
        }
        line += (line.isEmpty ? "" : " ") + word
    }
    if !line.isEmpty { lines.append(line) }
    return lines
}

/// Levenshtein distance, for suggesting a close option name.
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
    var previous = Array(0...b.count)
    for i in 1...a.count {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...b.count {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        previous = current
    }
    return previous[b.count]
}
