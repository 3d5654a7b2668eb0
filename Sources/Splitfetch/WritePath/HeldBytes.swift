import NIOConcurrencyHelpers

/// Bytes held in order, in chunks from a ``ChunkPool``: appending never moves what is held.
struct HeldBytes: Sendable {
    private(set) var chunks: [[UInt8]] = []
    private(set) var count = 0
    let pool: ChunkPool

    init(pool: ChunkPool) {
        self.pool = pool
    }

    var isEmpty: Bool { count == 0 }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        var start = 0
        while start < bytes.count {
            if chunks.isEmpty || chunks[chunks.count - 1].count == pool.chunkSize { chunks.append(pool.take()) }
            let last = chunks.count - 1
            let end = min(bytes.count, start + pool.chunkSize - chunks[last].count)
            chunks[last].append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[start..<end]))
            start = end
        }
        count += bytes.count
    }

    /// Hands the held bytes to `body` in order, chunk by chunk, until it returns `false`.
    func forEachChunk(_ body: (UnsafeRawBufferPointer) -> Bool) {
        for chunk in chunks where !chunk.isEmpty {
            guard chunk.withUnsafeBytes(body) else { return }
        }
    }

    /// Drops what is held and gives the chunks back to the pool.
    mutating func release() {
        let given = chunks
        chunks = []
        count = 0
        pool.give(given)
    }
}
