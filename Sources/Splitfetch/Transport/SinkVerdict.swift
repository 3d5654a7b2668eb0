import DownloadCore

/// What a sink tells the transport after a piece of body.
enum SinkVerdict: Equatable {
    /// Keep going.
    case proceed
    /// Stop now: the sink has all it wants (a split moved its end, or a probe needs no body).
    case stop
    /// Stop now: the response is unacceptable or a write failed.
    case fail(DownloadError)
    /// Nothing was taken: hold the connection (libcurl's pause) and offer this piece again once
    /// the sink calls the `resume` it was given in ``TransferSink/resumeWhenReady(_:)``. For a
    /// reader that is behind (a pipe).
    case pause
}
