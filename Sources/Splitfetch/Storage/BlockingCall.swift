/// Runs `body` on a thread of its own and returns its result.
///
/// For file-system calls that can block for milliseconds (`fdatasync` of a finished file, `fsync`
/// of its directory). On Swift's cooperative pool, which has one thread per core, such a call
/// holds a thread the other downloads of a ``Session`` need: with `-j 8` on two cores, two
/// downloads waiting for the disk stopped the other six. A thread costs tens of microseconds; a
/// segmented download needs one to preallocate its file and ends on its checkpoint thread
/// (``Checkpointer/stop(saving:then:)``), a single-stream download uses one to finish.
func blockingCall<T: Sendable, E: Error>(_ name: String, _ body: @escaping @Sendable () throws(E) -> T) async throws(E) -> T {
    let result: Result<T, E> = await withCheckedContinuation { continuation in
        startThread(name: name) {
            continuation.resume(returning: Result { () throws(E) -> T in try body() })
        }
    }
    return try result.get()
}
