extension DownloadMachine {
    /// Identifies one HTTP request of a download. Never reused within a machine, so an abort can
    /// only ever reach the transfer it was meant for.
    public typealias TransferID = Int

    /// Every tunable of the machine's decisions.
    public struct Configuration: Sendable, Equatable {
        /// Connections for a segmented download (at least 1); with several sources, connections
        /// of each source.
        public var connections: Int = 8
        /// Sources serving the same file (at least 1): source 0 is the URL probed, the others are
        /// mirrors that get no range before ``DownloadMachine/sourceChecked(_:passed:now:)``
        /// says they serve the same bytes.
        public var sources: Int = 1
        /// A source whose requests failed this many times in a row, with no byte written in
        /// between, is dropped while another source is left (its ranges go to the others).
        public var sourceFailuresInARow: Int = 4
        /// The smallest range the initial plan gives one connection.
        public var minimumSegmentSize: Int64 = 1 << 20
        /// When and how in-flight ranges are split and stalled ones taken over.
        public var split = SegmentTable.SplitPolicy()
        /// Backoff, `Retry-After` and when to give up.
        public var retry = RetryPolicy()
        /// A transfer that receives nothing for this long is aborted and retried, in seconds.
        public var stallTimeout: Double = 20
        /// Seconds between quick checkpoints (no sync); 0 turns them off. One with nothing
        /// written since the last checkpoint is skipped.
        public var quickCheckpointInterval: Double = 0.1
        /// Seconds between durable checkpoints (data synced first); 0 turns them off.
        public var durableCheckpointInterval: Double = 5
        /// How often an idle connection looks again for a range to split or a stalled one to take.
        public var idleRecheckInterval: Double = 0.1
        /// Seeds the jitter of retry delays.
        public var seed: UInt64 = 0
        /// When the download must have ended, on the machine's clock (the `now` it is given);
        /// `nil` for no limit. At it, the download stops as a cancellation stops it (a
        /// segmented download keeps its data) and fails with ``Failure/timedOut``.
        public var deadline: Double?
        /// The file goes to a reader in order (a pipe): ranges are handed out only inside
        /// `[delivered, delivered + window)` (see ``DownloadMachine/delivered(through:now:)``),
        /// planned in order as pieces of at most half the window per connection. `nil`: a file.
        public var window: Int64?

        public init() {}
    }

    /// What the probe learned that decides the plan.
    public struct ProbeAnswer: Sendable, Equatable {
        /// The file size, when the server said.
        public var size: Int64?
        /// Whether the server answers range requests with `206`.
        public var acceptsRanges: Bool
        /// The probe was the first segment's `GET` and its body is still arriving: what it
        /// fetches. The machine adopts it as the download's first transfer when it fits the plan.
        public var openBody: OpenBody?
        /// The URL redirected: the file is fetched from where the redirect pointed, which may
        /// expire (a signed URL) and be resolved again from the URL given.
        public var redirected: Bool
        /// The file is hashed as it arrives: plan pieces fetched in order (``Planner/plan(inOrderFrom:size:connections:minimumSegmentSize:alignment:)``).
        public var inOrder: Bool

        public init(size: Int64?, acceptsRanges: Bool, openBody: OpenBody? = nil, redirected: Bool = false, inOrder: Bool = false) {
            self.inOrder = inOrder
            self.size = size
            self.acceptsRanges = acceptsRanges
            self.openBody = openBody
            self.redirected = redirected
        }
    }

    /// The body of a probing `GET` that is still arriving.
    public enum OpenBody: Sendable, Equatable {
        /// A `206` for these bytes (from 0).
        case range(ByteRange)
        /// A `200` with the whole file.
        case whole
    }

    /// How the file is fetched.
    public enum Mode: Sendable, Equatable {
        /// Ranges over several connections into a preallocated file of this size; resumable.
        case segmented(size: Int64)
        /// One whole-file stream from byte 0 (no range support or no length); not resumable.
        case stream(size: Int64?)
    }

    /// The partial file to create before any transfer starts.
    public struct Preparation: Sendable, Equatable {
        public var mode: Mode
        /// The first manifest, saved before any byte is written (segmented mode only).
        public var manifest: Checkpoint?
        /// Whether the first manifest may instead wait for the first checkpoint: the whole file
        /// is one response, already under way, so before that checkpoint a rerun would have
        /// nothing to resume. The driver may then keep the partial file unnamed until then, and
        /// a small file costs no manifest at all.
        public var manifestCanWait: Bool

