/// The segment map: the file's ranges in order, what of each is written, and which connection
/// fetches it. Progress reports carry it so that a front end can draw the download.
extension DownloadMachine {
    /// One range of the file as the map shows it.
    public struct SegmentView: Sendable, Equatable {
        /// Its bytes, `start ..< end`.
        public var start: Int64
        public var end: Int64
        /// Bytes `start ..< written` are on disk.
        public var written: Int64
        /// The connection slot fetching it (`0 ..< connections`), or `nil` when none is.
        public var connection: Int?
        /// It was split off another connection's range in this run.
        public var isSplit: Bool

        public init(start: Int64, end: Int64, written: Int64, connection: Int?, isSplit: Bool) {
            self.start = start
            self.end = end
            self.written = written
            self.connection = connection
            self.isSplit = isSplit
        }
    }

    /// The segments in file order (empty before the plan, and for a whole-file stream).
    /// A segment whose owner waits for a slot of the host shows no connection.
    public var segmentMap: [SegmentView] {
        guard let table else { return [] }
        return table.segments
            .filter { $0.end > $0.start }
            .sorted { $0.start < $1.start }
            .map { segment in
                let connection = segment.isQueued ? nil : segment.owner.flatMap { transfers[TransferID($0)]?.connection }
                return SegmentView(start: segment.start, end: segment.end, written: segment.written,
                                   connection: connection, isSplit: segment.isSplit)
            }
    }
}
