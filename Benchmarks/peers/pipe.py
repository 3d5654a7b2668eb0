"""The pipe benchmark (scenario p): `splitfetch -o -` read in order by another process.

Every run is a shell pipeline under `bash -o pipefail`; the producer runs under /usr/bin/time
for its own peak RSS, and the consumer's output (the SHA-256 it computed) is compared with the
content served. A wrong digest, or an unexpected exit status, fails the run.

p1  256 MiB at 16 x 4 MiB/s into sha256sum: splitfetch -n 16 against curl (one connection).
p2  1 GiB at 16 x 4 MiB/s into sha256sum: >= 90 % of 64 MiB/s, peak RSS <= window + 16 MiB.
p3  256 MiB, a quarter of the connections 16 x slower: >= 80 % of the healthy connections' ideal.
p4  unthrottled, 1 GiB and 8 GiB into sha256sum with the default window: peak RSS within 4 MiB.
p5  a consumer reading 1 MiB/s (32 MiB, --window 8M): keeps pace, memory bounded, no error.
p6  `head -c 1M` as the consumer of 1 GiB: splitfetch exits with status 14 within 1 s.
"""
import os
import shlex

MiB = 1 << 20
GiB = 1 << 30
WINDOW = 64 * MiB  # splitfetch's default --window

# A consumer that reads standard input at RATE bytes/s and prints its SHA-256.
SLOW_READER = r"""
import hashlib, sys, time
rate = float(sys.argv[1]); h = hashlib.sha256(); n = 0; start = time.monotonic()
while True:
    b = sys.stdin.buffer.read(65536)
    if not b: break
    h.update(b); n += len(b)
    ahead = n / rate - (time.monotonic() - start)
    if ahead > 0: time.sleep(ahead)
print(h.hexdigest())
"""


def run_piped(timed_run, producer, consumer, expected_sha, work, timeout, expected_status=0):
    """Runs `producer | consumer`; the consumer's first word must be `expected_sha` (unless None).

    Returns a run record as bench.py's run_once does: ok, wall, cpu and rss_kib of the producer."""
    timefile = os.path.join(work, "pipe.time")
    shafile = os.path.join(work, "pipe.sha")
    for path in (timefile, shafile):
        if os.path.exists(path):
            os.remove(path)
    line = (f"/usr/bin/time -f '%e %U %S %M' -o {timefile} {shlex.join(producer)} | {consumer} > {shafile}")
    rc, err, wall = timed_run(["bash", "-o", "pipefail", "-c", line], timeout)
    if rc is None:
        return {"ok": False, "error": "timeout"}
    if rc != expected_status:
        return {"ok": False, "error": f"exit {rc} (expected {expected_status}): {err.strip()}"}
    if expected_sha is not None:
        got = open(shafile).read().split()[:1]
        if got != [expected_sha]:
            return {"ok": False, "error": "SHA-256 mismatch"}
    parts = open(timefile).read().split()[-4:]
    return {"ok": True, "wall": wall, "cpu": float(parts[1]) + float(parts[2]), "rss_kib": int(parts[3])}