        public init(mode: Mode, manifest: Checkpoint?, manifestCanWait: Bool = false) {
            self.mode = mode
            self.manifest = manifest
            self.manifestCanWait = manifestCanWait
        }
    }

    /// One request to start.
    public struct TransferStart: Sendable, Equatable {
        public var id: TransferID
        /// The connection slot it runs on (`0 ..< connections`), for progress and statistics.
        public var connection: Int
        /// Which source to ask; `0` is the URL being downloaded.
        public var source: Int
        /// The bytes to ask for; `nil` asks for the whole file (stream mode).
        public var range: ByteRange?
        /// Send `If-Range` with the validators, so a changed file answers `200`, not a wrong range.
        public var useIfRange: Bool
        /// The range was split off another transfer's segment, or taken from a stalled one.
        public var isSplit: Bool

        public init(id: TransferID, connection: Int, source: Int, range: ByteRange?, useIfRange: Bool, isSplit: Bool) {
            self.id = id
            self.connection = connection
            self.source = source
            self.range = range
            self.useIfRange = useIfRange
            self.isSplit = isSplit
        }
    }

    /// Why the machine stops a transfer.
    public enum AbortReason: Sendable, Equatable {
        /// Its stalled range was taken over whole by another connection; not a failure.
        case takenOver
        /// It received nothing for ``Configuration/stallTimeout``; counted as a failed attempt.
        case stalled
        /// The download is stopping (failure, cancellation or a restart).
        case stopping
    }

    /// A manifest snapshot to save.
    public struct Checkpoint: Sendable, Equatable {
        /// One segment's progress; also the manifest's segment (`Manifest.Segment`), so a
        /// snapshot is saved as it is.
        public struct Segment: Sendable, Equatable, Codable {
            public var start: Int64
            public var end: Int64
            /// Bytes before this are on disk (synced by a durable checkpoint).
            public var written: Int64
            /// Bytes before this were written but not synced; trusted only within the same boot.
            public var cached: Int64?

            public init(start: Int64, end: Int64, written: Int64, cached: Int64? = nil) {
                self.start = start
                self.end = end
                self.written = written
                self.cached = cached
            }
        }

        public var id: Int
        /// Sync the data file before saving: the manifest then claims only bytes on disk.
        public var durable: Bool
        public var segments: [Segment]

        public init(id: Int, durable: Bool, segments: [Segment]) {
            self.id = id
            self.durable = durable
            self.segments = segments
        }
    }

    /// Something worth telling the user; no reply is expected.
    public enum Notice: Sendable, Equatable {
        /// `transfer` failed; its connection tries again after `delay` seconds.
        case retrying(connection: Int, transfer: TransferID, attempt: Int, delay: Double)
        /// The server refused more connections (`transfer` got 503 or 429, FTP's 421, or a login refused): the download goes on
        /// with `remaining`.
        case connectionsReduced(remaining: Int, transfer: TransferID)
        /// The server answered `transfer`'s `If-Range` with the whole unchanged file; requests go
        /// on without `If-Range` (each response's validators are still checked).
        case ifRangeDropped(connection: Int, transfer: TransferID)
        /// A source is used no more: `transfer`'s failure showed it keeps failing, or (`nil`) it
        /// did not pass its identity check, or the file changed size and it was not checked again.
        case sourceDropped(source: Int, transfer: TransferID?)
    }

    /// Why a download ended without its file.
    public enum Failure: Sendable, Equatable {
        /// The failure of this transfer ends the download: not transient, or it gave up after
        /// `retries` retries (`nil` when it was not retried).
        case transfer(TransferID, gaveUpAfter: Int?)
        /// Saving this checkpoint failed; the disk cannot be trusted.
        case checkpoint(id: Int)
        /// Cancelled by the caller.
        case cancelled
        /// The time limit (``Configuration/deadline``) passed.
        case timedOut
        /// Every transfer ended with bytes still missing (a broken invariant; never expected).
        case incomplete
        /// Every source was dropped, the last one by its identity check.
        case noSourceLeft
    }

