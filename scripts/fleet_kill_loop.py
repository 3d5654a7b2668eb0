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
import math
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time

import aria2p
import requests

from daemon_test import Daemon, TestServer, free_port, sha256


def server_stats(server):
    import json
    import socket
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"GET /__stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


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
    sizes = [int(math.exp(rng.uniform(math.log(1024), math.log(largest)))) for _ in range(jobs)]
    total = sum(sizes)
    print(f"fleet-kill-loop: {count} daemons, {jobs} jobs, {total / 2**20:.0f} MiB in all, {kills} kills, "
          f"{rate / 2**20:g} MiB/s per connection, outage {outage} s, cap {cap or 'none'}, seed {seed}", flush=True)
    server = TestServer(server_bin, work, rate=rate, timing_log=os.environ.get("SPLITFETCH_TIMING_LOG"))
    root = os.path.join(work, "root")
    os.makedirs(root)
    secret_file = os.path.join(work, "secret")
    with open(secret_file, "w") as f:
        f.write(f"{random.getrandbits(128):032x}\n")
    os.chmod(secret_file, 0o600)
    secret = open(secret_file).read().strip()
    extra = ["-j", "4", "-n", "4", "--queue", queue, "--queue-password-file", pgpass, "--secret-file", secret_file,
             "--lease-seconds", "30"]
    if cap:
        extra += ["--max-connections-per-host", str(cap)]
    daemons = [Daemon(daemon_bin, os.path.join(work, f"state{i}"), root, free_port(), extra).start() for i in range(count)]
    lock = threading.Lock()
    added = {}  # out name -> GID, once an addUri answered
    stop = threading.Event()

    def api(daemon):
        return aria2p.API(aria2p.Client(host="http://127.0.0.1", port=daemon.port, secret=secret, timeout=10))

    def add_all():
        index, turn = 0, 0
        while index < jobs and not stop.is_set():
            name = f"job{index:04d}.bin"
            daemon = daemons[turn % count]
            turn += 1
            try:
                gid = api(daemon).client.add_uri([server.url(sizes[index], index, name)], {"out": name})
            except (requests.exceptions.RequestException, OSError):
                time.sleep(0.05)  # killed meanwhile: add it again, to the next daemon
                continue
            except aria2p.ClientException as error:
                # A retried add whose first try was committed: the job is there already.
                if "another download" not in str(error) and "exists" not in str(error):
                    print(f"# add {name}: {error}", flush=True)
                    time.sleep(0.05)
                    continue
                print(f"# add {name}: taken as there already: {str(error)[:300]}", flush=True)
                gid = None
            with lock:
                added.setdefault(name, gid)
            index += 1
            if index % 50 == 0:
                time.sleep(rng.uniform(0.2, 1.0))  # waves

    adder = threading.Thread(target=add_all)
    adder.start()
    # Kill moments spread over the adds and the downloads that follow them.
    expected = max(10.0, total / (40 << 20))
    events = [(rng.uniform(0.2, expected), "kill", rng.randrange(count)) for _ in range(kills)]
    if outage:
        events.append((expected / 3, "outage", None))
    events.sort()
    started = time.time()
    for moment, what, which in events:
        time.sleep(max(0, started + moment - time.time()))
        if what == "kill":
            daemons[which].stop(signal.SIGKILL)
            daemons[which].start()
        else:
            print(f"fleet-kill-loop: stopping the database for {outage} s at {time.time() - started:.1f} s", flush=True)
            pg_ctl("stop")
            time.sleep(outage)
            pg_ctl("start")
            print(f"fleet-kill-loop: the database is back at {time.time() - started:.1f} s", flush=True)
    adder.join(900)
    print(f"fleet-kill-loop: {kills} kills in {time.time() - started:.1f} s; waiting for the jobs", flush=True)

    deadline = time.time() + 1800
    listed = []
    settled = None  # when every listed job was last seen final with the count unchanged
    while time.time() < deadline:
        try:
            listed = api(daemons[0]).get_downloads()
        except Exception:
            time.sleep(0.5)
            continue
        if len(listed) >= jobs and all(d.is_complete for d in listed):
            break
        if any(d.has_failed for d in listed):
            break
        # Every job listed is done but some are missing: give the lists 60 s to agree, not 30 min.
        if all(d.is_complete for d in listed):
            settled = settled or (time.time(), len(listed))
            if settled[1] != len(listed):
                settled = (time.time(), len(listed))
            elif time.time() - settled[0] > 60:
                break
        else:
            settled = None
        time.sleep(1)
    elapsed = time.time() - started
    names = [os.path.basename(str(d.files[0].path)) for d in listed]
    failed = [d.gid + " " + str(d.error_message) for d in listed if d.has_failed]
    results = []
    results.append((len(names) == jobs and len(set(names)) == jobs,
                    f"{jobs} jobs listed, each once", f"{len(names)} listed, {len(set(names))} distinct"))
    results.append((not failed and all(d.is_complete for d in listed), "every job complete",
                    f"{sum(1 for d in listed if d.is_complete)} complete; failed: {failed[:3]}"))
    # Every daemon lists the same queue.
    others = []
    for daemon in daemons[1:]:
        try:
            others.append(sum(1 for d in api(daemon).get_downloads() if d.is_complete))
        except Exception as error:
            others.append(str(error))
    results.append((all(n == jobs for n in others), "every daemon lists every job complete", others))
    good = 0
    for index, size in enumerate(sizes):
        path = os.path.join(root, f"job{index:04d}.bin")
        if os.path.exists(path) and os.path.getsize(path) == size and sha256(path) == server.want(size, index):
            good += 1
    results.append((good == jobs, "every file's SHA-256", f"{good} of {jobs}"))
    leftovers = [n for n in os.listdir(root) if n.endswith((".part", ".part.json", ".part.quick.json"))]
    results.append((not leftovers, "no partial file or manifest left", leftovers[:3]))
    stats = server_stats(server)
    sent = stats["bodyBytes"]
    results.append((sent <= 1.1 * total, f"the origin sent at most 1.1 x the files ({sent / total:.3f} x)", f"{sent} of {total}"))
    if cap:
        peak = stats["peakConnections"]
        results.append((peak <= cap, f"at most {cap} connections open at once across the fleet (peak {peak})", peak))
    for daemon in daemons:
        daemon.stop()
    server.stop()
    passed = 0
    for ok, what, detail in results:
        passed += ok
        print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f" ({detail})"), flush=True)
    print(f"fleet-kill-loop: {passed} passed, {len(results) - passed} failed, {elapsed:.1f} s")
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
