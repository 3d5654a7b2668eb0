import Splitfetch

/// `--stats-json` of a run with several URLs.
struct BatchStatistics: Encodable {
    var files: [DownloadStatistics]
    var fileCount: Int
    var failed: Int
    /// Files a conditional refresh (`-N`) found unchanged on the server (counted in `files`).
    var unchanged: Int
    var failures: [FailedDownload]
    var size: Int64
    var seconds: Double
    var averageBytesPerSecond: Double
}

/// `--stats-json` of a download that failed: which, why, and the exit status.
struct FailedDownload: Encodable {
    struct Failure: Encodable {
        var code: DownloadError.Code
        var message: String
        var httpStatus: Int?
        init(_ error: DownloadError) {
            code = error.code
            message = error.message
            httpStatus = error.httpStatus
        }
    }
    var url: String
    var path: String?
    var error: Failure
    var exitStatus: Int32
}
