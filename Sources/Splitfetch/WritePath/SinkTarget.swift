import DownloadCore

/// Where a sink's bytes go and whom it tells: the machine (claims, commits, pauses), the
/// transfer, the partial file, the connection's counters, and what may hold the transfer back (a
/// reader in order, a rate limit). ``SegmentSink`` and ``StreamSink`` share it.
///
/// Thread safety: immutable; every member is `Sendable`.
struct SinkTarget: Sendable {
    let machine: SharedMachine
    let transfer: DownloadMachine.TransferID
    let file: OutputFile
    let counters: ConnectionCounters
    var reader: PrefixReader? = nil
    var rateLimit: RateLimit? = nil
}
