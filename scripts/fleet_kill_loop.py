"""The fleet's kill loop (scripts/fleet-kill-loop runs it).

DAEMONS daemons share one PostgreSQL queue and one download root. JOBS jobs of seeded random
sizes (log-uniform from 1 KiB to LARGEST bytes) are added through aria2p, each to the next
daemon that is up, in waves, while earlier ones download. Daemons are killed with SIGKILL at
KILLS random moments and restarted at once, under the same worker name. With OUTAGE > 0 the
database is stopped for that many seconds a third of the way in, then started again. A client
whose addUri got no answer adds the same job again: the queue refuses a second unfinished job
for one file, so a job is never doubled.

At the end every job must be complete exactly once (listed through one daemon's API), every
file must have its SHA-256, no partial file may be left, and the origin must have sent at most
1.1 x the bytes of all the files. With CAP > 0 the daemons share a per-host cap of CAP
connections, and the test server's peak of open connections must be at most CAP.
"""
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time

import aria2p

from daemon_test import Daemon, TestServer, free_port, write_secret
from kill_loop_common import add_all, final_checks, report, sizes_for, wait_for_jobs


def pg_ctl(action):
    argv = shlex.split(os.environ.get("FLEET_PG_AS", "")) + [os.environ["FLEET_PG_CTL"], "-D", os.environ["FLEET_PG_DATA"],
                                                            "-w", "-t", "60"]
    if action == "start":
        argv += ["-l", os.environ["FLEET_PG_DATA"] + "/../server.log", "-o", os.environ["FLEET_PG_OPTIONS"], "start"]
    else:
        argv += ["-m", "fast", "stop"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def main():
    daemon_bin, server_bin, work, queue, pgpass = sys.argv[1:6]
    jobs, kills, count, largest, seed, rate, outage, cap = (int(a) for a in sys.argv[6:14])
    rng = random.Random(seed)
    sizes = sizes_for(rng, jobs, largest)
    total = sum(sizes)
    print(f"fleet-kill-loop: {count} daemons, {jobs} jobs, {total / 2**20:.0f} MiB in all, {kills} kills, "
          f"{rate / 2**20:g} MiB/s per connection, outage {outage} s, cap {cap or 'none'}, seed {seed}", flush=True)
    server = TestServer(server_bin, work, rate=rate, timing_log=os.environ.get("SPLITFETCH_TIMING_LOG"))
    root = os.path.join(work, "root")
    os.makedirs(root)
    secret_file, secret = write_secret(work)
    extra = ["-j", "4", "-n", "4", "--queue", queue, "--queue-password-file", pgpass, "--secret-file", secret_file,
             "--lease-seconds", "30"]
    if cap:
        extra += ["--max-connections-per-host", str(cap)]
    # FLEET_LOG_LEVEL=debug: the daemons also log each claim and each job let go (kept on failure).
    if os.environ.get("FLEET_LOG_LEVEL"):
        extra += ["--log-level", os.environ["FLEET_LOG_LEVEL"]]
    daemons = [Daemon(daemon_bin, os.path.join(work, f"state{i}"), root, free_port(), extra).start() for i in range(count)]
    lock = threading.Lock()
    added = {}  # out name -> GID, once an addUri answered
    stop = threading.Event()

    def api(daemon):
        return aria2p.API(aria2p.Client(host="http://127.0.0.1", port=daemon.port, secret=secret, timeout=10))

    # Each add goes to the next daemon in turn (the one after, when one was down).
    adder = threading.Thread(target=add_all, args=(lambda turn: api(daemons[turn % count]), server, sizes, rng, 50, added, lock,
                                                   stop))
    adder.start()
    # Kill moments spread over the adds and the downloads that follow them.
    expected = max(10.0, total / (40 << 20))
    events = [(rng.uniform(0.2, expected), "kill", rng.randrange(count)) for _ in range(kills)]
    if outage:
        events.append((expected / 3, "outage", None))
    events.sort()
    stops = []
    started = time.time()
    for moment, what, which in events:
        time.sleep(max(0, started + moment - time.time()))
        if what == "kill":
            daemons[which].stop(signal.SIGKILL)
            daemons[which].start()
        else:
            print(f"fleet-kill-loop: stopping the database for {outage} s at {time.time() - started:.1f} s", flush=True)
            pg_ctl("stop")
            # A daemon told to stop while the database is away does not wait for it (its leases
            # expire): it ends within its limits (10 s, then 5 s to close the store), not when a
            # service manager kills it.
            sent = time.time()
            daemons[0].stop()
            stopped_in = time.time() - sent
            stops.append((stopped_in <= 20, f"a daemon stopped while the database was away ended in {stopped_in:.1f} s",
                          stopped_in))
            time.sleep(max(0, outage - stopped_in))
            pg_ctl("start")
            daemons[0].start()
            print(f"fleet-kill-loop: the database is back at {time.time() - started:.1f} s", flush=True)
    adder.join(900)
    print(f"fleet-kill-loop: {kills} kills in {time.time() - started:.1f} s; waiting for the jobs", flush=True)
    listed = wait_for_jobs(lambda turn: api(daemons[0]), jobs)
    elapsed = time.time() - started
    results = final_checks(listed, sizes, root, server)
    # Every daemon lists the same queue: at once, or (a daemon whose listening connection is
    # still coming back after an outage reads the whole queue again then) within 30 s.
    def complete_counts():
        counts = []
        for daemon in daemons[1:]:
            try:
                counts.append(sum(1 for d in api(daemon).get_downloads() if d.is_complete))
            except Exception as error:
                counts.append(str(error))
        return counts

    deadline = time.time() + 30
    others = complete_counts()
    while any(n != jobs for n in others) and time.time() < deadline:
        time.sleep(0.5)
        others = complete_counts()
    results.insert(2, (all(n == jobs for n in others), "every daemon lists every job complete", others))
    results += stops
    if cap:
        peak = server.stats()["peakConnections"]
        results.append((peak <= cap, f"at most {cap} connections open at once across the fleet (peak {peak})", peak))
    for daemon in daemons:
        daemon.stop()
    server.stop()
    sys.exit(report("fleet-kill-loop", results, elapsed))


if __name__ == "__main__":
    main()
