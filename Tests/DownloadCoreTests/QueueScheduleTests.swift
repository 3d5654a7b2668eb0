import DownloadCore
import Testing

/// The download queue's decisions: start order, what a freed slot goes to, and a changed maximum.
@Suite("Queue schedule")
struct QueueScheduleTests {
    typealias Action = QueueSchedule.Action

    /// The `.start` actions among `actions`, in order.
    static func starts(_ actions: [Action]) -> [String] {
        actions.compactMap { if case .start(let id) = $0 { id } else { nil } }
    }

    static func stops(_ actions: [Action]) -> [String] {
        actions.compactMap { if case .stop(let id) = $0 { id } else { nil } }
    }

    /// A queue with its maximum at 0 starts nothing (clamped to 1 later); so the table adds
    /// everything paused, sets the priorities, then resumes all at once.
    @Test(arguments: [
        // (id, priority) in the order added, maximum → the downloads started, in order
        ([("a", 0), ("b", 0), ("c", 0)], 2, ["a", "b"]),
        ([("a", 0), ("b", 5), ("c", 1)], 2, ["b", "c"]),
        ([("a", 1), ("b", 5), ("c", 5)], 3, ["b", "c", "a"]),  // equal priorities: the earlier position
        ([("a", -1), ("b", 0)], 1, ["b"]),
    ] as [([(String, Int)], Int, [String])])
    func startOrderIsPriorityThenPosition(added: [(String, Int)], maximum: Int, started: [String]) {
        var queue = QueueSchedule(maximumActive: maximum)
        for (id, priority) in added { _ = queue.add(id, priority: priority, paused: true) }
        #expect(Self.starts(queue.resumeAll()) == started)
        #expect(queue.slotsHeld == started.count)
    }

    @Test func aDownloadAddedWithAPositionJumpsTheQueue() {
        var queue = QueueSchedule(maximumActive: 1)
        #expect(Self.starts(queue.add("a")) == ["a"])
        _ = queue.add("b")
        _ = queue.add("c")
        _ = queue.add("d", at: 1)  // before b
        #expect(queue.entries.map(\.id) == ["a", "d", "b", "c"])
        #expect(Self.starts(queue.ended("a", .completed)) == ["d"])
        _ = queue.move("c", to: 0)
        #expect(Self.starts(queue.ended("d", .completed)) == ["c"])
    }

    /// Positions are found by rank, not by a walk: after inserts, moves and forgets, every
    /// download's position is its index among the entries.
    @Test func positionsFollowInsertsMovesAndForgets() {
        var queue = QueueSchedule(maximumActive: 1)
        var rng = SplitMix64(seed: 5)
        var live: [String] = []
        for step in 0..<400 {
            let roll = rng.next() % 10
            if roll < 5 || live.count < 3 {
                let id = "d\(step)"
                let at = rng.next() % 3 == 0 ? Int(rng.next() % UInt64(live.count + 1)) : nil
                _ = queue.add(id, at: at, paused: true)
                live.append(id)
            } else if roll < 8 {
                _ = queue.move(live[Int(rng.next() % UInt64(live.count))], to: Int(rng.next() % UInt64(live.count)))
            } else {
                let id = live.remove(at: Int(rng.next() % UInt64(live.count)))
                _ = queue.remove(id)
                let forgotten = queue.forget(id)
                #expect(forgotten)
            }
            let ids = queue.entries.map(\.id)
            #expect(Set(ids) == Set(live))
            for (index, id) in ids.enumerated() where queue.position(of: id) != index {
                Issue.record("step \(step): \(id) at \(index), position(of:) says \(String(describing: queue.position(of: id)))")
            }
        }
        #expect(queue.position(of: "unknown") == nil)
    }

    /// A maximum of 0 holds the queue: the running ones stop and wait (not paused), nothing
    /// starts, and raising the maximum starts them again in their order.
    @Test func aMaximumOfZeroHoldsTheQueue() {
        var queue = QueueSchedule(maximumActive: 2)
        _ = queue.add("a")
        _ = queue.add("b")
        _ = queue.add("c")
        let held = queue.setMaximumActive(0)
        #expect(Set(Self.stops(held)) == ["a", "b"])
        #expect(queue.entries.map(\.state) == [.waiting, .waiting, .waiting])
        #expect(Self.starts(queue.ended("a", .stopped) + queue.ended("b", .stopped)).isEmpty)
        #expect(Self.starts(queue.add("d")).isEmpty)
        #expect(Self.starts(queue.setMaximumActive(2)) == ["a", "b"])
    }

