// swift-tools-version:6.0
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

// Linux only: the library uses Glibc, /proc (boot id, thread names), posix_fallocate and
// sync_file_range. No Apple platform is claimed, because none is built or tested.
let package = Package(
    name: "Splitfetch",
    products: [
        .library(name: "Splitfetch", targets: ["Splitfetch"]),
        .executable(name: "splitfetch", targets: ["splitfetch"]),
        .executable(name: "sf-testserver", targets: ["sf-testserver"]),
        // The daemon (`splitfetch serve` runs it): its own binary, so the one-shot tool links none
        // of its server, database or WebSocket code.
        .executable(name: "splitfetch-daemon", targets: ["splitfetch-daemon"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-http-structured-headers", from: "1.7.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        // scripts/docs: the DocC catalogue (swift package generate-documentation).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // The daemon: its queue in SQLite (WAL), its JSON-RPC over HTTP and WebSocket.
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.8.1"),
        // The daemon's queue in PostgreSQL (--queue postgres://…).
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // The daemon's own service group: a graceful stop with a time limit.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // libcurl (libcurl4-openssl-dev's headers), opened at run time, not linked: its 26
        // libraries took about 5 ms of each start. Stubs under libcurl's names, and typed
        // wrappers for its variadic calls.
        .target(name: "CCurl"),
        // The pure download core: every decision of a download, as values. Internal to the
        // package (no product): the library, the simulator and the tests stand on it.
        .target(
            name: "DownloadCore",
            dependencies: [
                // The queue's waiting downloads, taken from the front (QueueSchedule).
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: strict
        ),
        // Test support: drives the pure core on a virtual clock with simulated servers.
        .target(name: "DownloadSimulation", dependencies: ["DownloadCore"], swiftSettings: strict),
        .target(name: "CShims"),
        // Percent-encoding, shared by the library and the test server.
        .target(name: "PercentEncoding", swiftSettings: strict),
        // OpenSSL's libcrypto, which libcurl4-openssl loads anyway: SHA-256/512, SHA-1, MD5.
        .systemLibrary(name: "COpenSSLCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .target(
            name: "Splitfetch",
            dependencies: [
                "CCurl",
                "CShims",
                "PercentEncoding",
                "COpenSSLCrypto",
                // RFC 8941 structured fields (Repr-Digest, Content-Digest), without Foundation.
                .product(name: "RawStructuredFieldValues", package: "swift-http-structured-headers"),
                "DownloadCore",
                .product(name: "SystemPackage", package: "swift-system"),
                // pthread-based locks: visible to ThreadSanitizer, unlike Synchronization.Mutex's futex.
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // Diagnostics: a Logger in the options; the library itself never prints.
                .product(name: "Logging", package: "swift-log"),
                // The timer thread's deadlines (TimerQueue).
                .product(name: "HeapModule", package: "swift-collections"),
                // Event buffers read from the front (a restart queues an event per job).
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: strict
        ),
        // The command line as a library, so that Swift tests reach its parsing, exit statuses and
        // JSON outputs; the executable is its main() alone.
        .target(
            name: "SplitfetchCLI",
            dependencies: [
                "Splitfetch",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "SystemPackage", package: "swift-system"),
                // Locks ThreadSanitizer sees (pthread mutexes), as in the library.
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(name: "splitfetch", dependencies: ["SplitfetchCLI"], swiftSettings: strict),
        // The download daemon: a durable queue (SQLite through GRDB, or PostgreSQL through
        // postgres-nio) behind aria2's JSON-RPC.
        .target(
            name: "SplitfetchDaemon",
            dependencies: [
                "Splitfetch",
                // malloc_trim after a large request (HeapTrim).
                "CShims",
                // The schedule's decision (BandwidthSchedule) is the core's.
                "DownloadCore",
                // Webhook signatures (HMAC-SHA256).
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "splitfetch-daemon",
            dependencies: [
                "SplitfetchDaemon",
                "CShims",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "TestHTTPServer",
            dependencies: [
                "PercentEncoding",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "sf-testserver",
            dependencies: [
                "TestHTTPServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "sf-simulate",
            dependencies: ["DownloadSimulation", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: strict
        ),
        // A rate limit changed while a download runs, measured (scripts/bench --scenarios rc); an
        // idle queue's CPU; a large queue's operations (`queue`) and decisions (`schedule`).
        .executableTarget(
            name: "sf-ratebench",
            dependencies: [
                "Splitfetch",
                // The queue's decisions alone (`schedule`).
                "DownloadCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: strict
        ),
        // libFuzzer targets for the parsers of untrusted input (scripts/fuzz).
        .executableTarget(name: "sf-fuzz", dependencies: ["Splitfetch", "DownloadCore"], swiftSettings: strict),
        .testTarget(name: "DownloadCoreTests", dependencies: ["DownloadCore", "DownloadSimulation"],
                    swiftSettings: strict),
        .testTarget(
            name: "SplitfetchDaemonTests",
            dependencies: ["SplitfetchDaemon", "Splitfetch", "DownloadCore", "TestHTTPServer", "CShims", .product(name: "SystemPackage", package: "swift-system"),
                           .product(name: "PostgresNIO", package: "postgres-nio"),
                           .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "SplitfetchCLITests",
            dependencies: ["SplitfetchCLI", "Splitfetch", "TestHTTPServer", .product(name: "SystemPackage", package: "swift-system"),
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "NIOConcurrencyHelpers", package: "swift-nio")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "SplitfetchTests",
            dependencies: [
                "Splitfetch", "TestHTTPServer", "DownloadCore", "PercentEncoding",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Fixtures"],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