def pipe_scenarios(args, work, servers, server_class, hash_of, timed_run, result_row, rows):
    """Runs p1-p6 into `rows`; `server_class(work, binary, rate, slow_every=...)` starts sf-testserver."""
    q = args.quick
    splitfetch = os.path.abspath(args.splitfetch)

    def sf(url, n, *extra):
        return [splitfetch, "-q", "-n", str(n), *extra, "-o", "-", url]

    def curl(url, n, *extra):
        return ["curl", "-s", "-o", "-", url]

    def bench(scenario, label, size, selected, runs=None, ideal=None, consumer="sha256sum", sha=None, status=0, timeout=600):
        results = {name: [] for name, _, _ in selected}
        for r in range(runs or args.runs):
            for name, argv, n in selected:  # interleaved
                res = run_piped(timed_run, argv, consumer, sha, work, timeout, expected_status=status)
                results[name].append(res)
                shown = f"{res['wall']:.2f} s" if res["ok"] else f"FAILED ({res['error']})"
                print(f"bench: scenario {scenario} {label} {name} run {r + 1}: {shown}", flush=True)
        for name, _, n in selected:
            rows.append(result_row(scenario, label, name, n, size, results[name], ideal(n) if ideal else None))

    fast = server_class(work, args.testserver, 4 * MiB)
    servers.append(fast)
    base = f"http://127.0.0.1:{fast.port}/size"

    size = 64 * MiB if q else 256 * MiB
    url = f"{base}/{size}/p1.bin"
    bench("p1", "pipe to sha256sum, 4 MiB/s per connection", size,
          [("splitfetch -o -", sf(url, 16), 16), ("curl -o -", curl(url, 1), 1)],
          ideal=lambda n: n * 4 * MiB, sha=hash_of(size))

    size = 256 * MiB if q else 1 * GiB
    bench("p2", "pipe to sha256sum, 4 MiB/s per connection", size,
          [("splitfetch -o -", sf(f"{base}/{size}/p2.bin", 16), 16)], ideal=lambda n: n * 4 * MiB, sha=hash_of(size))

    slow = server_class(work, args.testserver, 4 * MiB, slow_every=4, slow_factor=16)
    servers.append(slow)
    size = 64 * MiB if q else 256 * MiB
    # The healthy connections' ideal: three in four at 4 MiB/s.
    bench("p3", "pipe, 1 in 4 connections 16x slower", size,
          [("splitfetch -o -", sf(f"http://127.0.0.1:{slow.port}/size/{size}/p3.bin", 16), 16)],
          ideal=lambda n: (n - n // 4) * 4 * MiB, sha=hash_of(size))

    free = server_class(work, args.testserver, 0)
    servers.append(free)
    for scenario, size in (("p4a", 256 * MiB if q else 1 * GiB), ("p4b", 2 * GiB if q else 8 * GiB)):
        bench(scenario, "pipe to sha256sum, unthrottled, default window", size,
              [("splitfetch -o -", sf(f"http://127.0.0.1:{free.port}/size/{size}/{scenario}.bin", 8), 8)],
              runs=1 if scenario == "p4b" else None, sha=hash_of(size), timeout=900)

    size = 16 * MiB if q else 32 * MiB
    reader = os.path.join(work, "slow_reader.py")
    with open(reader, "w") as f:
        f.write(SLOW_READER)
    bench("p5", "consumer reading 1 MiB/s, --window 8M", size,
          [("splitfetch -o -", sf(f"{base}/{size}/p5.bin", 16, "--window", "8M"), 16)],
          runs=1, ideal=lambda n: MiB, consumer=f"python3 {reader} {MiB}", sha=hash_of(size))

    size = 1 * GiB
    bench("p6", "head -c 1M as the consumer", MiB,
          [("splitfetch -o -", sf(f"{base}/{size}/p6.bin", 16), 16)], consumer="head -c 1M > /dev/null", status=14)


def pipe_verdicts(rows):
    """The issue's targets, from the p rows: lines of text."""
    def row(scenario, tool="splitfetch -o -"):
        return next((r for r in rows if r["scenario"] == scenario and r["tool"] == tool and "wall_median" in r), None)

    def verdict(ok):
        return "met" if ok else "NOT met"

    lines = []
    p1, curl = row("p1"), row("p1", "curl -o -")
    if p1 and curl:
        lines.append(f"p1: splitfetch -o - {p1['wall_median']:.2f} s against curl -o - {curl['wall_median']:.2f} s "
                     f"({curl['wall_median'] / p1['wall_median']:.1f} x faster)")
    p2 = row("p2")
    if p2:
        lines.append(f"p2: {p2['ideal_fraction'] * 100:.1f} % of 16 x 4 MiB/s (target >= 90 %: {verdict(p2['ideal_fraction'] >= 0.9)}); "
                     f"peak RSS {p2['rss_mib']:.1f} MiB (target <= window + 16 = {WINDOW / MiB + 16:.0f} MiB: "
                     f"{verdict(p2['rss_mib'] <= WINDOW / MiB + 16)})")
    p3 = row("p3")
    if p3:
        lines.append(f"p3: {p3['ideal_fraction'] * 100:.1f} % of the healthy connections' ideal "
                     f"(target >= 80 %: {verdict(p3['ideal_fraction'] >= 0.8)})")
    small, large = row("p4a"), row("p4b")
    if small and large:
        extra = large["rss_mib"] - small["rss_mib"]
        lines.append(f"p4: peak RSS {large['rss_mib']:.1f} MiB for {large['size'] / GiB:.0f} GiB against {small['rss_mib']:.1f} MiB "
                     f"for {small['size'] / GiB:.2g} GiB: {extra:+.1f} MiB (target: within 4 MiB: {verdict(abs(extra) <= 4)})")
    p5 = row("p5")
    if p5:
        lines.append(f"p5: a 1 MiB/s consumer took {p5['wall_median']:.2f} s for {p5['size'] / MiB:.0f} MiB "
                     f"({p5['ideal_fraction'] * 100:.1f} % of its pace), peak RSS {p5['rss_mib']:.1f} MiB, no error")
    p6 = row("p6")
    if p6:
        lines.append(f"p6: with head -c 1M, splitfetch exited with 14 after {p6['wall_max']:.3f} s at most "
                     f"(target within 1 s: {verdict(p6['wall_max'] <= 1)})")
    return lines
