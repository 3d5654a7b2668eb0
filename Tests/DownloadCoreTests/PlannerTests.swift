import DownloadCore
import Testing

@Suite("Planner")
struct PlannerTests {
    /// Checks every property a plan must have, returning the first failure.
    static func violation(_ plan: [ByteRange], size: Int64, connections: Int, minimum: Int64) -> String? {
        if size == 0 { return plan.isEmpty ? nil : "non-empty plan for size 0" }
        guard !plan.isEmpty else { return "empty plan for size \(size)" }
        guard plan.count <= connections else { return "\(plan.count) ranges for \(connections) connections" }
        var cursor: Int64 = 0
        for range in plan {
            if range.lowerBound != cursor { return "gap or overlap at \(cursor): \(range)" }
            if range.isEmpty { return "empty range \(range)" }
            if plan.count > 1 && range.count < minimum { return "range \(range) below minimum \(minimum)" }
            cursor = range.upperBound
        }
        return cursor == size ? nil : "plan ends at \(cursor), size \(size)"
    }

    @Test("random plans cover [0, size) exactly, never overlap, respect the minimum", arguments: [1, 2, 3, 42, 1234] as [UInt64])
    func randomPlans(seed: UInt64) {
        var rng = SplitMix64(seed: seed)
        for _ in 0..<2000 {
            let size: Int64 = switch Int.random(in: 0..<4, using: &rng) {
            case 0: Int64.random(in: 0...16, using: &rng)
            case 1: Int64.random(in: 0...100_000, using: &rng)
            case 2: Int64.random(in: 0...(1 << 34), using: &rng)
            default: Int64.random(in: 0...(1 << 50), using: &rng)
            }
            let connections = Int.random(in: 1...64, using: &rng)
            let minimum = Int64.random(in: 1...(1 << 22), using: &rng)
            let plan = Planner.plan(size: size, connections: connections, minimumSegmentSize: minimum)
            let problem = Self.violation(plan, size: size, connections: connections, minimum: minimum)
            #expect(problem == nil, "size \(size) n \(connections) min \(minimum): \(problem ?? "")")
            // Same input, same plan.
            #expect(plan == Planner.plan(size: size, connections: connections, minimumSegmentSize: minimum))
        }
    }

    @Test func evenSplitUsesEveryConnection() {
        let plan = Planner.plan(size: 256 << 20, connections: 16, minimumSegmentSize: 1 << 20)
        #expect(plan.count == 16)
        #expect(plan.allSatisfy { $0.count == 16 << 20 })
    }

    @Test func smallFilesGetFewerRanges() {
        #expect(Planner.plan(size: 1, connections: 8, minimumSegmentSize: 1 << 20) == [ByteRange(0, 1)])
        #expect(Planner.plan(size: 3 << 20, connections: 8, minimumSegmentSize: 1 << 20).count == 3)
        #expect(Planner.plan(size: 0, connections: 8, minimumSegmentSize: 1).isEmpty)
    }

    @Test func boundariesAreAligned() {
        let plan = Planner.plan(size: 10_000_019, connections: 7, minimumSegmentSize: 1000)
        #expect(plan.dropLast().allSatisfy { $0.upperBound % Planner.defaultAlignment == 0 })
        #expect(plan.last?.upperBound == 10_000_019)
    }

    /// After the probe's first range: full shares for the others, the shorter last one for the
    /// probe's connection, so at equal speeds all end together.
    @Test func afterAFirstRangeTheOthersGetFullSharesAndTheLastIsShorter() {
        let MiB: Int64 = 1 << 20
        // Scenario 3's shape: 64 MiB, 16 connections, a 1 MiB first range.
        let plan = Planner.plan(after: MiB, size: 64 * MiB, connections: 16, minimumSegmentSize: MiB)
        #expect(plan.count == 16 && plan.first?.lowerBound == MiB && plan.last?.upperBound == 64 * MiB)
        #expect(plan.dropLast().allSatisfy { $0.count == 4 * MiB } && plan.last?.count == 3 * MiB)
        #expect(zip(plan, plan.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
        // A remainder below the minimum joins the range before it.
        let joined = Planner.plan(after: MiB / 2, size: 4 * MiB, connections: 4, minimumSegmentSize: MiB)
        #expect(joined == [ByteRange(MiB / 2, 3 * MiB / 2), ByteRange(3 * MiB / 2, 5 * MiB / 2), ByteRange(5 * MiB / 2, 4 * MiB)])
        // A first range that is a full share already: the rest is planned for the others.
        #expect(Planner.plan(after: 2 * MiB, size: 4 * MiB, connections: 2, minimumSegmentSize: MiB) == [ByteRange(2 * MiB, 4 * MiB)])
        #expect(Planner.plan(after: 4 * MiB, size: 4 * MiB, connections: 2, minimumSegmentSize: MiB).isEmpty)
    }

    @Test func httpRangeValueIsInclusive() {
        #expect(ByteRange(0, 1).httpRangeValue == "bytes=0-0")
        #expect(ByteRange(100, 200).httpRangeValue == "bytes=100-199")
    }
}
