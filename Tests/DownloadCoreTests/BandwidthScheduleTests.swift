import DownloadCore
import Testing

/// The schedule's decision: which limit applies at a local weekday and minute, and when to look
/// again. (Daylight-saving changes are the caller's calendar's: see the daemon's tests.)
@Suite("Bandwidth schedule")
struct BandwidthScheduleTests {
    typealias S = BandwidthSchedule
    static let MiB: Int64 = 1 << 20

    static func at(_ weekday: Int, _ hour: Int, _ minute: Int) -> S.LocalTime { .init(weekday: weekday, minute: hour * 60 + minute) }

    @Test("which rule holds", arguments: [
        // The example: weekdays limited by day, unlimited by night, weekends unruled.
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(1, 7, 59), S.Setting?.some(.unlimited)),
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(1, 8, 0), .limit(MiB)),
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(5, 17, 59), .limit(MiB)),
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(5, 18, 0), .unlimited),
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(6, 12, 0), nil),
        // Past midnight: Friday's window runs into Saturday, not into Sunday.
        ("Fri 22:00-02:00=pause", at(5, 21, 59), nil),
        ("Fri 22:00-02:00=pause", at(5, 23, 59), .pause),
        ("Fri 22:00-02:00=pause", at(6, 0, 0), .pause),
        ("Fri 22:00-02:00=pause", at(6, 1, 59), .pause),
        ("Fri 22:00-02:00=pause", at(6, 2, 0), nil),
        ("Fri 22:00-02:00=pause", at(7, 1, 0), nil),
        // A range of days that wraps the week; a whole day; 24:00 as an end.
        ("Sat-Mon 00:00-00:00=512K", at(7, 12, 0), .limit(512 << 10)),
        ("Sat-Mon 00:00-00:00=512K", at(1, 23, 59), .limit(512 << 10)),
        ("Sat-Mon 00:00-00:00=512K", at(2, 0, 0), nil),
        ("20:00-24:00=2M", at(3, 23, 59), .limit(2 * MiB)),
        ("20:00-24:00=2M", at(4, 0, 0), nil),
        // The first rule that holds decides.
        ("Mon 09:00-10:00=pause, 00:00-00:00=8M", at(1, 9, 30), .pause),
        ("Mon 09:00-10:00=pause, 00:00-00:00=8M", at(1, 10, 0), .limit(8 * MiB)),
    ])
    func setting(text: String, time: S.LocalTime, expected: S.Setting?) throws {
        #expect(try S(parsing: text).setting(at: time) == expected)
    }

    @Test("when to look again", arguments: [
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(1, 7, 0), 60),      // at 08:00
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(5, 18, 0), 14 * 60), // Saturday 08:00: the night rule ends
        ("Mon-Fri 08:00-18:00=1M, 18:00-08:00=0", at(6, 8, 0), 10 * 60),  // Saturday 18:00
        ("Fri 22:00-02:00=pause", at(6, 1, 0), 60),                        // Saturday 02:00
        ("Fri 22:00-02:00=pause", at(6, 2, 0), 6 * 1440 + 20 * 60),       // next Friday 22:00
        // Adjacent windows with the same value: no change at their seam.
        ("08:00-12:00=1M, 12:00-18:00=1M", at(2, 9, 0), 9 * 60),
    ])
    func nextChange(text: String, time: S.LocalTime, minutes: Int) throws {
        #expect(try S(parsing: text).minutesUntilChange(after: time) == minutes)
    }

    @Test("malformed schedules are refused with the rule named", arguments: [
        "", "Mon-Fri", "08:00=1M", "Mon-Fri 8-18=1M", "Mon-Fri 08:00-18:00", "Moon 08:00-18:00=1M",
        "25:00-26:00=1M", "08:60-09:00=1M", "08:00-09:00=fast", "08:00-09:00=-1", "Mon Tue 08:00-09:00=1M",
    ])
    func malformed(text: String) {
        #expect(throws: ScheduleError.self) { try S(parsing: text) }
    }
}
