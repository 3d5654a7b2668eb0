"""The daemon's kill loop (scripts/daemon-kill-loop runs it).

JOBS jobs of seeded random sizes (log-uniform from 1 KiB to MAX bytes) are added through aria2p,
in waves, while earlier ones download. The daemon is killed with SIGKILL at KILLS random moments
(during adds, downloads and completions) and restarted at once each time. A client whose addUri
got no answer adds the same job again: the daemon refuses a second job for the same file, so a
job is never doubled. At the end every job must be complete exactly once, every file must have
its SHA-256, and the origin must have sent at most 1.1 x the bytes of all the files.
"""
import math
import os
import random
import signal
import sys
import threading
import time

import aria2p
import requests

from daemon_test import Daemon, TestServer, free_port, sha256


def main():
    daemon_bin, server_bin, work = sys.argv[1:4]
    jobs, kills, largest, seed, rate = (int(a) for a in sys.argv[4:9])
    rng = random.Random(seed)
    sizes = [int(math.exp(rng.uniform(math.log(1024), math.log(largest)))) for _ in range(jobs)]
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

    def api():
        return aria2p.API(aria2p.Client(host="http://127.0.0.1", port=daemon.port, secret=daemon.secret(), timeout=10))

    def add_all():
        index = 0
        while index < jobs and not stop.is_set():
            name = f"job{index:04d}.bin"
            try:
                gid = api().client.add_uri([server.url(sizes[index], index, name)], {"out": name})
            except (requests.exceptions.RequestException, OSError):
                time.sleep(0.05)  # killed meanwhile: add it again once the daemon is back
                continue
            except aria2p.ClientException as error:
                # A retried add whose first try was committed: the job is there already.
                if "another download" not in str(error) and "exists" not in str(error):
                    print(f"# add {name}: {error}", flush=True)
                    time.sleep(0.05)
                    continue
                gid = None
            with lock:
                added.setdefault(name, gid)
            index += 1
            if index % 25 == 0:
                time.sleep(rng.uniform(0.2, 1.0))  # waves

    adder = threading.Thread(target=add_all)
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

    deadline = time.time() + 1800
    listed = []
    while time.time() < deadline:
        try:
            listed = api().get_downloads()
        except Exception:
            time.sleep(0.5)
            continue
        if len(listed) >= jobs and all(d.is_complete for d in listed):
            break
        if any(d.has_failed for d in listed):
            break
        time.sleep(0.5)
    names = [os.path.basename(str(d.files[0].path)) for d in listed]
    failed = [d.gid + " " + str(d.error_message) for d in listed if d.has_failed]
    results = []
    results.append((len(names) == jobs and len(set(names)) == jobs,
                    f"{jobs} jobs listed, each once", f"{len(names)} listed, {len(set(names))} distinct"))
    results.append((not failed and all(d.is_complete for d in listed), "every job complete",
                    f"{sum(1 for d in listed if d.is_complete)} complete; failed: {failed[:3]}"))
    good = 0
    for index, size in enumerate(sizes):
        path = os.path.join(root, f"job{index:04d}.bin")
        if os.path.exists(path) and os.path.getsize(path) == size and sha256(path) == server.want(size, index):
            good += 1
    results.append((good == jobs, "every file's SHA-256", f"{good} of {jobs}"))
    leftovers = [n for n in os.listdir(root) if n.endswith((".part", ".part.json", ".part.quick.json"))]
    results.append((not leftovers, "no partial file or manifest left", leftovers[:3]))
    sent = server.body_bytes()
    results.append((sent <= 1.1 * total, f"the origin sent at most 1.1 x the files ({sent / total:.3f} x)", f"{sent} of {total}"))
    daemon.stop()
    server.stop()
    passed = 0
    for ok, what, detail in results:
        passed += ok
        print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f" ({detail})"), flush=True)
    print(f"daemon-kill-loop: {passed} passed, {len(results) - passed} failed")
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
