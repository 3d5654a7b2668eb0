import DownloadCore

/// Receives a transfer's body. Called only on the transport thread, one call at a time.
protocol TransferSink: AnyObject, Sendable {
    /// Called once per piece of body, with the final response's head.
    func receive(_ body: UnsafeRawBufferPointer, head: ResponseHead) -> SinkVerdict
    /// After a ``SinkVerdict/pause``: calls `resume` once (from any thread, at once if it may)
    /// when the piece can be taken.
    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void)
    /// After a ``SinkVerdict/pause``: how long until the piece can be taken, when that is a
    /// matter of time alone (a rate limit's debt). The transport then resumes the transfer
    /// itself at that moment, on its own thread, and ``resumeWhenReady(_:)`` is not called.
    func resumeDelay() -> Duration?
}

extension TransferSink {
    func resumeWhenReady(_ resume: @escaping @Sendable () -> Void) { resume() }
    func resumeDelay() -> Duration? { nil }
}
