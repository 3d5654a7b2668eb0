#!/usr/bin/env python3
"""Side-by-side download benchmark: splitfetch against aria2, axel, lftp pget, wget2, curl, wget.

Every tool downloads the same URL with the same connection count; runs are interleaved
(A, B, C, ... then again, in a new order each round) so machine drift hits every tool alike;
each figure is the median of the runs with min-max; every output is checked by SHA-256 and a
wrong file counts as a failed run. Results go to RESULTS/table.md, RESULTS/results.csv and RESULTS/throughput.svg.

Servers run only on 127.0.0.1: nginx with its own config and pid file, and the project's
sf-testserver (a token bucket per TCP connection, no burst).
"""
import argparse
import csv
import datetime
import hashlib
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from integrity import integrity_tools, integrity_verdicts
from refresh import refresh_scenarios, refresh_verdicts
from nginxconf import nginx_conf
from http2 import http2_scenarios, http2_verdicts
from ftp import ftp_scenarios, ftp_verdicts
from daemon import daemon_scenarios, daemon_verdicts
from fleet import fleet_scenarios, fleet_verdicts
from mirrors import mirror_scenarios, mirror_verdicts
from pipe import pipe_scenarios, pipe_verdicts

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 * MiB)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


class Nginx:
    """nginx on loopback with its own prefix; / unthrottled, /limited/ with limit_rate."""

    def __init__(self, workdir, root):
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "tmp"), exist_ok=True)
        self.port = free_port()
        self.log = os.path.join(self.dir, "logs", "access.log")
        # The connection and the time (ms) are prefixed, so " 200 " still finds only statuses; the
        # refresh scenario times each connection's requests with them.
        conf = nginx_conf(self.dir, self.port, root, self.log, "$request_uri $status $body_bytes_sent c$connection t$msec")
        with open(os.path.join(self.dir, "nginx.conf"), "w") as f:
            f.write(conf)
        subprocess.run(["/usr/sbin/nginx", "-p", self.dir, "-c", os.path.join(self.dir, "nginx.conf"),
                        "-e", os.path.join(self.dir, "logs", "error.log")], check=True)
        wait_port(self.port)

    def requests_since(self, offset):
        with open(self.log, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
        return sum(1 for l in lines if " 200 " in l or " 206 " in l)

    def log_size(self):
        return os.path.getsize(self.log) if os.path.exists(self.log) else 0

    def stop(self):
        pidfile = os.path.join(self.dir, "nginx.pid")
        if os.path.exists(pidfile):
            pid = int(open(pidfile).read().strip())
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.1)


