/// The scheduler's state: which bytes of the file are written, in flight, or still to fetch.
///
/// A value type with no I/O and no clock of its own (callers pass `now`), so every decision can be
/// tested without a network. ``DownloadMachine`` owns one and makes every assignment; the
/// transport's write callback reaches it through the machine (`claim` / `commit`).
///
/// Each segment is a half-open range `[start, end)` with two offsets inside it:
/// `written` (bytes before it are on disk) and `claimed` (bytes before it are on disk or being
/// written right now). A write callback first *claims* the bytes it is about to write, which clamps
/// them to the segment's current `end`, then *commits* them after `pwrite` returns. A split moves an
/// active segment's `end` down to a point at or after `claimed`, so a byte is never written by two
/// owners and never left without one.
public struct SegmentTable: Sendable {
    /// One segment of the file and its progress.
    public struct Segment: Sendable, Equatable {
        /// Stable identifier; also the index in ``SegmentTable/segments``.
        public let id: Int
        /// First byte of the segment.
        public let start: Int64
        /// One past the last byte; lowered when the segment is split.
        public internal(set) var end: Int64
        /// Bytes in `[start, written)` are on disk.
        public internal(set) var written: Int64
        /// Bytes in `[written, claimed)` are being written now.
        public internal(set) var claimed: Int64
        /// The transfer fetching this segment, if any.
        public internal(set) var owner: Int?
        /// When the current owner took the segment (caller's clock, seconds).
        var assignedAt: Double = 0
        /// `claimed` when the current owner took the segment.
        var offsetAtAssignment: Int64 = 0
        /// When bytes last arrived for this segment (or it was taken).
        var lastProgressAt: Double = 0
        /// The owner's request waits for a connection (a per-host cap): it has not started, so
        /// it is neither slow nor stalled, and splitting or taking its range would only move
        /// the bytes to another request in the same wait.
        public internal(set) var isQueued = false
        /// The segment was made by splitting another one's range in this run.
        public internal(set) var isSplit = false

        /// Bytes not yet written.
        public var remaining: Int64 { end - written }
        /// Whether every byte of the segment is on disk.
        public var isComplete: Bool { written == end }
    }

    /// Tuning for splitting in-flight segments.
    public struct SplitPolicy: Sendable, Equatable {
        /// The smallest piece handed to an idle connection by a split.
        public var minimumPiece: Int64
        /// Split points are rounded up to a multiple of this.
        public var alignment: Int64
        /// Estimated cost of starting a new request, in seconds; a split must save more than this.
        public var requestOverhead: Double
        /// How long a segment must have run before its rate is trusted, in seconds.
        public var rateWarmup: Double
        /// An owner that has received nothing for this long is stalled: an idle connection takes its
        /// whole remainder at once, whatever its size.
        public var stallAfter: Double
        /// The smallest piece split off while the connections' speeds are still unknown.
        public var minimumBlindPiece: Int64

        public init(minimumPiece: Int64 = 64 * 1024, alignment: Int64 = 4096,
                    requestOverhead: Double = 0.05, rateWarmup: Double = 0.5, stallAfter: Double = 1.5,
                    minimumBlindPiece: Int64 = 1 << 20) {
            precondition(minimumPiece >= 1 && alignment >= 1 && requestOverhead >= 0 && rateWarmup >= 0 && stallAfter > 0)
            self.minimumPiece = minimumPiece
            self.alignment = alignment
            self.requestOverhead = requestOverhead
            self.rateWarmup = rateWarmup
            self.stallAfter = stallAfter
            self.minimumBlindPiece = minimumBlindPiece
        }
    }

    /// What an idle connection should fetch next.
    public struct Assignment: Sendable, Equatable {
        /// The segment the new transfer now owns.
        public var segment: Int
        /// The bytes to request: from the segment's first unwritten byte to its end.
        public var range: ByteRange
        /// Whether this assignment came from splitting another transfer's segment.
        public var isSplit: Bool
        /// The transfer whose segment was taken whole (it stalled, or showed no speed at all); it
        /// has nothing left to fetch and should be stopped rather than left holding a connection.
        public var displacedOwner: Int? = nil
    }

    /// The file size.
    public let size: Int64
    /// Every segment ever created, indexed by id. Segments are never removed.
    public private(set) var segments: [Segment]
    /// The split tuning in force.
    public var policy: SplitPolicy
    /// How many splits have been made.
    public private(set) var splitCount = 0
    /// The lowest unwritten byte: `[0, contiguousPrefix)` is on disk, with no gap. A hasher
    /// follows it; it only ever grows.
    public private(set) var contiguousPrefix: Int64 = 0
    /// The segment holding ``contiguousPrefix`` (when the prefix is not at the end).
    private var prefixSegment = 0
    /// No segment ending after this offset is handed out, but the one holding
    /// ``contiguousPrefix`` when it starts before it (a piece larger than the window). A download
    /// read in order keeps its bytes ahead of the reader inside a window. `Int64.max`: no limit.
    public var windowEnd: Int64 = .max

