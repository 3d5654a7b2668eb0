import Dispatch
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Turns SIGINT and SIGTERM into a callback (cancelling the download) instead of an abrupt exit.
/// A second signal exits at once with the interrupted status.
final class SignalForwarder {
    private let sources: [any DispatchSourceSignal]

    init(onSignal: @escaping @Sendable () -> Void) {
        var made: [any DispatchSourceSignal] = []
        let count = NIOLockedValueBox(0)
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler {
                let n = count.withLockedValue { value -> Int in
                    value += 1
                    return value
                }
                if n > 1 {
                    writeRaw("\nsplitfetch: second signal; exiting now (the last checkpoint is kept)\n")
                    fflush(nil)
                    _exit(ExitStatus.interrupted.rawValue)  // now, from the signal queue: no clean-up can wait
                }
                onSignal()
            }
            source.resume()
            made.append(source)
        }
        sources = made
    }

    func stop() {
        for source in sources { source.cancel() }
    }
}
