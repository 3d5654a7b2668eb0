import CShims

/// Takes what a consumer of ``PrefixReader`` is given, in order, on the reader's thread.
///
/// `consume` may block (a pipe whose reader is slow): that is the backpressure. Throwing ends the
/// download with that error (a reader that went away: ``DownloadError/Code/outputClosed``).
protocol ByteConsumer: Sendable {
    func consume(_ bytes: UnsafeRawBufferPointer) throws(DownloadError)
    /// The download ended without every byte (an error or a cancellation): a consumer blocked
    /// in ``consume(_:)`` should give up. Called from any thread.
    func abandon()
}