    /// Creates a table for a fresh download from a plan.
    ///
    /// - Precondition: `ranges` cover `[0, size)` exactly, in order.
    public init(size: Int64, ranges: [ByteRange], policy: SplitPolicy = SplitPolicy()) {
        self.init(size: size, progress: ranges.map { ($0, $0.lowerBound) }, policy: policy)
    }

    /// Creates a table from saved progress (a resumed download).
    ///
    /// - Parameter progress: each segment's range and its `written` offset, in order, covering
    ///   `[0, size)` exactly.
    public init(size: Int64, progress: [(range: ByteRange, written: Int64)], policy: SplitPolicy = SplitPolicy()) {
        self.size = size
        self.policy = policy
        self.segments = progress.enumerated().map { index, item in
            precondition(item.written >= item.range.lowerBound && item.written <= item.range.upperBound)
            return Segment(id: index, start: item.range.lowerBound, end: item.range.upperBound,
                           written: item.written, claimed: item.written, owner: nil)
        }
        precondition(invariantViolation() == nil, invariantViolation() ?? "")
        advancePrefix()
    }

    /// Moves ``contiguousPrefix`` over every byte written from it on, across segment ends.
    /// A scan of the segments only when one is complete: one comparison per commit otherwise.
    private mutating func advancePrefix() {
        while contiguousPrefix < size {
            if !(segments[prefixSegment].start <= contiguousPrefix && contiguousPrefix < segments[prefixSegment].end) {
                guard let index = segments.firstIndex(where: { $0.start <= contiguousPrefix && contiguousPrefix < $0.end }) else { return }
                prefixSegment = index
            }
            let segment = segments[prefixSegment]
            contiguousPrefix = max(contiguousPrefix, segment.written)
            if segment.written < segment.end { return }
        }
    }

    // MARK: - Queries

    /// Bytes on disk across all segments.
    public var writtenBytes: Int64 { segments.reduce(0) { $0 + ($1.written - $1.start) } }
    /// Whether every byte of the file is on disk.
    public var isComplete: Bool { segments.allSatisfy(\.isComplete) }
    /// Whether bytes are left only beyond ``windowEnd``: the reader has to take some first.
    public var isHeldByWindow: Bool {
        windowEnd != .max && segments.contains { $0.owner == nil && $0.remaining > 0 && $0.end > windowEnd }
    }
    /// Segments that a transfer owns right now.
    public var activeSegments: [Segment] { segments.filter { $0.owner != nil } }

    /// Describes the first broken invariant, or `nil` when the table is consistent.
    ///
    /// Checked: segments tile `[0, size)` without gaps or overlaps (in start order),
    /// `start <= written <= claimed <= end`, and unowned segments have nothing claimed.
    public func invariantViolation() -> String? {
        var cursor: Int64 = 0
        for segment in segments.sorted(by: { ($0.start, $0.end) < ($1.start, $1.end) }) {
            if segment.start == segment.end { continue }
            if segment.start != cursor { return "segment \(segment.id) starts at \(segment.start), expected \(cursor)" }
            if !(segment.start <= segment.written && segment.written <= segment.claimed && segment.claimed <= segment.end) {
                return "segment \(segment.id) offsets out of order: start \(segment.start) written \(segment.written) claimed \(segment.claimed) end \(segment.end)"
            }
            if segment.owner == nil && segment.claimed != segment.written {
                return "segment \(segment.id) has claimed bytes but no owner"
            }
            cursor = segment.end
        }
        if cursor != size { return "segments end at \(cursor), file size is \(size)" }
        return nil
    }

    // MARK: - Assignment

