"""The daemon against aria2's (`aria2c --enable-rpc`), on the same work in the same run.

Scenario "d": the mixed files of scenario 6 (log-uniform 1 KiB-16 MiB, 20 ms round trip on the
test server) added through the API in one system.multicall, 8 at a time, one connection each,
timed from the first add until every one is complete; the command line's `-i` with the same -j
is the reference. Scenario "dq": 20,000 paused jobs: the daemon's RSS, the p99 of
tellWaiting(0, 100), and a restart timed until getGlobalStat answers with every job back.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import time

SECRET = "bench-secret-0123456789abcdef0123"


def rpc(port, method, *params, timeout=120, token=True):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": ([f"token:{SECRET}"] if token else []) + list(params)})
    conn.request("POST", "/jsonrpc", body, {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    conn.close()
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


def multicall(port, calls, timeout=600):
    # The calls carry the token; system.multicall itself takes none.
    return rpc(port, "system.multicall", [{"methodName": m, "params": [f"token:{SECRET}", *p]} for m, p in calls],
               timeout=timeout, token=False)


class Daemon:
    """splitfetch serve or aria2c --enable-rpc, started and stopped by PID."""

    def __init__(self, kind, binary, work, root, port, j, session=None):
        self.kind, self.binary, self.work, self.root, self.port, self.j = kind, binary, work, root, port, j
        self.session = session or os.path.join(work, f"{kind}-session")
        self.proc = None

    def argv(self):
        if self.kind == "splitfetch":
            return [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--state-dir", os.path.join(self.work, "sf-state"),
                    "--dir", self.root, "-j", str(self.j), "-n", "1", "--secret-file", os.path.join(self.work, "secret"),
                    "--log-level", "warning"]
        argv = ["aria2c", "--enable-rpc", f"--rpc-listen-port={self.port}", f"--rpc-secret={SECRET}", "-d", self.root,
                "-j", str(self.j), "-x", "1", "--auto-file-renaming=false", "--allow-overwrite=true", "-q",
                f"--save-session={self.session}", "--max-download-result=100000"]
        if os.path.exists(self.session):
            argv.append(f"--input-file={self.session}")
        return argv

    def start(self, wait=True):
        self.proc = subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        self.started = time.perf_counter()
        if wait:
            self.wait_answer()
        return self

    def wait_answer(self, until=None, seconds=120):
        """Seconds from start until getGlobalStat answers (and `until` holds of its answer)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                stat = rpc(self.port, "aria2.getGlobalStat", timeout=5)
                if until is None or until(stat):
                    return time.perf_counter() - self.started
            except (OSError, RuntimeError, http.client.HTTPException, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError(f"{self.kind} did not answer")

    def rss_kib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def fresh(work, root):
    """An empty download root, and neither daemon's state left from a run before."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "sf-state"), ignore_errors=True)
    if os.path.exists(os.path.join(work, "aria2-session")):
        os.remove(os.path.join(work, "aria2-session"))
    os.makedirs(root)
    return root


def daemon_scenarios(args, work, out_dir, scenarios, synthetic_files, tl, run_many, many_commands, result_row, rows,
                     free_port, sha256_file, quick, round_order, settle_disk):
    daemon_bin = os.path.join(os.path.dirname(os.path.abspath(args.splitfetch)), "splitfetch-daemon")
    with open(os.path.join(work, "secret"), "w") as f:
        f.write(SECRET)
    os.chmod(os.path.join(work, "secret"), 0o600)
    results = {}
    if "d" in scenarios:
        import math
        import random
        count = 100 if quick else 1000
        rng = random.Random(6)
        sizes = [int(math.exp(rng.uniform(math.log(1024), math.log(16 << 20)))) for _ in range(count)]
        urls, expected = synthetic_files(tl, [(size, 10_000 + i) for i, size in enumerate(sizes)])
        listfile = os.path.join(work, "list-d.txt")
        with open(listfile, "w") as f:
            f.write("\n".join(urls) + "\n")
        cli = many_commands(os.path.abspath(args.splitfetch))["splitfetch"]
        walls = {"splitfetch -i": [], "splitfetch serve": [], "aria2c --enable-rpc": []}
        adds = {"splitfetch serve": [], "aria2c --enable-rpc": []}
        kinds = {"splitfetch serve": "splitfetch", "aria2c --enable-rpc": "aria2"}
        for r in range(args.runs):
            for label in round_order(list(walls), r):
                if label == "splitfetch -i":
                    res = run_many(cli(listfile, os.path.join(out_dir, "many"), 8, urls), os.path.join(out_dir, "many"), expected, 900)
                else:
                    kind = kinds[label]
                    root = fresh(work, os.path.join(out_dir, "daemon"))
                    d = Daemon(kind, daemon_bin if kind == "splitfetch" else None, work, root, free_port(), 8).start()
                    try:
                        settle_disk()
                        started = time.perf_counter()
                        multicall(d.port, [("aria2.addUri", [[u], {"out": os.path.basename(u)}]) for u in urls])
                        adds[label].append(time.perf_counter() - started)
                        d.started = started
                        wall = d.wait_answer(lambda s: int(s["numActive"]) == 0 and int(s["numWaiting"]) == 0
                                             and int(s["numStopped"]) >= count, seconds=900)
                        bad = [n for n, sha in expected.items() if not os.path.exists(os.path.join(root, n))
                               or sha256_file(os.path.join(root, n)) != sha]
                        res = {"ok": not bad, "wall": wall, "cpu": 0.0, "rss_kib": d.rss_kib(), "error": f"{len(bad)} files wrong"}
                    finally:
                        d.stop()
                walls[label].append(res)
                extra = f" (the {count} adds took {adds[label][-1]:.3f} s)" if label in adds and adds[label] else ""
                print(f"bench: scenario d {label} run {r + 1}: " + (f"{res['wall']:.2f} s" if res["ok"] else res["error"]) + extra,
                      flush=True)
        for label, runs in walls.items():
            rows.append(result_row("d", f"{count} mixed files through the API, 8 at a time, 20 ms round trip", label, 8,
                                   sum(sizes), runs, None))
        results["d"] = walls
    if "dq" in scenarios:
        count = 2000 if quick else 20_000
        for kind, label in (("splitfetch", "splitfetch serve"), ("aria2", "aria2c --enable-rpc")):
            root = fresh(work, os.path.join(out_dir, "daemon-q"))
            d = Daemon(kind, daemon_bin if kind == "splitfetch" else None, work, root, free_port(), 5).start()
            try:
                for start in range(0, count, 1000):
                    multicall(d.port, [("aria2.addUri", [[f"http://127.0.0.1:9/q{i}.bin"], {"out": f"q{i}.bin", "pause": "true"}])
                                       for i in range(start, min(count, start + 1000))])
                time.sleep(1)
                rss = d.rss_kib()
                latencies = []
                for _ in range(1000):
                    t = time.perf_counter()
                    rpc(d.port, "aria2.tellWaiting", 0, 100)
                    latencies.append(time.perf_counter() - t)
                latencies.sort()
                p99 = latencies[int(len(latencies) * 0.99)]
                d.stop()
                d.start(wait=False)
                restart = d.wait_answer(lambda s: int(s["numWaiting"]) >= count)
            finally:
                d.stop()
            results.setdefault("dq", {})[label] = {"rss_mib": rss / 1024, "p99_ms": p99 * 1000, "restart_s": restart}
            print(f"bench: scenario dq {label}: {count} paused jobs, RSS {rss / 1024:.1f} MiB, tellWaiting(0, 100) p99 "
                  f"{p99 * 1000:.2f} ms, restart until getGlobalStat answers with them {restart:.3f} s", flush=True)
    return results


def daemon_verdicts(results):
    verdicts = []
    d = results.get("d")
    if d:
        med = lambda runs: sorted(r["wall"] for r in runs if r["ok"])[len([r for r in runs if r["ok"]]) // 2] if any(r["ok"] for r in runs) else None
        cli, ours, aria2 = med(d["splitfetch -i"]), med(d["splitfetch serve"]), med(d["aria2c --enable-rpc"])
        if cli and ours:
            verdicts.append(f"d: through the API {ours:.2f} s against the command line's -i {cli:.2f} s: {ours / cli:.3f} x "
                            f"(target at most 1.05 x: {'met' if ours <= 1.05 * cli else 'NOT met'})")
        if ours and aria2:
            verdicts.append(f"d: splitfetch serve {ours:.2f} s, aria2c --enable-rpc {aria2:.2f} s "
                            f"({'faster' if ours < aria2 else 'NOT faster'})")
    q = results.get("dq")
    if q and "splitfetch serve" in q and "aria2c --enable-rpc" in q:
        ours, aria2 = q["splitfetch serve"], q["aria2c --enable-rpc"]
        verdicts.append(f"dq: RSS with the jobs waiting {ours['rss_mib']:.1f} MiB against aria2's {aria2['rss_mib']:.1f} MiB: "
                        f"{ours['rss_mib'] / aria2['rss_mib']:.2f} x (target at most 0.25 x: "
                        f"{'met' if ours['rss_mib'] <= 0.25 * aria2['rss_mib'] else 'NOT met'})")
        verdicts.append(f"dq: tellWaiting(0, 100) p99 {ours['p99_ms']:.2f} ms (aria2 {aria2['p99_ms']:.2f} ms; target at most 10 ms: "
                        f"{'met' if ours['p99_ms'] <= 10 else 'NOT met'})")
        verdicts.append(f"dq: restart until getGlobalStat answers with every job {ours['restart_s']:.3f} s (aria2 "
                        f"{aria2['restart_s']:.3f} s; target at most 0.5 s: {'met' if ours['restart_s'] <= 0.5 else 'NOT met'})")
    return verdicts
