"""Scenario "n": refreshing a list of unchanged files, through a relay that adds a round trip.

2,000 files (log-uniform 1-256 KiB) on nginx, reached through `sf-testserver relay` at a 50 ms
round trip (this kernel has no netem). Each tool downloads the list once (untimed, checked), then
refreshes it: `splitfetch -N`, `wget2 -N`, `aria2c --conditional-get` (its files' times from the
server's, so its If-Modified-Since is right), `curl --etag-compare` (one ETag file per URL, in a
config with `next`), each 8 at a time. Per refresh: the wall time, every file's SHA-256, and from
nginx's log the requests, the answers other than 304, and the body bytes sent.

Where the time goes, from nginx's log (each request's connection and end, to the millisecond):
the mean time between two requests on one connection (a round: the relay's 50 ms, nginx, and the
tool's turn from an answer to its next request), and the wall time outside the span from the
first request to the last (the tool's start until its first request reaches nginx, which includes
the relay's handshake round trip, and the last answer's way back until the tool has ended).
"""
import hashlib
import math
import os
import random
import shutil
import subprocess
import time

KiB = 1024


class Relay:
    """sf-testserver relay in front of a server, stopped by PID."""

    def __init__(self, work, binary, target_port, round_trip_ms):
        portfile = os.path.join(work, f"relay-{target_port}.port")
        self.proc = subprocess.Popen([binary, "relay", "--to", f"127.0.0.1:{target_port}", "--round-trip", str(round_trip_ms),
                                      "--port-file", portfile], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(portfile):
                break
            time.sleep(0.05)
        self.port = int(open(portfile).read().strip())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def refresh_commands(splitfetch, work):
    """Each tool: (first download argv, refresh argv, exit statuses taken as success) for LIST into DIR."""
    def curl_config(urls, d, compare):
        path = os.path.join(work, f"curl-{'refresh' if compare else 'first'}.cfg")
        os.makedirs(os.path.join(d, ".etags"), exist_ok=True)
        with open(path, "w") as f:
            for i, url in enumerate(urls):
                name = url.rsplit("/", 1)[1]
                etag = os.path.join(d, ".etags", name)
                if i:
                    f.write("next\n")
                f.write(f'url = "{url}"\noutput = "{os.path.join(d, name)}"\n')
                if compare:
                    f.write(f'etag-compare = "{etag}"\n')
                f.write(f'etag-save = "{etag}"\n')
        return ["curl", "-s", "--parallel", "--parallel-max", "8", "-K", path]

    aria2 = lambda lst, d, urls: ["aria2c", "-q", "-j", "8", "-x", "1", "-i", lst, "-d", d, "--allow-overwrite=true",
                            "--auto-file-renaming=false", "--remote-time=true", "--conditional-get=true"]
    return {
        "splitfetch": (lambda lst, d, urls: [splitfetch, "-q", "-N", "-n", "1", "-j", "8", "-i", lst, "-d", d],
                       lambda lst, d, urls: [splitfetch, "-q", "-N", "-n", "1", "-j", "8", "-i", lst, "-d", d], {0, 16}),
        "wget2": (lambda lst, d, urls: ["wget2", "-q", "-N", "--no-robots", "--max-threads=8", "-nd", "-P", d, "-i", lst],
                  lambda lst, d, urls: ["wget2", "-q", "-N", "--no-robots", "--max-threads=8", "-nd", "-P", d, "-i", lst], {0}),
        "aria2": (aria2, aria2, {0}),
        "curl": (lambda lst, d, urls: curl_config(urls, d, False), lambda lst, d, urls: curl_config(urls, d, True), {0}),
    }


def refresh_scenarios(args, work, www, nginx, servers, measured_run, result_row, rows, sha256_file, quick, round_order,
                      settle_disk, tools):
    count = 200 if quick else 2000
    rng = random.Random(40)
    directory = os.path.join(www, "refresh")
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    expected = {}
    total = 0
    for i in range(count):
        size = int(math.exp(rng.uniform(math.log(KiB), math.log(256 * KiB))))
        name = f"r{i}.bin"
        data = rng.randbytes(size)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(directory, name), 0o644)
        expected[name] = hashlib.sha256(data).hexdigest()
        total += size
    relay = Relay(work, args.testserver, nginx.port, 50)
    servers.append(relay)
    urls = [f"http://127.0.0.1:{relay.port}/refresh/r{i}.bin" for i in range(count)]
    listfile = os.path.join(work, "refresh-list.txt")
    with open(listfile, "w") as f:
        f.write("\n".join(urls) + "\n")
    commands = refresh_commands(os.path.abspath(args.splitfetch), work)
    selected = [t for t in ["splitfetch", "wget2", "aria2", "curl"] if t in tools]
    results = {"_count": count}

    def whole(d):
        return [n for n, sha in expected.items() if not os.path.exists(os.path.join(d, n)) or sha256_file(os.path.join(d, n)) != sha]

    def log_since(offset):
        time.sleep(0.3)  # nginx writes the log line after the response
        with open(nginx.log, "rb") as f:
            f.seek(offset)
            lines = [l.split() for l in f.read().decode(errors="replace").splitlines()]
        mine = [l for l in lines if len(l) == 5 and l[0].startswith("/refresh/")]
        return len(mine), sum(1 for l in mine if l[1] != "304"), sum(int(l[2]) for l in mine if l[2].isdigit()), timing(mine)

    def timing(mine):
        """The mean round (ms) over every connection, and the span (s) from the first request's end to the last's."""
        by_connection = {}
        for l in mine:
            by_connection.setdefault(l[3], []).append(float(l[4][1:]))
        gaps = [b - a for times in by_connection.values() for a, b in zip(times, times[1:])]
        if not gaps:
            return None, None
        span = max(t[-1] for t in by_connection.values()) - min(t[0] for t in by_connection.values())
        return 1000 * sum(gaps) / len(gaps), span

    for tool in selected:
        first, refresh, accepted = commands[tool]
        d = os.path.join(work, "out", f"refresh-{tool}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        rc, err, wall, _, _ = measured_run(first(listfile, d, urls), 900)
        bad = whole(d)
        print(f"bench: scenario n {tool} first download: exit {rc}, {wall:.2f} s, {len(bad)} files wrong", flush=True)
        results[tool] = {"first_ok": rc == 0 and not bad, "runs": []}
    for r in range(args.runs):
        for tool in round_order(selected, r):
            if not results[tool]["first_ok"]:
                continue
            _, refresh, accepted = commands[tool]
            d = os.path.join(work, "out", f"refresh-{tool}")
            settle_disk()
            offset = nginx.log_size()
            rc, err, wall, cpu, rss = measured_run(refresh(listfile, d, urls), 900)
            requests, full, body, (round_ms, span) = log_since(offset)
            bad = whole(d)
            ok = rc in accepted and not bad
            run = {"ok": ok, "wall": wall, "cpu": cpu, "rss_kib": rss, "requests": requests, "full_answers": full, "body_bytes": body,
                   "round_ms": round_ms, "outside_ms": None if span is None else 1000 * (wall - span), "round_index": r,
                   "error": f"exit {rc}, {len(bad)} files wrong: {err[-200:] if err else ''}"}
            results[tool]["runs"].append(run)
            print(f"bench: scenario n {tool} run {r + 1}: " + (f"{wall:.3f} s" if ok else run["error"]) +
                  f", {requests} requests, {full} not 304, {body} body bytes"
                  + ("" if round_ms is None else f", round {round_ms:.3f} ms, {run['outside_ms']:.0f} ms outside the first to last request"), flush=True)
    for tool in selected:
        runs = results[tool]["runs"]
        if not runs:
            continue
        rows.append(result_row("n", f"refresh of {count} unchanged files, 8 at a time, nginx through a 50 ms relay", tool, 8,
                               0, runs, None))
    return results


def refresh_verdicts(results):
    if not results:
        return []
    count = results.get("_count", 0)
    tools = {t: v for t, v in results.items() if not t.startswith("_")}

    def median(values):
        values = sorted(v for v in values if v is not None)
        return values[len(values) // 2] if values else None

    med = lambda runs: median(r["wall"] for r in runs if r["ok"])
    ours = med(tools.get("splitfetch", {}).get("runs", []))
    peers = {t: med(v["runs"]) for t, v in tools.items() if t != "splitfetch" and med(v["runs"]) is not None}
    verdicts = []
    runs = [r for r in tools.get("splitfetch", {}).get("runs", []) if r["ok"]]
    if runs:
        one = all(r["requests"] == count and r["full_answers"] == 0 and r["body_bytes"] == 0 for r in runs)
        verdicts.append(f"n: splitfetch -N, per run: " + "; ".join(
            f"{r['requests']} requests for {count} files, {r['full_answers']} not 304, {r['body_bytes']} body bytes" for r in runs)
            + f" (target one request per file and no body: {'met' if one else 'NOT met'})")
    for t, v in sorted(tools.items()):
        if t != "splitfetch" and v["runs"]:
            r = v["runs"][-1]
            verdicts.append(f"n: {t}: {r['requests']} requests, {r['full_answers']} not 304, {r['body_bytes']} body bytes"
                            + ("" if r["ok"] else f" (failed: {r['error']})"))
    for t, v in sorted(tools.items()):
        ok = [r for r in v["runs"] if r["ok"]]
        rounds, outside = median(r.get("round_ms") for r in ok), median(r.get("outside_ms") for r in ok)
        if rounds is not None and outside is not None:
            verdicts.append(f"n: {t}: a round {rounds:.3f} ms (the mean on a connection, median of the runs), "
                            f"{outside:.0f} ms of the wall outside the first to last request (medians)")
    if ours and peers:
        best = min(peers.values())
        # Paired by round: the tools of one round ran one after another, so each difference
        # is taken under the same machine conditions.
        best_tool = min(peers, key=peers.get)
        theirs = {r["round_index"]: r["wall"] for r in tools[best_tool]["runs"] if r["ok"]}
        diffs = sorted(1000 * (r["wall"] - theirs[r["round_index"]]) for r in runs if r["round_index"] in theirs)
        if diffs:
            verdicts.append(f"n: splitfetch - {best_tool} per round: median {diffs[len(diffs) // 2]:+.0f} ms, splitfetch lower in "
                            f"{sum(d < 0 for d in diffs)} of {len(diffs)} rounds (from {diffs[0]:+.0f} to {diffs[-1]:+.0f} ms)")
        verdicts.append(f"n: splitfetch -N {ours:.2f} s against the best peer {best:.2f} s ("
                        + ", ".join(f"{t} {w:.2f} s" for t, w in sorted(peers.items())) +
                        f"): {ours / best:.3f} x (target at most 1: {'met' if ours <= best else 'NOT met'})")
    return verdicts
