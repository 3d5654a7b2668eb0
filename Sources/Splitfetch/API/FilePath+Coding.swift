import SystemPackage

// A path's JSON form is its string, not swift-system's storage: the synthesized `Codable` of
// ``PartialDownload`` and ``DownloadSnapshot`` (and any other type of the library) picks these
// overloads.
extension KeyedEncodingContainer {
    mutating func encode(_ path: FilePath, forKey key: Key) throws {
        try encode(path.string, forKey: key)
    }
}

extension KeyedDecodingContainer {
    func decode(_ type: FilePath.Type, forKey key: Key) throws -> FilePath {
        FilePath(try decode(String.self, forKey: key))
    }
}
