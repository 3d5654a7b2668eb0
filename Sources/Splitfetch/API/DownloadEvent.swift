/// Something a running download reports; read them from ``Download/events``.
///
/// The last event is ``finished(_:)`` or ``failed(_:)``, and it is never dropped (a slow
/// consumer loses the oldest events, never the newest).
///
/// Thread safety: every event and the types it carries are `Sendable` values.
public enum DownloadEvent: Sendable {
    /// The probe finished.
    case probed(RemoteResource)
    /// Transfers are starting: the mode (`segmented` or `single`) and the connection count.
    case started(mode: DownloadStatistics.Mode, connections: Int, size: Int64?)
    /// Periodic progress, every ``DownloadOptions/progressInterval``.
    case progress(DownloadProgress)
    /// A request failed and will be retried after `delay`.
    case retrying(connection: Int, error: DownloadError, delay: Duration)
    /// An idle connection took over `range`, split off a busy connection's range (or taken from
    /// a stalled one), so that the end is not left to one connection.
    case split(connection: Int, range: Range<Int64>)
    /// The server refused more connections (503 or 429); the download goes on with fewer.
    case connectionsReduced(to: Int, reason: String)
    /// A source is used no more (a mirror that serves other bytes, answers 404, or keeps
    /// failing; or the URL probed, while mirrors go on): the rest of the file comes from the
    /// others. None of a source's bytes reach the file unless it passed its identity check.
    case sourceDropped(url: String, error: DownloadError)
    /// Something the caller should know that does not stop the download: a server digest that
    /// disagrees with the one given, say.
    case warning(String)
    /// The download completed; the file is under its final name.
    case finished(DownloadStatistics)
    /// The download failed (or was cancelled) with this error, the one ``Download/run()`` throws.
    case failed(DownloadError)
}