    /// Gives a new transfer something to fetch.
    ///
    /// An unowned segment with bytes left comes first (lowest offset first), if it ends inside
    /// ``windowEnd`` or holds the contiguous prefix. Otherwise the active
    /// segment expected to finish last is split so that both halves are expected to finish together,
    /// provided the split saves more than ``SplitPolicy/requestOverhead``.
    ///
    /// - Parameters:
    ///   - transfer: the new transfer's identifier; it becomes the segment's owner.
    ///   - now: the current time in seconds, from any monotonic clock the caller uses consistently.
    ///   - rate: the idle connection's recent throughput in bytes per second, if known.
    ///   - freshPieces: whether it may take an untaken segment (a straggler of a download read
    ///     in order only takes a share of a split, sized to end with its owner).
    /// - Returns: the assignment, or `nil` when nothing is worth fetching by this connection.
    ///   - ownerRates: what each owner's connection was measured at before (owner → bytes per
    ///     second): an owner that took its range too recently to have a rate of its own yet is
    ///     judged by it, so a slow connection's fresh remainder is split without waiting.
    ///   - mayCut: whether a healthy owner may be cut short (its response ended early, and so its
    ///     connection closed). `false` under a per-host cap without room: then only a stalled
    ///     range is taken, and nothing is split.
    public mutating func assign(transfer: Int, now: Double, rate: Double? = nil, freshPieces: Bool = true,
                                ownerRates: [Int: Double] = [:], mayCut: Bool = true) -> Assignment? {
        if freshPieces, let index = segments.firstIndex(where: {
            $0.owner == nil && $0.remaining > 0 && ($0.end <= windowEnd || ($0.start <= contiguousPrefix && $0.start < windowEnd))
        }) {
            take(index, owner: transfer, now: now)
            let segment = segments[index]
            return Assignment(segment: index, range: ByteRange(segment.written, segment.end), isSplit: false)
        }
        return split(for: transfer, now: now, idleRate: rate, ownerRates: ownerRates, mayCut: mayCut)
    }

    private mutating func take(_ index: Int, owner: Int, now: Double) {
        segments[index].owner = owner
        segments[index].isQueued = false
        segments[index].assignedAt = now
        segments[index].lastProgressAt = now
        segments[index].offsetAtAssignment = segments[index].claimed
    }

    /// Whether an active segment's owner has received nothing for ``SplitPolicy/stallAfter``
    /// since it started (a request still waiting for a connection has not).
    func isStalled(_ segment: Segment, now: Double) -> Bool {
        segment.owner != nil && !segment.isQueued && segment.claimed < segment.end && now - segment.lastProgressAt >= policy.stallAfter
    }

    /// The observed rate of an active segment, when it has run long enough to trust; 0 when stalled.
    func rate(of segment: Segment, now: Double) -> Double? {
        if isStalled(segment, now: now) { return 0 }
        let elapsed = now - segment.assignedAt
        guard segment.owner != nil, elapsed >= policy.rateWarmup else { return nil }
        return Double(segment.claimed - segment.offsetAtAssignment) / elapsed
    }

    private mutating func split(for transfer: Int, now: Double, idleRate rateOfIdle: Double?, ownerRates: [Int: Double],
                                mayCut: Bool) -> Assignment? {
        // Its own rate once warmed up; until then its connection's earlier one, if known.
        func rate(of segment: Segment, now: Double) -> Double? {
            self.rate(of: segment, now: now) ?? segment.owner.flatMap { ownerRates[$0] }
        }
        // Requests still waiting for a connection are not candidates: their bytes would only
        // move to another request in the same wait. Without leave to cut, only a stalled owner's.
        let owned = segments.filter { $0.owner != nil && !$0.isQueued && $0.claimed < $0.end && (mayCut || isStalled($0, now: now)) }
        let rates = owned.compactMap { rate(of: $0, now: now) }.filter { $0 > 0 }
        let typicalRate = rates.isEmpty ? nil : rates.sorted()[rates.count / 2]
        let idleRate = rateOfIdle.flatMap { $0 > 0 ? $0 : nil } ?? typicalRate

        /// A remainder too small to halve, whose owner is so slow that the idle connection would
        /// finish all of it sooner, request included: the end-game case where one slow connection
        /// would otherwise hold up the whole download for its last bytes.
        func worthTakingWhole(_ segment: Segment) -> Bool {
            guard let ro = rate(of: segment, now: now), ro > 0, let ri = idleRate else { return false }
            let left = Double(segment.end - segment.claimed)
            return left / ro > left / ri + policy.requestOverhead
        }
        func splittable(_ segment: Segment) -> Bool {
            segment.end - segment.claimed >= 2 * policy.minimumPiece || isStalled(segment, now: now)
        }
        let active = owned.filter { splittable($0) || worthTakingWhole($0) }
        guard !active.isEmpty else { return nil }

        // The segment expected to finish last; by bytes left when rates are not known yet.
        func expectedSeconds(_ segment: Segment) -> Double {
            let left = Double(segment.end - segment.claimed)
            if let r = rate(of: segment, now: now) { return r > 0 ? left / r : .infinity }
            if let typical = typicalRate { return left / typical }
            return left  // no rates anywhere: compare by size alone
        }
        guard let victim = active.max(by: { expectedSeconds($0) < expectedSeconds($1) }) else { return nil }

        let claimed = victim.claimed
        let left = victim.end - claimed
        let ownerRate = rate(of: victim, now: now)

        var point: Int64
        if !splittable(victim) {
            point = claimed  // taken whole (worthTakingWhole)
        } else if let ro = ownerRate, let ri = idleRate {
            // Both finish together: (m - c) / ro == (end - m) / ri.
            let ownerShare = ro <= 0 ? 0 : ro / (ro + ri)
            point = claimed + Int64(Double(left) * ownerShare)
            let before = ro > 0 ? Double(left) / ro : .infinity
            let after = max(Double(point - claimed) / max(ro, 1), Double(victim.end - point) / ri + policy.requestOverhead)
            guard after < before else { return nil }
        } else {
            // Speeds not known yet: halve, but only a range worth a new connection without data.
            guard left >= 2 * max(policy.minimumPiece, policy.minimumBlindPiece) || isStalled(victim, now: now) else { return nil }
            point = claimed + left / 2
        }
        if isStalled(victim, now: now) || !splittable(victim) {
            point = claimed  // take everything the owner has not claimed
        } else {
            // Align up, keep the new piece at least the minimum.
            let align = policy.alignment
            point = ((point + align - 1) / align) * align
            point = max(point, claimed)
            if victim.end - point < policy.minimumPiece {
                point = victim.end - policy.minimumPiece
                point = (point / align) * align
                if point < claimed { point = claimed }
            }
            guard victim.end - point >= policy.minimumPiece else { return nil }
        }
        guard point < victim.end else { return nil }

        let newRange = ByteRange(point, victim.end)
        segments[victim.id].end = point
        let id = segments.count
        segments.append(Segment(id: id, start: newRange.lowerBound, end: newRange.upperBound,
                                written: newRange.lowerBound, claimed: newRange.lowerBound, owner: nil, isSplit: true))
        // Taken whole at the owner's written offset, the victim is complete now and the prefix
        // (if it was there) moves to the new segment: after the append, so that it is found.
        if victim.id == prefixSegment { advancePrefix() }
        take(id, owner: transfer, now: now)
        splitCount += 1
        return Assignment(segment: id, range: newRange, isSplit: true, displacedOwner: point == claimed ? victim.owner : nil)
    }

