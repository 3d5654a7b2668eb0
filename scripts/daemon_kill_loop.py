"""The daemon's kill loop (scripts/daemon-kill-loop runs it).

JOBS jobs of seeded random sizes (log-uniform from 1 KiB to MAX bytes) are added through aria2p,
in waves, while earlier ones download. The daemon is killed with SIGKILL at KILLS random moments
(during adds, downloads and completions) and restarted at once each time. A client whose addUri
got no answer adds the same job again: the daemon refuses a second job for the same file, so a
job is never doubled. At the end every job must be complete exactly once, every file must have
its SHA-256, and the origin must have sent at most 1.1 x the bytes of all the files.
"""
import os
import random
import signal
import sys
import threading
import time

import aria2p

from daemon_test import Daemon, TestServer, free_port
from kill_loop_common import add_all, final_checks, report, sizes_for, wait_for_jobs


def main():
    daemon_bin, server_bin, work = sys.argv[1:4]
    jobs, kills, largest, seed, rate = (int(a) for a in sys.argv[4:9])
    rng = random.Random(seed)
    sizes = sizes_for(rng, jobs, largest)
    total = sum(sizes)
    print(f"daemon-kill-loop: {jobs} jobs, {total / 2**20:.0f} MiB in all, {kills} kills, {rate / 2**20:g} MiB/s "
          f"per connection, seed {seed}", flush=True)
    server = TestServer(server_bin, work, rate=rate, timing_log=os.environ.get("SPLITFETCH_TIMING_LOG"))
    state, root = os.path.join(work, "state"), os.path.join(work, "root")
    os.makedirs(root)
    daemon = Daemon(daemon_bin, state, root, free_port(), ["-j", "5", "-n", "4"]).start()
    lock = threading.Lock()
    added = {}  # out name -> GID, once an addUri answered
    stop = threading.Event()

    def api_for(turn):
        return aria2p.API(aria2p.Client(host="http://127.0.0.1", port=daemon.port, secret=daemon.secret(), timeout=10))

    adder = threading.Thread(target=add_all, args=(api_for, server, sizes, rng, 25, added, lock, stop))
    adder.start()
    # Kill moments spread over the adds and the downloads that follow them.
    expected = max(10.0, total / (40 << 20))
    moments = sorted(rng.uniform(0.2, expected) for _ in range(kills))
    started = time.time()
    for moment in moments:
        time.sleep(max(0, started + moment - time.time()))
        daemon.stop(signal.SIGKILL)
        daemon.start()
    adder.join(600)
    print(f"daemon-kill-loop: {kills} kills in {time.time() - started:.1f} s; waiting for the jobs", flush=True)
    listed = wait_for_jobs(api_for, jobs)
    results = final_checks(listed, sizes, root, server)
    daemon.stop()
    server.stop()
    sys.exit(report("daemon-kill-loop", results))


if __name__ == "__main__":
    main()
