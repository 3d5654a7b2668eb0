// swift-tools-version:6.1
import PackageDescription

// Micro-benchmarks of Splitfetch's hot paths with package-benchmark:
//   swift package --disable-sandbox benchmark
//   swift package --disable-sandbox benchmark baseline update         (record a baseline)
//   swift package --disable-sandbox benchmark baseline check --check-absolute-path Thresholds
let package = Package(
    name: "SplitfetchMicroBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Splitfetch", path: "../.."),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
    ],
    targets: [
        .executableTarget(
            name: "SplitfetchMicro",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "Splitfetch", package: "Splitfetch"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Benchmarks/SplitfetchMicro",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    ]
)