class TestServer:
    """The project's sf-testserver: exact per-connection token bucket."""

    def __init__(self, workdir, binary, rate, slow_every=0, slow_factor=16, latency_ms=0):
        portfile = os.path.join(workdir, f"ts-{rate}-{slow_every}-{latency_ms}.port")
        args = [binary, "serve", "--rate", str(rate), "--port-file", portfile, "--latency", str(latency_ms)]
        if slow_every:
            args += ["--slow-every", str(slow_every), "--slow-factor", str(slow_factor)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(portfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.port = int(open(portfile).read())
        wait_port(self.port)

    def stats(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/__stats", timeout=5) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def then_syncfs(argv, directory):
    """argv, then `sync -f DIRECTORY` (syncfs of its file system) if it succeeded, as one timed
    command: a peer that syncs nothing made as durable as splitfetch's default. The bench has
    already written out every other dirty page (`settle_disk`), so only the tool's output is left
    to write."""
    return ["sh", "-c", '"$@" && exec sync -f "$0"', directory] + argv


# Each tool: argv for (url, output path, connections, size).
def tool_commands(splitfetch):
    def sf(url, out, n, size):
        return [splitfetch, "-q", "-n", str(n), "--force", "-o", os.path.basename(out), "-d", os.path.dirname(out), url]

    def sf_no_sync(url, out, n, size):
        return sf(url, out, n, size)[:1] + ["--no-sync"] + sf(url, out, n, size)[1:]

    def sf_no_checkpoints(url, out, n, size):
        return sf(url, out, n, size)[:1] + ["--checkpoint-interval", "0"] + sf(url, out, n, size)[1:]

    def aria2(url, out, n, size):
        return ["aria2c", "-q", "-x", str(n), "-s", str(n), "-k", "1M", "--allow-overwrite=true",
                "--auto-file-renaming=false", "-d", os.path.dirname(out), "-o", os.path.basename(out), url]

    def axel(url, out, n, size):
        return ["axel", "-q", "-n", str(n), "-o", out, url]

    def lftp(url, out, n, size):
        return ["lftp", "-c", f"set net:max-retries 2; pget -n {n} '{url}' -o '{out}'"]

    def wget2(url, out, n, size):
        chunk = max(1 * MiB, (size + n - 1) // n)
        return ["wget2", "-q", "--no-robots", f"--max-threads={n}", f"--chunk-size={chunk}", "-O", out, url]

    def curl(url, out, n, size):
        return ["curl", "-s", "-o", out, url]

    def wget(url, out, n, size):
        return ["wget", "-q", "-O", out, url]

    def wget2_syncfs(url, out, n, size):
        return then_syncfs(wget2(url, out, n, size), os.path.dirname(out))

    return {"splitfetch": (sf, True), "splitfetch-no-checkpoints": (sf_no_checkpoints, True),
            "splitfetch-no-sync": (sf_no_sync, True), "aria2": (aria2, True), "axel": (axel, True), "lftp": (lftp, True),
            "wget2": (wget2, True), "wget2-syncfs": (wget2_syncfs, True), "curl": (curl, False), "wget": (wget, False)}


def timed_run(argv, timeout):
    """Runs argv; returns (exit status or None on timeout, the end of its standard error, wall seconds)."""
    rc, text, wall, _, _ = measured_run(argv, timeout)
    return rc, text, wall


def measured_run(argv, timeout):
    """Runs argv; returns (exit status or None on timeout, the end of its standard error, wall
    seconds, CPU seconds (user and system, its reaped children included), peak RSS in KiB).

    The wall time ends when a blocking wait returns. subprocess.run(timeout=...) polls with
    sleeps of up to 50 ms once no pipe is open, which would round exit times to its polling grid.
    CPU comes from wait4's rusage, in microseconds (/usr/bin/time prints hundredths of a second:
    a sixth of a rate-limited 64 MiB download's whole figure). The peak RSS comes from
    /usr/bin/time, which runs the tool: a child forked from this Python process would count
    this process's memory as its own peak."""
    start = time.monotonic()
    with tempfile.NamedTemporaryFile(prefix="bench-rss-", delete=False) as f:
        rss_file = f.name
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss_file] + argv, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()
    expired = threading.Event()

    def kill():
        expired.set()
        os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc
    timer.cancel()
    reader.join(timeout=10)
    text = (err[0] if err else b"").decode(errors="replace")[-300:]
    try:
        rss = int(open(rss_file).read().split()[-1])
    except (OSError, ValueError, IndexError):
        rss = 0
    os.remove(rss_file)
    return (None if expired.is_set() else rc), text, wall, usage.ru_utime + usage.ru_stime, rss


def round_order(tools, round_index):
    """The order of the tools in one round: interleaved (A, B, C, then again) so machine drift
    hits every tool alike, and shuffled each round (seeded by the round, so a rerun repeats it),
    so no tool always runs in the same place or after the same tool. On this machine that
    mattered: with a fixed order, the splitfetch run after wget2 or curl took 0.43 s where the
    same binary one place later took 0.30, and its copies into the page cache took ten times the
    samples (most likely this virtual machine's free memory, which it hands back to the host,
    being faulted in again). Rotating the order is not enough: it keeps each tool's neighbours."""
    order = list(tools)
    random.Random(round_index).shuffle(order)
    return order


def settle_disk():
    """Writes every dirty page out before a timed run (outside its time). Otherwise a run pays
    for the write-back of what came before it (freshly made test files, another tool's output),
    and only a tool that syncs its own file waits for that queue: wget2 and curl never do."""
    os.sync()


def run_once(argv, out, expected_sha, timeout):
    for p in (out, out + ".st", out + ".aria2", out + ".part", out + ".part.json"):
        if os.path.exists(p):
            os.remove(p)
    settle_disk()
    rc, err, wall, cpu, rss = measured_run(argv, timeout)
    if rc is None:
        return {"ok": False, "error": "timeout"}
    if rc != 0 or not os.path.exists(out):
        return {"ok": False, "error": f"exit {rc}: {err.strip()}"}
    digest = sha256_file(out)
    os.remove(out)
    if digest != expected_sha:
        return {"ok": False, "error": "SHA-256 mismatch"}
    return {"ok": True, "wall": wall, "cpu": cpu, "rss_kib": rss}


def many_commands(splitfetch):
    """Each tool: argv to fetch every URL in LIST into DIR with J parallel transfers."""
    def wget2(lst, d, j, urls):
        return ["wget2", "-q", "--no-robots", f"--max-threads={j}", "-nd", "-P", d, "-i", lst]

    return {
        "splitfetch": lambda lst, d, j, urls: [splitfetch, "-q", "-n", "1", "-j", str(j), "-i", lst, "-d", d],
        # What durability costs: the same without fdatasync before the rename (run only when named).
        "splitfetch-no-sync": lambda lst, d, j, urls: [splitfetch, "-q", "--no-sync", "-n", "1", "-j", str(j), "-i", lst, "-d", d],
        "aria2": lambda lst, d, j, urls: ["aria2c", "-q", "-j", str(j), "-x", "1", "-i", lst, "-d", d,
                                          "--allow-overwrite=true", "--auto-file-renaming=false"],
        "wget2": wget2,
        # wget2's files made durable as splitfetch's are (run only when named).
        "wget2-syncfs": lambda lst, d, j, urls: then_syncfs(wget2(lst, d, j, urls), d),
        "curl": lambda lst, d, j, urls: ["curl", "-s", "--parallel", "--parallel-max", str(j), "--output-dir", d,
                                         "--remote-name-all"] + urls,
        "wget": lambda lst, d, j, urls: ["wget", "-q", "-nd", "-P", d, "-i", lst],
    }


def run_many(argv, out_dir, expected, timeout):
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    settle_disk()
    rc, err, wall, cpu, rss = measured_run(argv, timeout)
    if rc is None:
        return {"ok": False, "error": "timeout"}
    if rc != 0:
        return {"ok": False, "error": f"exit {rc}: {err}"}
    for name, sha in expected.items():
        path = os.path.join(out_dir, name)
        if not os.path.exists(path) or sha256_file(path) != sha:
            return {"ok": False, "error": f"{name} missing or wrong"}
    return {"ok": True, "wall": wall, "cpu": cpu, "rss_kib": rss}


def result_row(scenario, label, tool, connections, size, runs, ideal=None):
    """One table row from a tool's runs: medians with min-max over the successful ones."""
    ok = [x for x in runs if x["ok"]]
    row = {"scenario": scenario, "label": label, "tool": tool, "connections": connections,
           "size": size, "runs": len(runs), "failed": len(runs) - len(ok)}
    wall = summarize([x["wall"] for x in ok])
    if wall:
        row.update({"wall_median": wall["median"], "wall_min": wall["min"], "wall_max": wall["max"],
                    "mib_s": size / wall["median"] / MiB,
                    # A run that fetches no body (a refresh of unchanged files) has no per-GiB figure.
                    "cpu_s_per_gib": statistics.median([x["cpu"] for x in ok]) * GiB / size if size else 0.0,
                    "rss_mib": max(x["rss_kib"] for x in ok) / 1024})
        if ideal:
            row["ideal_fraction"] = size / wall["median"] / ideal
        reqs = [x["requests"] for x in ok if x.get("requests") is not None]
        if reqs:
            row["requests"] = statistics.median(reqs)
    return row


def summarize(values):
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--splitfetch", default=os.path.join(ROOT, ".build/release/splitfetch"))
    ap.add_argument("--testserver", default=os.path.join(ROOT, ".build/release/sf-testserver"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenarios", default="1,2,3,4,5",
                    help="1-6 and 5l as in the README; 'c' = checkpoint overhead (splitfetch with and without checkpoints); "
                         "'v' = integrity: a verified download against download+sha256sum and aria2 --checksum; "
                         "'p' = -o - piped into sha256sum and slow or early-exiting readers, against curl -o -; "
                         "'r' = --limit-rate 8M against its cap, and its CPU against curl's; 'rc' = a rate limit changed while running (4, 1, 8 MiB/s); 'idle' = an idle queue of 20 paused downloads, CPU over 30 s; "
                         "'m' = one file from three mirrors (2/4/8 MiB/s per connection, 4 each), against aria2 with the same URIs; "
                         "'d' = scenario 6's files through the daemon's API, against -i and aria2c --enable-rpc; "
                         "'dq' = 20,000 paused jobs in the daemon and in aria2's: RSS, tellWaiting p99, restart; "
                         "'n' = a refresh of 2,000 unchanged files through a 50 ms relay: -N against wget2 -N, aria2c --conditional-get, curl --etag-compare; "
                         "'h2' = nginx with TLS and h2 through a 50 ms relay: 1,000 files of 64 KiB against curl --parallel, wget2 and aria2, "
                         "and 1 GiB at 4 MiB/s per request over 16 connections with --http2 auto, never and always; "
                         "'ftp' = 256 MiB from vsftpd at 4 MiB/s per connection, -n 8, against lftp pget -n 8, aria2c -x8 -s8 and axel -n 8; "
                         "'fleet' = 1,000 files of 64 KiB at a 50 ms round trip drained by one, two and four daemons on one PostgreSQL queue")
    ap.add_argument("--tools", default="splitfetch,aria2,axel,lftp,wget2,curl,wget")
    ap.add_argument("--quick", action="store_true", help="smaller files, one N per scenario (a smoke run)")
    ap.add_argument("--results", default=os.path.join(ROOT, "Benchmarks", "results", "latest"))
    ap.add_argument("--baseline", help="another splitfetch binary (an earlier build), run as the tool "
                    "'splitfetch-baseline' interleaved with the others, for before/after in one run")
    args = ap.parse_args()

    tools_all = tool_commands(os.path.abspath(args.splitfetch))
    if args.baseline:
        base = os.path.abspath(args.baseline)
        tools_all["splitfetch-baseline"] = (lambda url, out, n, size: [base] + tools_all["splitfetch"][0](url, out, n, size)[1:], True)
        if "splitfetch-baseline" not in args.tools.split(","):
            args.tools = args.tools.replace("splitfetch", "splitfetch,splitfetch-baseline", 1)
    tools = [t for t in args.tools.split(",") if t in tools_all and t != "splitfetch-no-checkpoints"]
    # splitfetch-no-sync and wget2-syncfs are only run when asked for by name.
    def program(t):  # what must be installed: for "wget2-syncfs", wget2
        return tools_all[t.removesuffix("-syncfs")][0]("u", "/x/o", 1, 1)[0]
    missing = [t for t in tools if not t.startswith("splitfetch") and shutil.which(program(t)) is None]
    if missing:
        print(f"bench: not installed, skipped: {', '.join(missing)}", file=sys.stderr)
        tools = [t for t in tools if t not in missing]
    scenarios = [int(s) if s.isdigit() else s for s in args.scenarios.split(",") if s]
    os.makedirs(args.results, exist_ok=True)

    work = tempfile.mkdtemp(prefix="splitfetch-bench-")
    os.chmod(work, 0o755)
    www = os.path.join(work, "www")
    out_dir = os.path.join(work, "out")
    os.makedirs(www)
    os.makedirs(out_dir)
    os.chmod(www, 0o755)

    def make_file(name, size):
        path = os.path.join(www, name)
        h = hashlib.sha256()
        with open(path, "wb") as f:
            left = size
            while left:
                b = os.urandom(min(left, 4 * MiB))
                f.write(b)
                h.update(b)
                left -= len(b)
        os.chmod(path, 0o644)
        return h.hexdigest()

    q = args.quick
    rows = []  # one per (scenario, tool, n)
    rate_changes = []  # scenario rc: per run, each interval's target and measured rate
    idle_runs = []  # scenario idle: per run, the idle queue's CPU
    daemon_results = {}
    refresh_results = {}
    http2_results = {}
    ftp_results = {}
    fleet_results = {}
    servers = []
    try:
        nginx = None
        if any(s in scenarios for s in (1, 2, 5, "c", "v", "r", "n")):
            nginx = Nginx(work, www)
            servers.append(nginx)

        def bench(scenario, label, url, size, sha, ns, selected, ideal_rate=None, requests_of=None, timeout=120):
            for n in ns:
                results = {t: [] for t in selected}
                for r in range(args.runs):
                    for t in round_order(selected, r):
                        fn, multi = tools_all[t]
                        conn = n if multi else 1
                        out = os.path.join(out_dir, f"{t}.bin")
                        before = requests_of() if requests_of else None
                        res = run_once(fn(url, out, conn, size), out, sha, timeout)
                        if requests_of and res["ok"]:
                            res["requests"] = requests_of(before)
                        results[t].append(res)
                        status = f"{res['wall']:.2f} s" if res["ok"] else f"FAILED ({res['error']})"
                        print(f"bench: scenario {scenario} {label} n={conn} {t} run {r + 1}: {status}", flush=True)
                for t in selected:
                    conn = n if tools_all[t][1] else 1
                    rows.append(result_row(scenario, label, t, conn, size, results[t],
                                           ideal_rate(conn) if ideal_rate else None))

        def nginx_requests(before=None):
            if before is None:
                return nginx.log_size()
            time.sleep(0.2)  # nginx writes the log line after the response
            return nginx.requests_since(before)

        if 1 in scenarios:
            size = 256 * MiB if q else 1 * GiB
            sha = make_file("s1.bin", size)
            bench(1, "unthrottled", f"http://127.0.0.1:{nginx.port}/s1.bin", size, sha, [8], tools,
                  requests_of=nginx_requests)
        if 2 in scenarios:
            size = 64 * MiB if q else 256 * MiB
            sha = make_file("s2.bin", size)
            bench(2, "nginx limit_rate 4m", f"http://127.0.0.1:{nginx.port}/limited/s2.bin", size, sha,
                  [16] if q else [4, 8, 16], [t for t in tools if tools_all[t][1]],
                  ideal_rate=lambda n: n * 4 * MiB, requests_of=nginx_requests)
        def many(scenario, label, urls, expected, requests_of, size):
            """Every tool fetches all of `urls` into one directory, 8 at a time."""
            listfile = os.path.join(work, f"list-{scenario}.txt")
            with open(listfile, "w") as f:
                f.write("\n".join(urls) + "\n")
            commands = many_commands(os.path.abspath(args.splitfetch))
            if args.baseline:
                base = os.path.abspath(args.baseline)
                commands["splitfetch-baseline"] = lambda lst, d, j, urls: [base] + commands["splitfetch"](lst, d, j, urls)[1:]
            selected = [t for t in tools if t in commands]
            j = 8
            results = {t: [] for t in selected}
            for r in range(args.runs):
                for t in round_order(selected, r):
                    before = requests_of()
                    res = run_many(commands[t](listfile, os.path.join(out_dir, "many"), j, urls), os.path.join(out_dir, "many"), expected, 900)
                    if res["ok"]:
                        res["requests"] = requests_of(before)
                    results[t].append(res)
                    status = f"{res['wall']:.2f} s" if res["ok"] else f"FAILED ({res['error']})"
                    print(f"bench: scenario {scenario} {len(urls)} files j={j} {t} run {r + 1}: {status}", flush=True)
            for t in selected:
                rows.append(result_row(scenario, label, t, j, size, results[t], None))

        def synthetic_files(server, files):
            """URLs on the test server for (size, seed) pairs, and their SHA-256 by file name."""
            listing = os.path.join(work, f"hash-{server.port}.txt")
            with open(listing, "w") as f:
                f.write("".join(f"{size} {seed}\n" for size, seed in files))
            hashes = subprocess.run([args.testserver, "hash", "--list", listing], capture_output=True, text=True,
                                    check=True).stdout.split()
            names = [f"m{seed}.bin" for _, seed in files]
            urls = [f"http://127.0.0.1:{server.port}/size/{size}/seed/{seed}/{name}" for (size, seed), name in zip(files, names)]
            return urls, dict(zip(names, hashes))

        if 5 in scenarios:
            count = 50 if q else 200
            os.makedirs(os.path.join(www, "many"))
            os.chmod(os.path.join(www, "many"), 0o755)
            expected = {f"m{i}.bin": make_file(f"many/m{i}.bin", MiB) for i in range(count)}
            urls = [f"http://127.0.0.1:{nginx.port}/many/m{i}.bin" for i in range(count)]
            many(5, f"many files: {count} x 1 MiB, 8 at a time, nginx, no added latency", urls, expected,
                 nginx_requests, count * MiB)
        if "5l" in scenarios or 6 in scenarios:
            # Each connection and each response waits an emulated 20 ms round trip.
            tl = TestServer(work, args.testserver, 0, latency_ms=20)
            servers.append(tl)
            # The count includes the /__stats request that reads it (the one before is counted in `before`).
            reqs = lambda before=None: tl.stats()["requests"] if before is None else tl.stats()["requests"] - before - 1
            if "5l" in scenarios:
                count = 50 if q else 200
                urls, expected = synthetic_files(tl, [(MiB, i + 1) for i in range(count)])
                many("5l", f"many files: {count} x 1 MiB, 8 at a time, 20 ms round trip", urls, expected, reqs, count * MiB)
            if 6 in scenarios:
                count = 100 if q else 1000
                rng = random.Random(6)
                # Log-uniform from 1 KiB to 16 MiB: mostly small files, some large.
                sizes = [int(math.exp(rng.uniform(math.log(KiB), math.log(16 * MiB)))) for _ in range(count)]
                urls, expected = synthetic_files(tl, [(size, 10_000 + i) for i, size in enumerate(sizes)])
                many(6, f"mixed files: {count}, 1 KiB-16 MiB, 8 at a time, 20 ms round trip", urls, expected, reqs, sum(sizes))
        if "d" in scenarios or "dq" in scenarios:
            td = TestServer(work, args.testserver, 0, latency_ms=20)
            servers.append(td)
            daemon_results = daemon_scenarios(args, work, out_dir, scenarios, synthetic_files, td, run_many, many_commands,
                                              result_row, rows, free_port, sha256_file, q, round_order, settle_disk)
        if "fleet" in scenarios:
            tf = TestServer(work, args.testserver, 0, latency_ms=50)
            servers.append(tf)
            fleet_results = fleet_scenarios(args, work, out_dir, synthetic_files, tf, result_row, rows, free_port, sha256_file, q,
                                            settle_disk)
        if "h2" in scenarios:
            http2_results = http2_scenarios(args, work, www, servers, measured_run, result_row, rows, sha256_file, q, round_order,
                                            settle_disk, free_port, wait_port, tools, make_file)
        if "ftp" in scenarios:
            ftp_results = ftp_scenarios(args, work, www, servers, measured_run, result_row, rows, sha256_file, q, round_order,
                                        settle_disk, free_port, wait_port, tools, make_file)
        if "n" in scenarios:
            refresh_results = refresh_scenarios(args, work, www, nginx, servers, measured_run, result_row, rows, sha256_file, q,
                                                round_order, settle_disk, tools)
        if "c" in scenarios:
            pair = ["splitfetch", "splitfetch-no-checkpoints"]
            size = 256 * MiB if q else 1 * GiB
            sha = make_file("c1.bin", size)
            bench("c1", "checkpoint overhead, unthrottled", f"http://127.0.0.1:{nginx.port}/c1.bin", size, sha, [8], pair,
                  requests_of=nginx_requests)
            size = 64 * MiB if q else 256 * MiB
            sha = make_file("c2.bin", size)
            bench("c2", "checkpoint overhead, nginx limit_rate 4m", f"http://127.0.0.1:{nginx.port}/limited/c2.bin", size, sha,
                  [16], pair, ideal_rate=lambda n: n * 4 * MiB, requests_of=nginx_requests)
        if "v" in scenarios:
            splitfetch = os.path.abspath(args.splitfetch)
            size = 256 * MiB if q else 1 * GiB
            sha = make_file("v1.bin", size)
            tools_all.update(integrity_tools(splitfetch, sha))
            bench("v1", "integrity, unthrottled", f"http://127.0.0.1:{nginx.port}/v1.bin", size, sha, [8],
                  ["splitfetch-verified", "splitfetch+sha256sum", "aria2-verified", "splitfetch"], timeout=300)
            tv = TestServer(work, args.testserver, 4 * MiB)
            servers.append(tv)
            size = 64 * MiB if q else 256 * MiB
            sha = subprocess.run([args.testserver, "hash", str(size)], capture_output=True, text=True, check=True).stdout.strip()
            tools_all.update(integrity_tools(splitfetch, sha))
            bench("v2", "integrity, 4 MiB/s per connection", f"http://127.0.0.1:{tv.port}/size/{size}/v2.bin", size, sha, [16],
                  ["splitfetch-verified", "splitfetch"], ideal_rate=lambda n: n * 4 * MiB)
        if "r" in scenarios:
            # --limit-rate: the whole download's average against the cap, over every connection.
            size = 64 * MiB
            sha = make_file("r1.bin", size)
            rate = 8 * MiB
            splitfetch = os.path.abspath(args.splitfetch)
            tools_all["splitfetch --limit-rate 8M"] = (lambda url, out, n, size: [
                splitfetch, "-q", "-n", str(n), "--limit-rate", "8M", "--force", "-o", os.path.basename(out),
                "-d", os.path.dirname(out), url], True)
            # The same without syncs (no durable checkpoint, no fdatasync): curl's durability, so
            # the share of the CPU that is the kernel writing the file back in our process shows.
            tools_all["splitfetch --limit-rate 8M --no-sync --checkpoint-interval 0"] = (lambda url, out, n, size: [
                splitfetch, "-q", "-n", str(n), "--limit-rate", "8M", "--no-sync", "--checkpoint-interval", "0", "--force",
                "-o", os.path.basename(out), "-d", os.path.dirname(out), url], True)
            tools_all["curl --limit-rate 8M"] = (lambda url, out, n, size: ["curl", "-s", "--limit-rate", "8M", "-o", out, url], False)
            bench("r1", "--limit-rate 8M, unthrottled nginx", f"http://127.0.0.1:{nginx.port}/r1.bin", size, sha, [8],
                  ["splitfetch --limit-rate 8M", "splitfetch --limit-rate 8M --no-sync --checkpoint-interval 0", "curl --limit-rate 8M"],
                  ideal_rate=lambda n: rate)
        if "rc" in scenarios:
            # A rate limit changed while one download runs (the library's RateLimit, through
            # sf-ratebench): 4, then 1, then 8 MiB/s, 4 s each; each interval's rate against its cap.
            tsr = TestServer(work, args.testserver, 0)
            servers.append(tsr)
            ratebench = os.path.join(os.path.dirname(os.path.abspath(args.splitfetch)), "sf-ratebench")
            for r in range(args.runs):
                out = subprocess.run([ratebench, f"http://127.0.0.1:{tsr.port}/size/{128 * MiB}/rc.bin", "--interval", "4"],
                                     capture_output=True, text=True, timeout=60)
                intervals = [json.loads(line) for line in out.stdout.splitlines()]
                rate_changes.append(intervals)
                print(f"bench: scenario rc run {r + 1}: " + ", ".join(
                    f"{i['measured'] / MiB:.2f} MiB/s for {i['target'] / MiB:.0f}" for i in intervals), flush=True)
        if "idle" in scenarios:
            # An idle queue: 20 downloads started (1 MB/s per connection), paused, then 30 s of
            # nothing; the process's CPU over those 30 s, from /proc (sf-ratebench idle).
            tsi = TestServer(work, args.testserver, 1000000)
            servers.append(tsi)
            ratebench = os.path.join(os.path.dirname(os.path.abspath(args.splitfetch)), "sf-ratebench")
            for r in range(args.runs):
                out = subprocess.run([ratebench, "idle", f"http://127.0.0.1:{tsi.port}/size/{64 * MiB}/idle.bin",
                                      "--seconds", "30"], capture_output=True, text=True, timeout=120)
                idle_runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"bench: scenario idle run {r + 1}: {idle_runs[-1]}", flush=True)
        if "p" in scenarios:
            def hash_of(size):
                return subprocess.run([args.testserver, "hash", str(size)], capture_output=True, text=True, check=True).stdout.strip()
            pipe_scenarios(args, work, servers, TestServer, hash_of, timed_run, result_row, rows)
        if "m" in scenarios:
            def hash_of_m(size):
                return subprocess.run([args.testserver, "hash", str(size)], capture_output=True, text=True, check=True).stdout.strip()
            mirror_scenarios(args, work, servers, TestServer, hash_of_m, run_once, result_row, rows, tools)
        if 3 in scenarios or 4 in scenarios:
            if 3 in scenarios:
                ts = TestServer(work, args.testserver, 1 * MiB)
                servers.append(ts)
                size = 32 * MiB if q else 64 * MiB
                sha = hashlib.sha256(b"").hexdigest()
                sha = subprocess.run([args.testserver, "hash", str(size)], capture_output=True, text=True, check=True).stdout.strip()
                reqs = lambda before=None: ts.stats()["requests"] if before is None else ts.stats()["requests"] - before
                bench(3, "strict 1 MiB/s per connection", f"http://127.0.0.1:{ts.port}/size/{size}/s3.bin", size, sha,
                      [16], [t for t in tools if tools_all[t][1]], ideal_rate=lambda n: n * MiB, requests_of=reqs)
            if 4 in scenarios:
                rate = 2 * MiB
                ts4 = TestServer(work, args.testserver, rate, slow_every=4, slow_factor=16)
                servers.append(ts4)
                size = 64 * MiB if q else 128 * MiB
                sha = subprocess.run([args.testserver, "hash", str(size)], capture_output=True, text=True, check=True).stdout.strip()
                reqs = lambda before=None: ts4.stats()["requests"] if before is None else ts4.stats()["requests"] - before
                n = 8
                # A quarter of the connections at rate/16, the rest at rate.
                ideal = lambda c: (c - c // 4) * rate + (c // 4) * rate / 16
                bench(4, "straggler: 1 in 4 connections 16x slower", f"http://127.0.0.1:{ts4.port}/size/{size}/s4.bin",
                      size, sha, [n], [t for t in tools if tools_all[t][1]], ideal_rate=ideal, requests_of=reqs)
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)

    write_results(args.results, rows)
    verdicts = integrity_verdicts(rows) + pipe_verdicts(rows) + mirror_verdicts(rows) + daemon_verdicts(daemon_results) + refresh_verdicts(refresh_results) + http2_verdicts(http2_results) + ftp_verdicts(ftp_results) + fleet_verdicts(fleet_results)
    for run, intervals in enumerate(rate_changes):
        within = all(abs(i["ratio"] - 1) <= 0.10 for i in intervals) and len(intervals) == 3
        verdicts.append(f"rc run {run + 1}: rate changed while running, measured / cap per 4 s interval: " + ", ".join(
            f"{i['target'] / MiB:.0f} MiB/s {i['ratio']:.3f}" for i in intervals) +
            f" (target each within 10 %: {'met' if within else 'NOT met'})")
    for run in idle_runs:
        verdicts.append(f"idle run: a queue with {run['paused']} paused downloads used {run['cpuSeconds']:.3f} CPU s over "
                        f"{run['wallSeconds']:.1f} s, {run['percentOfACore']:.3f} % of a core "
                        f"(target under 1 %: {'met' if run['percentOfACore'] < 1 and run['paused'] == 20 else 'NOT met'})")
    limited = {r["tool"]: r for r in rows if r["scenario"] == "r1" and "cpu_s_per_gib" in r}
    if "splitfetch --limit-rate 8M" in limited and "curl --limit-rate 8M" in limited:
        ours, curl = limited["splitfetch --limit-rate 8M"]["cpu_s_per_gib"], limited["curl --limit-rate 8M"]["cpu_s_per_gib"]
        verdicts.append(f"r1: CPU s/GiB under --limit-rate 8M: splitfetch -n 8 {ours:.2f}, curl {curl:.2f}: {ours / curl:.2f} x "
                        f"(target at most 2 x: {'met' if ours <= 2 * curl else 'NOT met'})")
        unsynced = limited.get("splitfetch --limit-rate 8M --no-sync --checkpoint-interval 0")
        if unsynced:
            verdicts.append(f"r1: the same without syncs (curl's durability): {unsynced['cpu_s_per_gib']:.2f} CPU s/GiB, "
                            f"{unsynced['cpu_s_per_gib'] / curl:.2f} x curl")
    for r in rows:
        if r["scenario"] == "r1" and r["tool"].startswith("splitfetch") and "ideal_fraction" in r:
            off = (r["ideal_fraction"] - 1) * 100
            verdicts.append(f"r1: --limit-rate 8M averaged {r['mib_s']:.2f} MiB/s over {r['size'] / MiB:.0f} MiB: {off:+.1f} % "
                            f"(target within 5 %: {'met' if abs(off) <= 5 else 'NOT met'})")
    if verdicts:
        with open(os.path.join(args.results, "table.md"), "a") as f:
            f.write("\n".join(verdicts) + "\n")
        print("\n".join(verdicts))


def write_results(directory, rows):
    fields = ["scenario", "label", "tool", "connections", "size", "runs", "failed", "wall_median", "wall_min",
              "wall_max", "mib_s", "ideal_fraction", "cpu_s_per_gib", "rss_mib", "requests"]
    with open(os.path.join(directory, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Measured {date} on {machine} (loopback).", ""]
    for scenario in sorted({r["scenario"] for r in rows}, key=str):
        srows = [r for r in rows if r["scenario"] == scenario]
        lines.append(f"### Scenario {scenario}: {srows[0]['label']}, {srows[0]['size'] // MiB} MiB")
        lines.append("")
        lines.append("| tool | N | wall s (median, min–max) | MiB/s | of ideal | CPU s/GiB | peak RSS MiB | requests | failed |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for r in srows:
            if "wall_median" in r:
                ideal = f"{r['ideal_fraction'] * 100:.1f}%" if "ideal_fraction" in r else "–"
                req = f"{r['requests']:.0f}" if "requests" in r else "–"
                lines.append(f"| {r['tool']} | {r['connections']} | {r['wall_median']:.2f} ({r['wall_min']:.2f}–{r['wall_max']:.2f}) "
                             f"| {r['mib_s']:.1f} | {ideal} | {r['cpu_s_per_gib']:.2f} | {r['rss_mib']:.1f} | {req} | {r['failed']}/{r['runs']} |")
            else:
                lines.append(f"| {r['tool']} | {r['connections']} | – | – | – | – | – | – | {r['failed']}/{r['runs']} |")
        lines.append("")
    with open(os.path.join(directory, "table.md"), "w") as f:
        f.write("\n".join(lines))
    write_svg(os.path.join(directory, "throughput.svg"), rows)
    print("\n".join(lines))


def write_svg(path, rows):
    """Throughput against connection count per tool, for scenario 2 (and any multi-N scenario)."""
    data = [r for r in rows if r["scenario"] == 2 and "mib_s" in r]
    if not data:
        data = [r for r in rows if "mib_s" in r]
    tools = sorted({r["tool"] for r in data})
    ns = sorted({r["connections"] for r in data})
    width, height, left, bottom, top, right = 640, 400, 60, 50, 30, 140
    ymax = max([r["mib_s"] for r in data] + [1]) * 1.1
    xs = {n: left + (i + 0.5) * (width - left - right) / max(1, len(ns)) for i, n in enumerate(ns)}
    y = lambda v: top + (height - top - bottom) * (1 - v / ymax)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="18">Throughput (MiB/s) by connection count{" — nginx limit_rate 4m" if data and data[0]["scenario"] == 2 else ""}</text>',
           f'<line x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0)}" stroke="black"/>']
    for i in range(6):
        v = ymax * i / 5
        out.append(f'<text x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{v:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{y(v)}" x2="{width - right}" y2="{y(v)}" stroke="#ddd"/>')
    for n, x in xs.items():
        out.append(f'<text x="{x}" y="{height - bottom + 18}" text-anchor="middle">N={n}</text>')
    for i, t in enumerate(tools):
        pts = sorted((r["connections"], r["mib_s"]) for r in data if r["tool"] == t)
        c = colors[i % len(colors)]
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="' +
                       " ".join(f"{xs[n]:.1f},{y(v):.1f}" for n, v in pts) + '"/>')
        for n, v in pts:
            out.append(f'<circle cx="{xs[n]:.1f}" cy="{y(v):.1f}" r="4" fill="{c}"/>')
        out.append(f'<rect x="{width - right + 15}" y="{top + i * 20}" width="12" height="12" fill="{c}"/>')
        out.append(f'<text x="{width - right + 32}" y="{top + i * 20 + 11}">{t}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


if __name__ == "__main__":
    main()
