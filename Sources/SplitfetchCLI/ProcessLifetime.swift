import NIOConcurrencyHelpers

/// What the command line keeps until the process ends, instead of freeing it.
///
/// The command ends with `_exit` once its output is written (``SplitfetchCommand/runCommandLine()``),
/// so freeing a finished batch first only delays the exit: after the last answer of 2,000
/// files, ending the session's 8 transport threads (`-j 8`) and freeing the queue's 2,000 records and
/// their results took about 3 ms. Only for what has finished: a session kept here has no
/// transfer left, and its idle threads end with the process.
enum ProcessLifetime {
    private static let kept = NIOLockedValueBox<[any Sendable]>([])

    static func keep(_ values: any Sendable...) {
        kept.withLockedValue { $0.append(contentsOf: values) }
    }
}