    /// One download per host at once: a free slot goes past a download whose host has its cap,
    /// to the next whose host has room; the held one starts when its host's slot frees.
    @Test func thePerHostCapPassesOverAHostAtItsCap() {
        var queue = QueueSchedule(maximumActive: 3)
        _ = queue.setMaximumPerHost(1)
        #expect(Self.starts(queue.add("a1", host: "a")) == ["a1"])
        #expect(Self.starts(queue.add("a2", host: "a")).isEmpty)
        #expect(Self.starts(queue.add("b1", host: "b")) == ["b1"])
        #expect(Self.starts(queue.add("x")) == ["x"])  // no host: no cap
        #expect(Self.starts(queue.ended("a1", .completed)) == ["a2"])
        // The slot is back once the bytes are in: a3 starts while a2 syncs its file.
        _ = queue.add("a3", host: "a")
        #expect(Self.starts(queue.transferred("a2")) == ["a3"])
        // Raising the cap starts what it held back.
        _ = queue.add("b2", host: "b")
        _ = queue.ended("x", .completed)
        #expect(Self.starts(queue.setMaximumPerHost(2)) == ["b2"])
    }

    enum Freeing: String, CaseIterable, Sendable {
        case completion, failure, pause, removal, transferred
    }

    /// Two slots, a and b active, c and d waiting: whatever frees a's slot, c gets it, and a
    /// ends in the right state.
    @Test(arguments: [
        (Freeing.completion, QueueSchedule.State.complete, false),
        (.failure, .failed, false),
        (.pause, .paused, true),
        (.removal, .removed, true),
        (.transferred, .active, false),
    ])
    func aFreedSlotGoesToTheNextWaiting(how: Freeing, stateOfA: QueueSchedule.State, stops: Bool) {
        var queue = QueueSchedule(maximumActive: 2)
        var started: [String] = []
        for id in ["a", "b", "c", "d"] { started += Self.starts(queue.add(id)) }
        #expect(started == ["a", "b"])
        var actions: [Action]
        switch how {
        case .completion: actions = queue.ended("a", .completed)
        case .failure: actions = queue.ended("a", .failed)
        case .pause: actions = queue.pause("a")
        case .removal: actions = queue.remove("a")
        case .transferred: actions = queue.transferred("a")
        }
        #expect(Self.stops(actions) == (stops ? ["a"] : []))
        if stops {
            // A stopped download holds its slot until it has ended.
            #expect(Self.starts(actions).isEmpty)
            #expect(queue.slotsHeld == 2)
            actions = queue.ended("a", .stopped)
        }
        #expect(Self.starts(actions) == ["c"])
        #expect(queue.entry("a")?.state == stateOfA)
        #expect(queue.entry("c")?.state == .active && queue.entry("d")?.state == .waiting)
        #expect(queue.slotsHeld == 2)
    }

    @Test(arguments: [
        // maximum before, after → stopped (last in start order first), started
        (3, 1, ["c", "b"], [String]()),
        (3, 2, ["c"], []),
        (2, 4, [], ["c", "d"]),
        (1, 1, [], []),
    ])
    func aChangedMaximum(before: Int, after: Int, stopped: [String], started: [String]) {
        var queue = QueueSchedule(maximumActive: before)
        for id in ["a", "b", "c", "d", "e"] { _ = queue.add(id) }
        let actions = queue.setMaximumActive(after)
        #expect(Self.stops(actions) == stopped)
        #expect(Self.starts(actions) == started)
        // Those stopped wait again, and start once the slots they held are free.
        for id in stopped {
            #expect(queue.entry(id)?.state == .waiting)
            #expect(Self.starts(queue.ended(id, .stopped)).isEmpty)
        }
        #expect(queue.slotsHeld == min(after, 5))
        if after < before {
            // A freed slot goes to the earliest waiting: the first stopped one comes back last.
            #expect(Self.starts(queue.ended("a", .completed)) == [stopped.last!])
        }
    }

    @Test func pauseAndResumeAllKeepOrderAndReportEveryChange() {
        var queue = QueueSchedule(maximumActive: 1)
        _ = queue.add("a")
        _ = queue.add("b")
        let paused = queue.pauseAll()
        #expect(paused == [.changed("a", .paused), .stop("a"), .changed("b", .paused)])
        #expect(queue.resumeAll() == [.changed("a", .waiting), .changed("b", .waiting)])  // a still winds down
        #expect(queue.ended("a", .stopped) == [.changed("a", .active), .start("a")])
        #expect(queue.ended("a", .completed) == [.changed("a", .complete), .changed("b", .active), .start("b")])
    }