    // MARK: - The write path

    /// Reserves the next bytes of a segment for writing, clamped to its current end.
    ///
    /// - Parameters:
    ///   - segment: the segment id.
    ///   - offset: where the bytes go; must equal the segment's `claimed` offset (writes are in order).
    ///   - count: how many bytes the caller holds.
    /// - Returns: how many of them to write; fewer than `count` (maybe 0) means the segment was
    ///   split and the caller must stop after writing that many.
    public mutating func claim(segment: Int, offset: Int64, count: Int64) -> Int64 {
        let s = segments[segment]
        precondition(offset == s.claimed, "out-of-order write at \(offset) to segment \(segment) claimed to \(s.claimed)")
        let allowed = max(0, min(count, s.end - s.claimed))
        segments[segment].claimed += allowed
        return allowed
    }

    /// Records that claimed bytes are on disk, through `offset`.
    ///
    /// - Parameter now: the caller's clock, for stall detection; `nil` leaves it unchanged.
    public mutating func commit(segment: Int, through offset: Int64, now: Double? = nil) {
        precondition(offset >= segments[segment].written && offset <= segments[segment].claimed)
        if let now, offset > segments[segment].written { segments[segment].lastProgressAt = now }
        segments[segment].written = offset
        if segment == prefixSegment || offset == segments[segment].end { advancePrefix() }
    }

    /// Restarts a segment's stall clock (its owner was paused, not stalled).
    public mutating func touch(segment: Int, now: Double) {
        segments[segment].lastProgressAt = now
    }

    /// The owner's request waits for a connection, or (`false`) has one now: its rate and stall
    /// clocks start when it does.
    public mutating func setQueued(segment: Int, _ queued: Bool, now: Double) {
        segments[segment].isQueued = queued
        segments[segment].lastProgressAt = now
        if !queued {
            segments[segment].assignedAt = now
            segments[segment].offsetAtAssignment = segments[segment].claimed
        }
    }

    /// Gives back claimed but unwritten bytes (a failed write).
    public mutating func unclaim(segment: Int) {
        segments[segment].claimed = segments[segment].written
    }

    /// Ends a transfer's ownership of a segment; bytes left become available to any connection.
    public mutating func release(segment: Int) {
        segments[segment].claimed = segments[segment].written
        segments[segment].owner = nil
        segments[segment].isQueued = false
    }

    /// The written offset of every segment, for a checkpoint.
    public func progressSnapshot() -> [(range: ByteRange, written: Int64)] {
        segments.filter { $0.start < $0.end }
            .sorted { $0.start < $1.start }
            .map { (ByteRange($0.start, $0.end), $0.written) }
    }
}
