/// A speed limit by day and time of day: which limit applies at a given local time, and when that
/// may next change. Pure: the caller turns the clock into a local weekday and minute (through the
/// time zone, so daylight-saving changes are the caller's calendar's, not this type's).
///
/// Text form, as `--schedule` takes it: rules separated by commas, each
/// `[DAYS ]HH:MM-HH:MM=VALUE`.
/// - `DAYS` is a day (`Mon`) or a range (`Mon-Fri`, `Fri-Mon` wraps); without it, every day.
/// - The window starts at the first time and ends before the second; an end at or before the start
///   runs past midnight into the next day (`Fri 22:00-02:00` holds Friday 22:00 to Saturday 02:00).
///   `00:00-00:00` is the whole day; `24:00` may end a window.
/// - `VALUE` is bytes per second (`K`, `M`, `G` suffixes, 1024-based), `0` for no limit, or `pause`.
///
/// The first rule whose window holds the time decides; outside every window the schedule says
/// nothing (the daemon's own limit applies).
public struct BandwidthSchedule: Sendable, Equatable {
    /// What a rule sets.
    public enum Setting: Sendable, Equatable {
        /// At most this many bytes per second.
        case limit(Int64)
        /// No limit.
        case unlimited
        /// Nothing downloads: running downloads stop (keeping their data) and wait.
        case pause
    }

    public struct Rule: Sendable, Equatable {
        /// Days the window starts on, 1 = Monday … 7 = Sunday.
        public var days: Set<Int>
        /// Minutes after midnight: the window is `[start, end)`, past midnight when `end <= start`.
        public var start: Int
        public var end: Int
        public var setting: Setting
    }

    public var rules: [Rule]

    public init(rules: [Rule]) { self.rules = rules }

    /// A local time: the weekday (1 = Monday … 7 = Sunday) and the minute of the day (0..<1440).
    public struct LocalTime: Sendable, Equatable {
        public var weekday: Int
        public var minute: Int

        public init(weekday: Int, minute: Int) {
            self.weekday = weekday
            self.minute = minute
        }
    }

    /// The setting at `time`, or `nil` outside every window.
    public func setting(at time: LocalTime) -> Setting? {
        rules.first { $0.holds(time) }?.setting
    }

    /// Minutes from `time` until the answer of ``setting(at:)`` may change: the next start or end
    /// of any window (at most a week; 1440 × 7 with no rule at all). The caller looks again then,
    /// or sooner: across a daylight-saving change the wall clock jumps.
    public func minutesUntilChange(after time: LocalTime) -> Int {
        let now = setting(at: time)
        for step in 1...(7 * 1440) {
            let minute = time.minute + step
            let later = LocalTime(weekday: (time.weekday - 1 + minute / 1440) % 7 + 1, minute: minute % 1440)
            if rules.contains(where: { $0.startsOrEnds(at: later) }), setting(at: later) != now { return step }
        }
        return 7 * 1440
    }

    /// Reads the text form.
    ///
    /// - Throws: ``ScheduleError`` naming the rule that is malformed.
    public init(parsing text: String) throws(ScheduleError) {
        var rules: [Rule] = []
        for piece in text.split(separator: ",") {
            let rule = piece.trimmingSpaces
            guard !rule.isEmpty else { continue }
            rules.append(try Self.rule(rule))
        }
        guard !rules.isEmpty else { throw ScheduleError("the schedule has no rule") }
        self.rules = rules
    }

    static let dayNames = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

    private static func rule(_ text: Substring) throws(ScheduleError) -> Rule {
        guard let equals = text.lastIndex(of: "=") else { throw ScheduleError("\"\(text)\": expected WINDOW=VALUE") }
        let value = text[text.index(after: equals)...].trimmingSpaces.lowercased()
        let head = text[..<equals].trimmingSpaces.split(separator: " ", omittingEmptySubsequences: true)
        guard head.count == 1 || head.count == 2 else { throw ScheduleError("\"\(text)\": expected [DAYS ]HH:MM-HH:MM=VALUE") }
        let days = head.count == 2 ? try Self.days(head[0], in: text) : Set(1...7)
        let times = head.last!.split(separator: "-", omittingEmptySubsequences: false)
        guard times.count == 2, let start = minute(times[0]), let end = minute(times[1]), start < 1440 else {
            throw ScheduleError("\"\(text)\": the window must be HH:MM-HH:MM")
        }
        return Rule(days: days, start: start, end: end == 1440 ? 0 : end, setting: try setting(value, in: text))
    }

    private static func days(_ text: Substring, in rule: Substring) throws(ScheduleError) -> Set<Int> {
        let parts = text.lowercased().split(separator: "-", omittingEmptySubsequences: false)
        let indices = parts.map { part in dayNames.firstIndex(of: String(part.prefix(3))).map { $0 + 1 } }
        guard (1...2).contains(parts.count), parts.allSatisfy({ $0.count >= 3 }), !indices.contains(nil) else {
            throw ScheduleError("\"\(rule)\": days are Mon, Tue, … Sun, or a range such as Mon-Fri")
        }
        let first = indices[0]!, last = indices[parts.count - 1]!
        var days: Set<Int> = [first]
        var day = first
        while day != last {
            day = day % 7 + 1
            days.insert(day)
        }
        return days
    }

    private static func minute(_ text: Substring) -> Int? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count <= 2, parts[1].count == 2, let hours = Int(parts[0]), let minutes = Int(parts[1]),
              (0...24).contains(hours), (0..<60).contains(minutes), hours < 24 || minutes == 0 else { return nil }
        return hours * 60 + minutes
    }

    private static func setting(_ value: String, in rule: Substring) throws(ScheduleError) -> Setting {
        if value == "pause" { return .pause }
        var digits = Substring(value)
        var unit: Int64 = 1
        if let last = digits.last, let index = "kmg".firstIndex(of: last) {
            unit = Int64(1) << (10 * ("kmg".distance(from: "kmg".startIndex, to: index) + 1))
            digits = digits.dropLast()
        }
        guard let number = Int64(digits), number >= 0, number <= Int64.max / unit else {
            throw ScheduleError("\"\(rule)\": the value must be a rate such as 512K or 2M, 0 for no limit, or pause")
        }
        return number == 0 ? .unlimited : .limit(number * unit)
    }
}

extension BandwidthSchedule.Rule {
    /// Whether the window holds `time`: on one of its days from `start`, or (past midnight) on
    /// the next day before `end`.
    func holds(_ time: BandwidthSchedule.LocalTime) -> Bool {
        if start < end || (start == 0 && end == 0) {
            return days.contains(time.weekday) && time.minute >= start && (end == 0 || time.minute < end)
        }
        let previous = (time.weekday + 5) % 7 + 1
        return (days.contains(time.weekday) && time.minute >= start) || (days.contains(previous) && time.minute < end)
    }

    /// Whether a window of this rule starts or ends at `time` (a minute where the answer may change).
    func startsOrEnds(at time: BandwidthSchedule.LocalTime) -> Bool {
        time.minute == start || time.minute == end
    }
}

/// A schedule that cannot be read, and why.
public struct ScheduleError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

extension Substring {
    var trimmingSpaces: Substring {
        guard let first = firstIndex(where: { $0 != " " }), let last = lastIndex(where: { $0 != " " }) else { return "" }
        return self[first...last]
    }
}