    @Test func aDownloadThatFinishesBeforeItsStopIsComplete() {
        var queue = QueueSchedule(maximumActive: 1)
        _ = queue.add("a")
        _ = queue.pause("a")
        #expect(queue.ended("a", .completed) == [.changed("a", .complete)])
        // Removed stays removed.
        _ = queue.add("b")
        _ = queue.remove("b")
        #expect(queue.ended("b", .completed).isEmpty && queue.entry("b")?.state == .removed)
    }

    @Test func aFailedDownloadCanBeTriedAgainAndAFinalOneForgotten() {
        var queue = QueueSchedule(maximumActive: 1)
        _ = queue.add("a")
        _ = queue.ended("a", .failed)
        #expect(queue.isIdle)
        #expect(queue.resume("a") == [.changed("a", .waiting), .changed("a", .active), .start("a")])
        let forgotWhileRunning = queue.forget("a")
        #expect(!forgotWhileRunning)
        _ = queue.ended("a", .completed)
        let forgot = queue.forget("a")
        #expect(forgot && queue.entries.isEmpty)
    }

    @Test func anUnexpectedStopIsAFailure() {
        var queue = QueueSchedule(maximumActive: 1)
        _ = queue.add("a")
        #expect(queue.ended("a", .stopped) == [.changed("a", .failed)])
    }

    @Test func operationsOnUnknownOrWrongStatesDoNothing() {
        var queue = QueueSchedule(maximumActive: 1)
        #expect(queue.pause("x").isEmpty && queue.resume("x").isEmpty && queue.remove("x").isEmpty)
        _ = queue.add("a")
        #expect(queue.resume("a").isEmpty)  // active, not paused
        _ = queue.ended("a", .completed)
        #expect(queue.pause("a").isEmpty)  // complete
        #expect(queue.ended("a", .completed).isEmpty)  // not running
    }

    /// One of the operations both random tests make, by `roll` (0–8): an add (anywhere, perhaps
    /// paused, with or without a host), a pause, resume, removal, move or new priority of any
    /// download, or a changed maximum or per-host cap.
    static func commonOperation(_ roll: UInt64, _ queue: inout QueueSchedule, _ random: inout SplitMix64,
                                added: inout Int) -> [Action] {
        let entries = queue.entries
        func any() -> String { entries.isEmpty ? "none" : entries[Int(random.next() % UInt64(entries.count))].id }
        switch roll {
        case 0, 1, 2:
            added += 1
            let position = random.next() % 3 == 0 ? Int(random.next() % UInt64(entries.count + 1)) : nil
            return queue.add("d\(added)", priority: Int(random.next() % 3), at: position, paused: random.next() % 4 == 0,
                             host: random.next() % 3 == 0 ? nil : "h\(random.next() % 3)")
        case 3: return queue.pause(any())
        case 4: return queue.resume(any())
        case 5: return queue.remove(any())
        case 6: return queue.move(any(), to: Int(random.next() % UInt64(entries.count + 1)))
        case 7: return queue.setPriority(any(), Int(random.next() % 3))
        default:
            return random.next() % 2 == 0 ? queue.setMaximumActive(Int(random.next() % 5))
                : queue.setMaximumPerHost(random.next() % 2 == 0 ? nil : 1 + Int(random.next() % 2))
        }
    }

