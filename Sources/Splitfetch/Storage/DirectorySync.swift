import NIOConcurrencyHelpers

/// Directory syncs shared by the renames made before them (group commit).
///
/// A finished file's rename lasts once its directory is synced. Each sync of a directory costs a
/// write of it and a flush of the disk's cache, and syncs of one directory run one at a time, so
/// two hundred small files finishing together would queue two hundred of them. Here a sync that
/// starts after a rename covers it: callers that arrive while one runs wait for the next, which
/// then serves them all at once. Nobody waits for a sync that started before their rename.
///
/// Errors are not reported, as before: a file system that cannot sync a directory (`EINVAL`)
/// keeps the rename anyway, and the data itself was synced before it.
///
/// Thread safety: `sync` may be called from any task, `syncHere` from any thread that may block;
/// the syncs run on the ``IOExecutor``, or on the thread of a `syncHere` that found none running.
final class DirectorySync: Sendable {
    static let shared = DirectorySync(executor: .shared)

    private struct Directory {
        var waiting: [@Sendable () -> Void] = []
    }

    private let executor: IOExecutor
    /// A directory is here while a round of syncs runs for it.
    private let directories = NIOLockedValueBox<[String: Directory]>([:])
    /// For tests: how many syncs ran.
    private let count = NIOLockedValueBox(0)

    init(executor: IOExecutor) {
        self.executor = executor
    }

    /// Returns once a sync of `directory` that started after this call has ended.
    func sync(_ directory: String) async {
        await withCheckedContinuation { continuation in
            if wait(for: directory, then: { continuation.resume() }) { executor.enqueue { [self] in runRounds(directory) } }
        }
    }

    /// Calls `done` once a sync of `directory` that started after this call has ended. When no
    /// sync of it is running, the syncs run here, on the caller's thread (an I/O thread that has
    /// just renamed a file), which saves handing them to another; this returns once nobody waits
    /// any more. Blocking.
    func syncHere(_ directory: String, then done: @escaping @Sendable () -> Void) {
        if wait(for: directory, then: done) { runRounds(directory) }
    }

    /// Adds a waiter; returns whether a round of syncs is to be started for it.
    private func wait(for directory: String, then done: @escaping @Sendable () -> Void) -> Bool {
        directories.withLockedValue { directories in
            if directories[directory] != nil {
                directories[directory]!.waiting.append(done)
                return false
            }
            directories[directory] = Directory(waiting: [done])
            return true
        }
    }

    /// Syncs `directory` for whoever waits, again while more arrived meanwhile.
    private func runRounds(_ directory: String) {
        while true {
            let batch = directories.withLockedValue { directories -> [@Sendable () -> Void] in
                let batch = directories[directory]?.waiting ?? []
                if batch.isEmpty { directories[directory] = nil } else { directories[directory]!.waiting = [] }
                return batch
            }
            if batch.isEmpty { return }
            try? FileSystem.syncDirectory(directory)
            count.withLockedValue { $0 += 1 }
            for done in batch { done() }
        }
    }

    /// How many directory syncs ran (for tests).
    var syncs: Int { count.withLockedValue { $0 } }

    /// How many callers wait for a sync of `directory` that has not started (for tests).
    func waiting(in directory: String) -> Int {
        directories.withLockedValue { $0[directory]?.waiting.count ?? 0 }
    }
}