    /// What the driver must do next.
    public enum Action: Sendable, Equatable {
        /// Create (and for a segmented download preallocate) the partial file and save the first
        /// manifest; then call ``DownloadMachine/prepared(now:)``.
        case prepare(Preparation)
        /// Start a transfer; report its bytes through ``DownloadMachine/claim(_:offset:count:)`` and
        /// ``DownloadMachine/commit(_:through:now:)`` and its end through
        /// ``DownloadMachine/transferEnded(_:_:now:)``.
        case start(TransferStart)
        /// Make the probe's open body this transfer: write it as a started transfer's would be.
        /// Comes once, when the file is ready, before any other start.
        case adopt(TransferStart)
        /// The probe's open body does not fit the plan: stop it; it reports no end.
        case discardOpenBody
        /// Stop a transfer; it still reports its end.
        case abort(TransferID, AbortReason)
        /// Tell the user.
        case notify(Notice)
        /// Save this snapshot; then call ``DownloadMachine/checkpointEnded(_:succeeded:now:)``.
        case checkpoint(Checkpoint)
        /// Call ``DownloadMachine/tick(now:)`` at this time (or earlier; early ticks are harmless).
        case wake(at: Double)
        /// The URL a redirect led to stopped answering (401, 403, 404, 410: a signed URL that
        /// expired): resolve the URL given again, check that it still names the same file, and
        /// call ``DownloadMachine/resolved(sameFile:now:)``. Transfers in flight go on meanwhile.
        case resolveAgain
        /// The server named another size: remove the partial data, probe again with a ranged
        /// `GET`, and call ``DownloadMachine/probed(_:now:)`` with the answer.
        case discardAndProbeAgain
        /// Every byte is written and every transfer has ended: sync, rename into place. Final.
        case finish
        /// The download failed; every transfer has ended and the final checkpoint (if any) was
        /// tried. Final.
        case fail(Failure, finalCheckpointFailed: Bool)
    }

    /// How a transfer ended, as the driver saw it.
    public enum TransferEnd: Sendable, Equatable {
        /// The response ended without error (or the sink stopped it at its segment's end).
        case completed
        /// The request failed.
        case failed(TransferFailure)
        /// It was stopped before its end (by an ``Action/abort(_:_:)``, or from outside).
        case aborted
    }

    /// What went wrong with one request; classified by the driver, judged by the machine.
    public struct TransferFailure: Sendable, Equatable {
        /// The HTTP status, when a response arrived.
        public var httpStatus: Int?
        /// What went wrong; whether it is transient is the core's table
        /// (``RetryPolicy/isTransient(_:)``).
        public var kind: FailureKind
        /// The server's `Retry-After`, if it sent one.
        public var retryAfter: RetryAfter?
        /// The total size a `206` or `416` named when it disagreed with the probed size.
        public var observedTotal: Int64?
        /// The server answered `If-Range` with the whole file although the file is unchanged.
        public var ignoredIfRange: Bool

        /// Whether the same request may succeed later (network errors, 408, 429, 5xx, a wrong
        /// range). Anything else ends the download.
        public var isTransient: Bool { RetryPolicy.isTransient(kind) }
        /// Whether the server refused one more connection as a matter of policy: `429` or `503`,
        /// FTP's `421`, or a refused login (a cap on sessions, once others logged in). A source
        /// with other connections running goes on with one fewer.
        public var isServerBusy: Bool {
            if let httpStatus, RetryPolicy.statusesWithRetryAfter.contains(httpStatus) { return true }
            return kind == .network(.serverFull) || kind == .loginRefused
        }

        /// - Parameter kind: by default the HTTP status's, when there is one.
        public init(httpStatus: Int? = nil, kind: FailureKind? = nil, retryAfter: RetryAfter? = nil, observedTotal: Int64? = nil,
                    ignoredIfRange: Bool = false) {
            precondition(kind != nil || httpStatus != nil, "a failure needs a kind or a status")
            self.httpStatus = httpStatus
            self.kind = kind ?? .http(httpStatus!)
            self.retryAfter = retryAfter
            self.observedTotal = observedTotal
            self.ignoredIfRange = ignoredIfRange
        }
    }

    /// Where the download is.
    public enum Phase: Sendable, Equatable {
        /// Waiting for ``DownloadMachine/probed(_:now:)``; `observedTotal` after a size mismatch.
        case awaitingProbe(observedTotal: Int64?)
        /// Waiting for ``DownloadMachine/prepared(now:)``.
        case preparing
        /// Transfers run.
        case running
        /// A size mismatch: waiting for every transfer to end before probing again.
        case restarting(observedTotal: Int64)
        /// Failing: waiting for transfers, then the final checkpoint.
        case stopping(Failure)
        /// ``Action/finish`` or ``Action/fail(_:finalCheckpointFailed:)`` was returned.
        case done
    }
}
