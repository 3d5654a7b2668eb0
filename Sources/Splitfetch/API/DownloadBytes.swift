import NIOConcurrencyHelpers

/// A download read in order, as an `AsyncSequence` of byte chunks: the file from its first byte
/// to its last, fetched over several connections inside a window of
/// ``DownloadOptions/window`` bytes ahead of the iterator.
///
/// ```swift
/// let bytes = Download.bytes(of: "https://example.org/model.tar")
/// for try await chunk in bytes { try archive.feed(chunk) }
/// ```
///
/// Iterating starts the download; it can be iterated once. A consumer that stops asking pauses
/// the connections (at most one chunk of 256 KiB waits for it, and the window's bytes wait in
/// an anonymous temporary file). Leaving the loop early, or cancelling its task, stops the
/// download. The iterator throws the download's ``DownloadError``. A digest that does not match
/// (``DownloadOptions/Integrity-swift.struct/expectedDigests``) is thrown after the last chunk: by then the bytes have
/// been consumed, so a consumer that must not act on wrong bytes keeps its result until the
/// sequence ends without an error.
///
/// Thread safety: `Sendable`; one iterator.
public struct DownloadBytes: AsyncSequence, Sendable {
    public typealias Element = [UInt8]

    /// The download behind the sequence: its ``Download/events`` report progress and the
    /// final statistics. Do not call its ``Download/run()``: iterating runs it.
    public let download: Download
    private let channel: ChunkChannel

    init(download: Download, channel: ChunkChannel) {
        self.download = download
        self.channel = channel
    }

    public func makeAsyncIterator() -> Iterator { Iterator(run: Run(download: download, channel: channel)) }

    /// Takes the chunks in order.
    public struct Iterator: AsyncIteratorProtocol {
        let run: Run

        /// The next chunk of the file, or `nil` after the last byte.
        ///
        /// - Throws: ``DownloadError`` when the download failed.
        public mutating func next() async throws(DownloadError) -> [UInt8]? {
            try await run.next().get()
        }
    }

    /// Runs the download on the first `next()` and cancels it when the iterator is dropped.
    final class Run: Sendable {
        let download: Download
        let channel: ChunkChannel
        private let task = NIOLockedValueBox<Task<Void, Never>?>(nil)

        init(download: Download, channel: ChunkChannel) {
            self.download = download
            self.channel = channel
        }

        deinit {
            channel.abandon()
            task.withLockedValue { $0?.cancel() }
        }

        func next() async -> Result<[UInt8]?, DownloadError> {
            task.withLockedValue { task in
                guard task == nil else { return }
                let (download, channel) = (download, channel)
                task = Task {
                    do throws(DownloadError) {
                        _ = try await download.run()
                        channel.close(.success(()))
                    } catch {
                        channel.close(.failure(error))
                    }
                }
            }
            return await withTaskCancellationHandler {
                await channel.next()
            } onCancel: { [channel, task] in
                channel.abandon()
                task.withLockedValue { $0?.cancel() }
            }
        }
    }
}

extension Download {
    /// A download of `url` read in order, as an `AsyncSequence` of byte chunks (see
    /// ``DownloadBytes``).
    public static func bytes(of url: String, options: DownloadOptions = DownloadOptions(), session: Session? = nil) -> DownloadBytes {
        let channel = ChunkChannel()
        return DownloadBytes(download: Download(url, destination: "-", consumer: channel, options: options, session: session),
                             channel: channel)
    }
}