    /// Seeded random operations (adds anywhere, pauses, resumes, removals, moves, priorities,
    /// transfers, ends, changed maxima and caps). After each one the queue's starts obey its rules,
    /// checked from what it shows (its entries), not from how it keeps them:
    /// - no slot is left free while a download that may start waits;
    /// - nothing started passes over a waiting download earlier in start order that may start;
    /// - the slots held are the maximum's at most (unless a lower maximum is still stopping them).
    @Test(arguments: 1...40)
    func randomOperationsKeepTheStartRules(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var queue = QueueSchedule(maximumActive: 1 + Int(random.next() % 4))
        var added = 0
        for _ in 0..<300 {
            let entries = queue.entries
            let actions: [Action]
            switch random.next() % 12 {
            case 0, 1:
                let holding = entries.filter(\.holdsSlot)
                actions = holding.isEmpty ? [] : queue.transferred(holding[Int(random.next() % UInt64(holding.count))].id)
            case 2:
                let running = entries.filter(\.running)
                let outcomes: [QueueSchedule.Outcome] = [.completed, .failed, .stopped]
                actions = running.isEmpty ? [] : queue.ended(running[Int(random.next() % UInt64(running.count))].id,
                                                             outcomes[Int(random.next() % 3)])
            case let roll:
                actions = Self.commonOperation(roll % 9, &queue, &random, added: &added)
            }
            let now = queue.entries
            let held = Dictionary(grouping: now.filter(\.holdsSlot), by: { $0.host ?? "" }).mapValues(\.count)
            let capped = { (entry: QueueSchedule.Entry) -> Bool in
                guard let cap = queue.maximumPerHost, let host = entry.host else { return false }
                return held[host, default: 0] >= cap
            }
            let position = Dictionary(uniqueKeysWithValues: now.enumerated().map { ($1.id, $0) })
            let before = { (a: QueueSchedule.Entry, b: QueueSchedule.Entry) in
                a.priority != b.priority ? a.priority > b.priority : position[a.id]! < position[b.id]!
            }
            let mayStart = now.filter { $0.state == .waiting && !$0.running && !capped($0) }
            if queue.slotsHeld < queue.maximumActive {
                #expect(mayStart.isEmpty, "seed \(seed): a slot is free while \(mayStart.map(\.id)) may start")
            }
            for id in Self.starts(actions) {
                let started = now.first { $0.id == id }!
                #expect(started.state == .active && started.holdsSlot, "seed \(seed): \(id) started but is \(started.state)")
                let passedOver = mayStart.filter { before($0, started) }
                #expect(passedOver.isEmpty, "seed \(seed): \(id) started before \(passedOver.map(\.id))")
            }
            let stopping = now.filter { $0.holdsSlot && $0.stopping }.count
            #expect(queue.slotsHeld - stopping <= queue.maximumActive, "seed \(seed): \(queue.slotsHeld) slots held")
            #expect(queue.slotsHeld == now.filter(\.holdsSlot).count)
        }
    }

    // MARK: - Ready ahead

    @Test func readiedDownloadsWaitUntilAdmittedThenHoldTheirSlots() {
        var queue = QueueSchedule(maximumActive: 2, readiesAhead: true)
        for id in ["a", "b", "c", "d", "e"] { _ = queue.add(id, paused: true) }
        // All four started, none active yet: a and b are let go by the gate first.
        #expect(Self.starts(queue.resumeAll()) == ["a", "b"])
        #expect(queue.entries.filter(\.readied).map(\.id) == ["a", "b"])
        #expect(queue.admitted("a") == [.changed("a", .active), .start("c")])
        #expect(queue.admitted("b") == [.changed("b", .active), .start("d")])
        #expect(queue.slotsHeld == 2 && queue.readiedCount == 2)
        #expect(queue.entry("c")?.state == .waiting && queue.entry("c")?.readied == true)
        // A full house: a network part ending frees a slot, not a readied place.
        #expect(queue.transferred("a").isEmpty)
        #expect(queue.admitted("c") == [.changed("c", .active), .start("e")])
        // d's bytes all arrived before its admission was reported: active, and a place is free.
        #expect(queue.transferred("d") == [.changed("d", .active)])
        #expect(queue.ended("e", .failed) == [.changed("e", .failed)])  // before its admission
        #expect(queue.readiedCount == 0 && queue.slotsHeld == 2)
        #expect(queue.admitted("e").isEmpty)  // too late: it ended
    }

    /// The readied are the first waiting: a download moved or re-prioritised ahead of one stops
    /// the last readied, which waits again, and takes its place when it has ended.
    @Test func aDownloadMovedAheadOfTheReadiedTakesTheLastPlace() {
        var queue = QueueSchedule(maximumActive: 1, readiesAhead: true)
        for id in ["a", "b", "c"] { _ = queue.add(id) }
        _ = queue.admitted("a")
        #expect(queue.entries.filter(\.readied).map(\.id) == ["b"])
        #expect(queue.move("c", to: 0) == [.stop("b")])
        #expect(queue.ended("b", .stopped) == [.start("c")])
        #expect(queue.entry("b")?.state == .waiting && queue.entry("c")?.readied == true)
        #expect(queue.setPriority("b", 5) == [.stop("c")])
        #expect(queue.ended("c", .stopped) == [.start("b")])
    }

