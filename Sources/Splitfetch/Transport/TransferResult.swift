import DownloadCore

/// How a transfer ended.
struct TransferResult: Sendable {
    /// The final response's head, if one arrived.
    var head: ResponseHead?
    /// The URL after redirects.
    var effectiveURL: String?
    /// Where a `3xx` response points, resolved to an absolute URL.
    var redirectURL: String?
    /// libcurl's result code (`CURLE_OK` is 0).
    var curlCode: Int32 = 0
    /// libcurl's error text, when `curlCode` is not 0.
    var curlMessage: String = ""
    /// Body bytes delivered to the sink (or discarded, without a sink).
    var bodyBytes: Int64 = 0
    /// The sink stopped the transfer deliberately.
    var stoppedBySink = false
    /// The sink rejected the response or failed to store it.
    var sinkError: DownloadError?
    /// The task was cancelled.
    var cancelled = false
    /// The proxy's answer to `CONNECT` (for an `https` URL through a proxy), when it was not 200.
    var proxyConnectStatus: Int?
    /// The request went out (libcurl counted its bytes): an error after that concerns the reply.
    var requestSent = false
    /// The request went out on a connection an earlier transfer had opened.
    var reusedConnection = false
}
