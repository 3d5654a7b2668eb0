import DownloadCore
import NIOConcurrencyHelpers

/// Carrying the schedule's decisions out: each operation applies a decision of
/// `QueueSchedule` under the queue's lock and performs its actions (state changes published,
/// downloads started and stopped, the per-host count of waiting work kept); each download's
/// events and ends come back here.
extension DownloadQueue {
    /// Applies `decide` to the schedule and carries its actions out; returns whether it did
    /// anything.
    @discardableResult
    func act(_ decide: (inout QueueSchedule) -> [QueueSchedule.Action]) -> Bool {
        change { state in state.closed ? [] : decide(&state.schedule) }
    }

    /// - Parameter touching: a download whose standing may change with no action naming it (one
    ///   that ended after a stop and waits again).
    @discardableResult
    func change<E: Error>(touching: ID? = nil, _ decide: (inout State) throws(E) -> [QueueSchedule.Action]) throws(E) -> Bool {
        // The lock's closure rethrows untyped errors: the typed one travels in a Result.
        let outcome = state.withLock { state -> Result<(Bool, Effects), E> in
            do throws(E) {
                let actions = try decide(&state)
                return .success((!actions.isEmpty, apply(actions, &state, touching: touching)))
            } catch {
                return .failure(error)
            }
        }
        let (acted, effects) = try outcome.get()
        effects.run()
        return acted
    }

    /// Under the lock: reports each change, starts and stops downloads, keeps the per-host
    /// count of waiting work, and wakes the idle waiters.
    private func apply(_ actions: [QueueSchedule.Action], _ state: inout State, touching: ID?) -> Effects {
        var effects = Effects()
        var touched: Set<ID> = touching.map { [$0] } ?? []
        for action in actions {
            switch action {
            case .changed(let id, let new):
                touched.insert(id)
                let downloadState = DownloadState(new)
                publish(QueueEvent(id: id, state: downloadState), &state)
                if downloadState.isFinal {
                    // Its own subscribers' streams end.
                    let (ended, kept) = (state.subscribers.filter { $0.id == id }, state.subscribers.filter { $0.id != id })
                    effects.ended += ended.map(\.subscriber)
                    state.subscribers = kept
                }
            case .start(let id):
                touched.insert(id)
                start(id, &state)
            case .stop(let id):
                if let task = state.records[id]?.task { effects.stops.append(task) }
            }
        }
        // Under a per-host cap, waiting downloads count as work for their host: running ones
        // split no healthy range while it waits. Only the downloads the actions touched can
        // have changed.
        if let limiter = session.limiter {
            for id in touched {
                guard let entry = state.schedule.entry(id), var record = state.records[id] else { continue }
                let waits = entry.state == .waiting && !entry.running
                guard record.expected != waits else { continue }
                record.expected = waits
                limiter.expect(host: entry.host ?? Connector.host(of: record.url), waits ? 1 : -1)
                state.records[id] = record
            }
        }
        if state.schedule.isIdle {
            effects.wakes += state.idleWaiters
            state.idleWaiters = []
        }
        return effects
    }

    private func publish(_ event: QueueEvent, _ state: inout State) {
        for subscription in state.subscribers
        where (subscription.id == nil || subscription.id == event.id) && subscription.interest.wants(event) {
            subscription.subscriber.deliver(event)
        }
    }

    /// Under the lock: starts a run of `id`.
    private func start(_ id: ID, _ state: inout State) {
        guard var record = state.records[id] else { return }
        record.run += 1
        record.progress = nil
        if record.ending?.error != nil { record.ending = Ending(error: nil, statistics: record.ending?.statistics) }
        let run = record.run
        var options: DownloadOptions
        do throws(DownloadError) {
            options = try record.options(id)
        } catch {
            // Its options cannot be made: it fails at once, as a run that failed.
            record.ending = Ending(error: error, statistics: record.ending?.statistics)
            record.task = Task { [weak self] in self?.report(id, run: run) { $0.ended(id, .failed) } }
            state.records[id] = record
            return
        }
        let own = record.limit ?? RateLimit(unlimitedWithin: limit)
        record.limit = own
        options.rateLimit = own
        let download = Download(record.url, destination: record.destination, consumer: nil, options: options, session: session,
                                tap: { [weak self] event in self?.downloadEvent(event, of: id, run: run) },
                                ticket: gate.map { gate in
                                    // Reported from a task: the thread that lets it go is the
                                    // transport's, starting its request.
                                    NetworkTicket(gate: gate) { [weak self] in
                                        Task { self?.report(id, run: run) { $0.admitted(id) } }
                                    }
                                })
        observe?(id, download)
        record.task = Task { [weak self] in await self?.perform(download, id: id, run: run) }
        state.records[id] = record
    }

    /// Runs one download to its end, and reports when its network part is over and how it ended.
    private func perform(_ download: Download, id: ID, run: Int) async {
        let watcher = Task { [weak self] in
            await download.transferred()
            self?.report(id, run: run) { $0.transferred(id) }
        }
        let outcome: QueueSchedule.Outcome
        do throws(DownloadError) {
            _ = try await download.run()
            outcome = .completed
        } catch {
            outcome = error.code == .interrupted ? .stopped : .failed
        }
        await watcher.value
        report(id, run: run) { $0.ended(id, outcome) }
        // A finished task's handle holds its memory (the slabs of its async frames, tens of KB):
        // a queue keeps thousands of ended downloads, so it lets the handle go.
        state.withLock { state in
            if state.records[id]?.run == run { state.records[id]?.task = nil }
        }
    }

    private func report(_ id: ID, run: Int, _ decide: (inout QueueSchedule) -> [QueueSchedule.Action]) {
        change(touching: id) { state in
            guard !state.closed, state.records[id]?.run == run else { return [] }
            return decide(&state.schedule)
        }
    }

    /// A download's event, from the thread that emits it: kept for snapshots and handed to the
    /// subscribers (also while ``shutdown()`` stops it: its last event says it was interrupted).
    private func downloadEvent(_ event: DownloadEvent, of id: ID, run: Int) {
        state.withLock { state in
            guard var record = state.records[id], record.run == run else { return }
            switch event.kind {
            case .progress: record.progress = event.progress.map(Boxed.init)
            case .finished: record.ending = Ending(error: record.ending?.error, statistics: event.statistics)
            case .failed: record.ending = Ending(error: event.error, statistics: record.ending?.statistics)
            default: break
            }
            state.records[id] = record
            publish(QueueEvent(id: id, event: event), &state)
        }
    }
}