    @Test func aLowerMaximumStopsTheReadiedBeyondIt() {
        var queue = QueueSchedule(maximumActive: 2, readiesAhead: true)
        for id in ["a", "b", "c", "d"] { _ = queue.add(id) }
        _ = queue.admitted("a")
        _ = queue.admitted("b")
        #expect(queue.entries.filter(\.readied).map(\.id) == ["c", "d"])
        // b (the last active) and d (the last readied) stop and wait again.
        #expect(Set(Self.stops(queue.setMaximumActive(1))) == ["b", "d"])
        #expect(queue.entry("b")?.state == .waiting && queue.entry("d")?.state == .waiting)
        #expect(queue.ended("d", .stopped).isEmpty)  // c is readied, one place for a maximum of 1
        // Pausing a readied one stops it too; it stays paused when it ends.
        #expect(queue.pause("c") == [.changed("c", .paused), .stop("c")])
        _ = queue.ended("c", .stopped)
        #expect(queue.entry("c")?.state == .paused)
    }

    /// Seeded random operations on a queue that readies ahead, admissions among them. After each:
    /// - the readied (not told to stop) are waiting and hold no slot, at most the maximum of them;
    /// - no place to ready is free while a download that may be readied waits;
    /// - each download readied (and not told to stop) is among the first `maximum` of those
    ///   readied or waiting that may start, in start order;
    /// - slots are held only by admitted downloads, the maximum's at most (bar those stopping),
    ///   when admissions come only while a permit is free, as the gate gives them.
    @Test(arguments: 1...40)
    func randomOperationsKeepTheReadyAheadRules(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        var queue = QueueSchedule(maximumActive: 1 + Int(random.next() % 4), readiesAhead: true)
        var added = 0
        for _ in 0..<300 {
            let entries = queue.entries
            let pick = { (among: [QueueSchedule.Entry]) in among.isEmpty ? "none" : among[Int(random.next() % UInt64(among.count))].id }
            let actions: [Action]
            switch random.next() % 14 {
            case 0, 1:
                // The gate lets one go only while a permit is free: fewer hold one than the maximum.
                actions = queue.slotsHeld < queue.maximumActive ? queue.admitted(pick(entries.filter(\.readied))) : []
            case 2: actions = queue.transferred(pick(entries.filter { $0.holdsSlot || $0.readied }))
            case 3:
                let outcomes: [QueueSchedule.Outcome] = [.completed, .failed, .stopped]
                actions = queue.ended(pick(entries.filter(\.running)), outcomes[Int(random.next() % 3)])
            case let roll:
                actions = Self.commonOperation(roll % 9, &queue, &random, added: &added)
            }
            let now = queue.entries
            let taken = Dictionary(grouping: now.filter { $0.holdsSlot || $0.readied }, by: { $0.host ?? "" }).mapValues(\.count)
            let capped = { (entry: QueueSchedule.Entry) -> Bool in
                guard let cap = queue.maximumPerHost, let host = entry.host else { return false }
                return taken[host, default: 0] >= cap
            }
            let position = Dictionary(uniqueKeysWithValues: now.enumerated().map { ($1.id, $0) })
            let before = { (a: QueueSchedule.Entry, b: QueueSchedule.Entry) in
                a.priority != b.priority ? a.priority > b.priority : position[a.id]! < position[b.id]!
            }
            let readied = now.filter { $0.readied && !$0.stopping }
            #expect(readied.allSatisfy { $0.state == .waiting && !$0.holdsSlot }, "seed \(seed): a readied one is not waiting")
            #expect(readied.count <= queue.maximumActive, "seed \(seed): \(readied.count) readied")
            #expect(queue.readiedCount == now.filter(\.readied).count)
            let mayStart = now.filter { $0.state == .waiting && !$0.running && !capped($0) }
            if min(2 * queue.maximumActive - queue.slotsHeld, queue.maximumActive) > queue.readiedCount {
                #expect(mayStart.isEmpty, "seed \(seed): a place is free while \(mayStart.map(\.id)) may be readied")
            }
            // Each readied one is among the first `maximum` of those readied or ready to be.
            let candidates = readied + mayStart
            for ready in readied {
                let ahead = candidates.filter { before($0, ready) }
                #expect(ahead.count < queue.maximumActive, "seed \(seed): \(ready.id) is readied while \(ahead.map(\.id)) come first")
            }
            for id in Self.starts(actions) {
                let started = now.first { $0.id == id }!
                #expect(started.state == .waiting && started.readied, "seed \(seed): \(id) started but is \(started.state)")
                let passedOver = mayStart.filter { before($0, started) }
                #expect(passedOver.isEmpty, "seed \(seed): \(id) readied before \(passedOver.map(\.id))")
            }
            let stopping = now.filter { $0.holdsSlot && $0.stopping }.count
            #expect(queue.slotsHeld - stopping <= queue.maximumActive, "seed \(seed): \(queue.slotsHeld) slots held")
            #expect(queue.slotsHeld == now.filter(\.holdsSlot).count)
        }
    }
}
