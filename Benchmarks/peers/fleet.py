"""Many daemons on one PostgreSQL queue: does the work spread (scenario "fleet").

One, two and four `splitfetch serve` daemons share one queue in a PostgreSQL 15 started here
(initdb in the work directory, a private port, stopped by PID), each with
`max-concurrent-downloads 4` and no per-host cap. 1,000 files of 64 KiB are added through the
first daemon's API in one system.multicall and drained from the test server at a 50 ms round
trip; the time runs from the first add until every job is complete, and every file's SHA-256
is checked. The daemons' own counters (`splitfetch.getFleetStat`) give the claim queries' cost
per job. The target: four daemons within 0.35 x the time of one. A fourth setting, four daemons
under a fleet-wide cap of 16 connections to the server (4 x 4: the cap is not the limit), gives
what the cap costs: its slot queries per request, and the new connection each request then
opens.
"""
import http.client
import os
import random
import shutil
import signal
import subprocess
import time

from daemon import SECRET, rpc

PG_BIN = "/usr/lib/postgresql/15/bin"


class Postgres:
    """PostgreSQL 15 on 127.0.0.1: initdb in DIR (as the postgres user when run as root)."""

    def __init__(self, directory, port):
        self.dir, self.port = directory, port
        self.password = f"{random.getrandbits(96):024x}"
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        os.makedirs(directory)
        pwfile = os.path.join(directory, "pwfile")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if self.as_user:
            shutil.chown(directory, "postgres")
            shutil.chown(pwfile, "postgres")
        subprocess.run(self.as_user + [f"{PG_BIN}/initdb", "-D", f"{directory}/data", "-U", "splitfetch", f"--pwfile={pwfile}",
                                       "-A", "scram-sha-256"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.remove(pwfile)
        subprocess.run(self.as_user + [f"{PG_BIN}/pg_ctl", "-D", f"{directory}/data", "-l", f"{directory}/server.log", "-w",
                                       "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {directory} -c max_connections=200",
                                       "start"], check=True, stdout=subprocess.DEVNULL)
        self.pid = int(open(f"{directory}/data/postmaster.pid").readline())
        self.password_file = os.path.join(os.path.dirname(directory), "pgpass")
        with open(self.password_file, "w") as f:
            f.write(self.password + "\n")
        os.chmod(self.password_file, 0o600)

    def create_database(self, name):
        # The password through the environment, never argv.
        subprocess.run([f"{PG_BIN}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "splitfetch", name], check=True,
                       env={**os.environ, "PGPASSWORD": self.password})
        return f"postgres://splitfetch@127.0.0.1:{self.port}/{name}"

    def stop(self):
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        for _ in range(100):
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def fleet_scenarios(args, work, out_dir, synthetic_files, server, result_row, rows, free_port, sha256_file, quick, settle_disk):
    daemon_bin = os.path.join(os.path.dirname(os.path.abspath(args.splitfetch)), "splitfetch-daemon")
    secret = os.path.join(work, "fleet-secret")
    with open(secret, "w") as f:
        f.write(SECRET)
    os.chmod(secret, 0o600)
    count = 200 if quick else 1000
    urls, expected = synthetic_files(server, [(64 << 10, 50_000 + i) for i in range(count)])
    pg = Postgres(os.path.join(work, "fleet-pg"), free_port())
    results = {}
    try:
        settings = [(1, None), (2, None), (4, None), (4, 16)]
        for r in range(args.runs):
            for n, cap in (settings if r % 2 == 0 else settings[::-1]):
                label = n if cap is None else f"{n} cap {cap}"
                queue = pg.create_database(f"fleet_{r}_{n}_{cap or 0}")
                root = os.path.join(out_dir, "fleet")
                shutil.rmtree(root, ignore_errors=True)
                os.makedirs(root)
                daemons = []
                try:
                    for i in range(n):
                        port = free_port()
                        state = os.path.join(work, f"fleet-state-{r}-{n}-{i}")
                        proc = subprocess.Popen([daemon_bin, "serve", "--listen", f"127.0.0.1:{port}", "--state-dir", state,
                                                 "--dir", root, "-j", "4", "-n", "1", "--secret-file", secret,
                                                 "--queue", queue, "--queue-password-file", pg.password_file,
                                                 "--worker-name", f"w{i}", "--log-level", "warning"]
                                                + (["--max-connections-per-host", str(cap)] if cap else []),
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
                        daemons.append((proc, port))
                        deadline = time.time() + 60
                        while time.time() < deadline:
                            try:
                                rpc(port, "aria2.getVersion", timeout=5)
                                break
                            except (OSError, RuntimeError, http.client.HTTPException, ValueError):
                                time.sleep(0.05)
                    settle_disk()
                    first = daemons[0][1]
                    started = time.perf_counter()
                    rpc(first, "system.multicall", [{"methodName": "aria2.addUri",
                                                     "params": [f"token:{SECRET}", [u], {"out": os.path.basename(u)}]} for u in urls],
                        token=False, timeout=600)
                    wall = None
                    deadline = time.time() + 900
                    while time.time() < deadline:
                        stat = rpc(first, "aria2.getGlobalStat", timeout=30)
                        if int(stat["numActive"]) == 0 and int(stat["numWaiting"]) == 0 and int(stat["numStopped"]) >= count:
                            wall = time.perf_counter() - started
                            break
                        time.sleep(0.02)
                    stats = [rpc(port, "splitfetch.getFleetStat") for _, port in daemons]
                    bad = [name for name, sha in expected.items() if not os.path.exists(os.path.join(root, name))
                           or sha256_file(os.path.join(root, name)) != sha]
                    ok = wall is not None and not bad
                    claimed = sum(int(s["claimedJobs"]) for s in stats)
                    claim_ms = sum(float(s["claimMilliseconds"]) for s in stats)
                    claims = sum(int(s["claims"]) for s in stats)
                    slot_queries = sum(int(s.get("slotQueries", 0)) for s in stats)
                    slots = sum(int(s.get("slotsGranted", 0)) for s in stats)
                    slot_ms = sum(float(s.get("slotMilliseconds", 0)) for s in stats)
                    run = {"ok": ok, "wall": wall or 0.0, "cpu": 0.0, "rss_kib": 0, "requests": None,
                           "claims": claims, "claimedJobs": claimed, "claimMsPerJob": claim_ms / max(1, claimed),
                           "perDaemon": [int(s["claimedJobs"]) for s in stats],
                           "slotQueries": slot_queries, "slotsGranted": slots, "slotMsPerRequest": slot_ms / max(1, slots),
                           "error": f"{len(bad)} files wrong" if bad else "did not finish"}
                    results.setdefault(label, []).append(run)
                    slot_text = (f", {slot_queries} slot queries for {slots} requests, {run['slotMsPerRequest']:.3f} ms of slot "
                                 f"query per request" if cap else "")
                    print(f"bench: scenario fleet {label} daemon(s) run {r + 1}: "
                          + (f"{wall:.2f} s, {claims} claim queries for {claimed} jobs, "
                             f"{run['claimMsPerJob']:.3f} ms of claim query per job, jobs per daemon {run['perDaemon']}{slot_text}"
                             if ok else run["error"]), flush=True)
                finally:
                    for proc, _ in daemons:
                        proc.send_signal(signal.SIGTERM)
                    for proc, _ in daemons:
                        try:
                            proc.wait(60)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            proc.wait()
    finally:
        pg.stop()
    for label, runs in results.items():
        n = label if isinstance(label, int) else int(str(label).split()[0])
        rows.append(result_row("fleet", f"{count} files of 64 KiB through a 50 ms round trip, daemons on one PostgreSQL queue, "
                                        f"-j 4 each", f"splitfetch serve x{label}", n, count * (64 << 10), runs, None))
    return results


def fleet_verdicts(results):
    def median(runs):
        walls = sorted(r["wall"] for r in runs if r["ok"])
        return walls[len(walls) // 2] if walls else None
    one, two, four = (median(results.get(n, [])) for n in (1, 2, 4))
    verdicts = []
    if one and four:
        verdicts.append(f"fleet: one daemon {one:.2f} s, two {two or 0:.2f} s, four {four:.2f} s: four take {four / one:.3f} x "
                        f"the time of one (target at most 0.35 x: {'met' if four <= 0.35 * one else 'NOT met'})")
    capped = median(results.get("4 cap 16", []))
    if four and capped:
        per_request = sorted(r["slotMsPerRequest"] for r in results["4 cap 16"] if r["ok"])
        verdicts.append(f"fleet: four daemons under a fleet cap of 16 {capped:.2f} s against {four:.2f} s without: "
                        f"{capped / four:.3f} x; slot queries {per_request[len(per_request) // 2]:.3f} ms per request")
    per_job = [r["claimMsPerJob"] for runs in results.values() for r in runs if r["ok"]]
    if per_job:
        per_job.sort()
        verdicts.append(f"fleet: claim queries cost {per_job[len(per_job) // 2]:.3f} ms per job (median of every run; "
                        f"range {per_job[0]:.3f}-{per_job[-1]:.3f})")
    return verdicts
