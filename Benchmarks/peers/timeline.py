#!/usr/bin/env python3
"""Where the time of a scenario-3 run goes, per tool, seen from the server.

Starts sf-testserver (1 MiB/s per connection) with a timing log, runs each tool on the same
64 MiB file with 16 connections, interleaved, and reports medians, in milliseconds after the
tool was started: the first request, the last request, the end of the last response body, and
the tool's exit; "after data" is exit minus the last response end. Every output is checked by
SHA-256. Usage: timeline.py [--runs N] [--tools splitfetch,axel,...]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import sha256_file, timed_run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MiB = 1 << 20


def commands(splitfetch, url, out, n):
    d, name = os.path.dirname(out), os.path.basename(out)
    return {
        "splitfetch": [splitfetch, "-q", "-n", str(n), "-o", name, "-d", d, url],
        "axel": ["axel", "-q", "-n", str(n), "-o", out, url],
        "aria2": ["aria2c", "-q", "-x", str(n), "-s", str(n), "-k", "1M", "-d", d, "-o", name, url],
        "lftp": ["lftp", "-c", f"pget -n {n} -o {out} {url}"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tools", default="splitfetch,axel")
    ap.add_argument("--splitfetch", default=os.path.join(ROOT, ".build/release/splitfetch"))
    ap.add_argument("--testserver", default=os.path.join(ROOT, ".build/release/sf-testserver"))
    args = ap.parse_args()
    size, n = 64 * MiB, 16
    work = tempfile.mkdtemp(prefix="splitfetch-timeline-")
    log, portfile = os.path.join(work, "timing.log"), os.path.join(work, "port")
    server = subprocess.Popen([args.testserver, "serve", "--rate", str(MiB), "--port-file", portfile, "--timing-log", log],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(portfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{int(open(portfile).read())}/size/{size}/t.bin"
        want = subprocess.run([args.testserver, "hash", str(size)], capture_output=True, text=True, check=True).stdout.strip()
        tools = args.tools.split(",")
        rows = {t: [] for t in tools}
        for r in range(args.runs):
            for tool in tools:  # interleaved
                out = os.path.join(work, f"{tool}.bin")
                for p in (out, out + ".st", out + ".aria2"):
                    if os.path.exists(p):
                        os.remove(p)
                offset = os.path.getsize(log) if os.path.exists(log) else 0
                start = time.time()  # wall clock, as in the server's log
                rc, _, wall = timed_run(commands(args.splitfetch, url, out, n)[tool], 120)
                end = start + wall
                time.sleep(0.2)  # let the server finish its log lines
                ok = rc == 0 and os.path.exists(out) and sha256_file(out) == want
                with open(log) as f:
                    f.seek(offset)
                    lines = [l.split() for l in f if l.strip()]
                requests = sorted(float(l[0]) for l in lines if l[1] == "request")
                ends = [float(l[0]) for l in lines if l[1] == "response-end"]
                if not ok or not requests or not ends:
                    print(f"timeline: {tool} run {r + 1} FAILED (exit {rc})", flush=True)
                    continue
                ms = lambda t: (t - start) * 1000
                rows[tool].append((ms(requests[0]), ms(requests[-1]), ms(max(ends)), ms(end), ms(end) - ms(max(ends))))
                print(f"timeline: {tool} run {r + 1}: last request {ms(requests[-1]):.2f} ms, exit {ms(end):.2f} ms", flush=True)
        print(f"\n| tool | first request ms | last request ms | last body end ms | exit ms | after data ms | runs |")
        print("|---|---|---|---|---|---|---|")
        for tool, v in rows.items():
            if not v:
                continue
            med = [statistics.median(x[i] for x in v) for i in range(5)]
            print(f"| {tool} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f} | {med[3]:.2f} | {med[4]:.2f} | {len(v)} |")
    finally:
        server.terminate()
        server.wait(timeout=10)
        for name in os.listdir(work):
            os.remove(os.path.join(work, name))
        os.rmdir(work)


if __name__ == "__main__":
    sys.exit(main())
