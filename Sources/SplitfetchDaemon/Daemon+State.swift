import DownloadCore
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import Splitfetch
import SystemPackage

extension Daemon {
    /// The daemon's records of its jobs, under one lock.
    struct State {
        var jobs: [String: Job] = [:]
        /// The files of the unfinished jobs: a second job for one of them is refused.
        var destinations: Set<String> = []
        /// The files of jobs added and not yet committed, with their GIDs: an add of one of them
        /// is asked to come again (the first may still fail, and then there is no job). In a
        /// fleet, a read of the whole queue does not take their absence as a removal.
        var saving: [String: String] = [:]
        /// The largest sort key given so far: an appended job takes the next.
        var lastOrder: Double = 0
        /// The global options as aria2 reports them (`getGlobalOption`).
        var globalOptions: [String: String] = [:]
        var nextListener: UInt64 = 0
        /// How many jobs are in each state.
        var counts: [DownloadState: Int] = [:]
        /// The jobs active now.
        var active: Set<String> = []
        /// The unfinished jobs in queue order (priority, then `order`), made when asked for after a
        /// change of the set or of its order; `nil` until then.
        var ordered: [String]?
        /// Per file, the validators of its newest complete download (kept when the job is purged:
        /// the library checks them against the file's size and time anyway).
        var recorded: [String: (finishedAt: Double, validators: ConditionalRefresh.Recorded)] = [:]

        /// Records a job (added, changed or loaded); a finished job's file is free again.
        mutating func store(_ job: Job) {
            let old = jobs.updateValue(job, forKey: job.gid)
            if let old { counts[old.state, default: 0] -= 1 }
            counts[job.state, default: 0] += 1
            if job.state == .active { active.insert(job.gid) } else { active.remove(job.gid) }
            if old == nil || old!.state.isFinal != job.state.isFinal || old!.order != job.order || old!.priority != job.priority {
                ordered = nil
            }
            lastOrder = max(lastOrder, job.order)
            // A file named by the server's Content-Disposition changes the job's path as it ends.
            if let old, !old.state.isFinal { destinations.remove(old.destination) }
            if !job.state.isFinal { destinations.insert(job.destination) }
            // The newest complete download of each file gives the validators a refresh asks with.
            if job.state == .complete, let validators = job.validators,
               (recorded[job.destination]?.finishedAt ?? -.infinity) <= (job.finishedAt ?? 0) {
                recorded[job.destination] = (job.finishedAt ?? 0, validators)
            }
        }

        /// Drops a job: one never committed, or a finished one purged.
        mutating func forget(_ job: Job) {
            guard let old = jobs.removeValue(forKey: job.gid) else { return }
            counts[old.state, default: 0] -= 1
            active.remove(old.gid)
            if !old.state.isFinal {
                destinations.remove(old.destination)
                ordered = nil
            }
        }

        /// The unfinished jobs' GIDs in queue order.
        mutating func queueOrder() -> [String] {
            if let ordered { return ordered }
            let made = jobs.values.filter { !$0.state.isFinal }
                .sorted { ($0.priority, -$0.order) > ($1.priority, -$1.order) }.map(\.gid)
            ordered = made
            return made
        }

        /// A sort key for a job placed at `position` among the unfinished ones (the end if `nil`).
        func order(at position: Int?) -> Double {
            guard let position else { return lastOrder + 1 }
            let live = jobs.values.filter { !$0.state.isFinal }.map(\.order).sorted()
            guard position < live.count else { return lastOrder + 1 }
            let index = max(0, position)
            let after = live[index]
            let before = index > 0 ? live[index - 1] : after - 2
            return (before + after) / 2
        }
    }
}
