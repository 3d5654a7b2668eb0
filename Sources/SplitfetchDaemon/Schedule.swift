import DownloadCore
import Foundation
import NIOConcurrencyHelpers
import Splitfetch

/// The daemon's limits over time: its own (`max-overall-download-limit`,
/// `max-concurrent-downloads`), and a ``BandwidthSchedule`` that overrides them inside its
/// windows. Which setting holds is the schedule's pure decision; this applies it to the queue at
/// each change and sleeps until the next (at most a quarter of an hour, so that a daylight-saving
/// jump of the wall clock is caught).
final class ScheduleRunner: Sendable {
    struct State {
        var schedule: BandwidthSchedule?
        var scheduleText = ""
        /// The daemon's own limits, in force outside the schedule's windows.
        var bytesPerSecond: Int64?
        var maximumActive: Int
        var task: Task<Void, Never>?
        /// What was applied last (for the log and the tests).
        var applied: BandwidthSchedule.Setting?
    }

    let queue: DownloadQueue
    /// The calendar given, or `nil` for the current one, looked up when a schedule is first
    /// applied: without a schedule the daemon never reads the time zone, whose data (ICU's) held
    /// 2.6 MiB of its resident memory.
    private let givenCalendar: Calendar?
    var calendar: Calendar { givenCalendar ?? .current }
    let state: NIOLockedValueBox<State>

    init(queue: DownloadQueue, bytesPerSecond: Int64?, maximumActive: Int, calendar: Calendar? = nil) {
        self.queue = queue
        givenCalendar = calendar
        state = NIOLockedValueBox(State(bytesPerSecond: bytesPerSecond, maximumActive: maximumActive))
    }

    /// Sets (or, with `nil`, clears) the schedule and applies it now.
    func setSchedule(_ schedule: BandwidthSchedule?, text: String) {
        state.withLockedValue { state in
            state.schedule = schedule
            state.scheduleText = schedule == nil ? "" : text
        }
        restart()
    }

    var scheduleText: String { state.withLockedValue { $0.scheduleText } }

    /// The daemon's own limits changed (`changeGlobalOption`): in force outside the windows.
    func setOwn(bytesPerSecond: Int64?? = nil, maximumActive: Int? = nil) {
        state.withLockedValue { state in
            if let bytesPerSecond { state.bytesPerSecond = bytesPerSecond }
            if let maximumActive { state.maximumActive = maximumActive }
        }
        restart()
    }

    func stop() {
        state.withLockedValue { $0.task }?.cancel()
    }

    /// Applies what holds now and schedules the next look.
    private func restart() {
        let task = Task { [weak self] in
            while !Task.isCancelled, let self {
                let wait = self.applyNow(at: Date())
                try? await Task.sleep(for: .seconds(wait))
            }
        }
        state.withLockedValue { state in
            state.task?.cancel()
            state.task = task
        }
    }

    /// Applies the setting for `date`; returns the seconds until the next look.
    @discardableResult
    func applyNow(at date: Date) -> Double {
        // The local time only for a schedule (a schedule set meanwhile is applied by its own
        // restart).
        let scheduled: Calendar? = state.withLockedValue { $0.schedule == nil } ? nil : self.calendar
        let time = scheduled.map { Self.localTime(date, calendar: $0) }
        let (setting, wait, own) = state.withLockedValue { state -> (BandwidthSchedule.Setting?, Double, (Int64?, Int)) in
            guard let time, let calendar = scheduled, let schedule = state.schedule else {
                state.applied = nil
                return (nil, 24 * 3600, (state.bytesPerSecond, state.maximumActive))
            }
            let setting = schedule.setting(at: time)
            state.applied = setting
            let wait = Self.secondsUntilLook(schedule, at: date, calendar: calendar)
            return (setting, wait, (state.bytesPerSecond, state.maximumActive))
        }
        switch setting {
        case .limit(let rate)?:
            queue.setBytesPerSecond(rate)
            queue.setMaximumActive(own.1)
        case .unlimited?:
            queue.setBytesPerSecond(nil)
            queue.setMaximumActive(own.1)
        case .pause?:
            queue.setMaximumActive(0)
        case nil:
            queue.setBytesPerSecond(own.0)
            queue.setMaximumActive(own.1)
        }
        return wait
    }

    /// The local weekday (1 = Monday) and minute of `date` in `calendar`'s time zone.
    static func localTime(_ date: Date, calendar: Calendar) -> BandwidthSchedule.LocalTime {
        let parts = calendar.dateComponents([.weekday, .hour, .minute], from: date)
        // Calendar's weekday: 1 = Sunday … 7 = Saturday.
        return .init(weekday: (parts.weekday! + 5) % 7 + 1, minute: parts.hour! * 60 + parts.minute!)
    }

    /// Seconds from `date` to the next minute at which the schedule's answer may change, at most
    /// 900: the wall clock can jump (daylight saving), so a longer sleep looks again first.
    static func secondsUntilLook(_ schedule: BandwidthSchedule, at date: Date, calendar: Calendar) -> Double {
        let minutes = schedule.minutesUntilChange(after: localTime(date, calendar: calendar))
        let second = Double(calendar.component(.second, from: date)) + date.timeIntervalSince1970.truncatingRemainder(dividingBy: 1)
        return min(900, max(0.05, Double(minutes) * 60 - second))
    }
}
