"""What the daemon's and the fleet's kill loops share: the sizes, the adder, the wait for the
jobs, and the final checks (scripts/daemon_kill_loop.py, scripts/fleet_kill_loop.py)."""
import math
import os
import time

import aria2p
import requests

from daemon_test import sha256


def sizes_for(rng, jobs, largest):
    """Seeded random sizes, log-uniform from 1 KiB to `largest` bytes."""
    return [int(math.exp(rng.uniform(math.log(1024), math.log(largest)))) for _ in range(jobs)]


def add_all(api_for, server, sizes, rng, wave, added, lock, stop):
    """Adds job NNNN (server.url of its size) through `api_for(turn)`, turn by turn, in waves of
    `wave`. A call with no answer (a daemon killed meanwhile) is asked again at the next turn; a
    refusal that says the job or its file is there already (a retried add whose first try was
    committed) counts as added, and is printed."""
    index, turn = 0, 0
    while index < len(sizes) and not stop.is_set():
        name = f"job{index:04d}.bin"
        api = api_for(turn)
        turn += 1
        try:
            gid = api.client.add_uri([server.url(sizes[index], index, name)], {"out": name})
        except (requests.exceptions.RequestException, OSError):
            time.sleep(0.05)
            continue
        except aria2p.ClientException as error:
            if "another download" not in str(error) and "exists" not in str(error):
                print(f"# add {name}: {error}", flush=True)
                time.sleep(0.05)
                continue
            print(f"# add {name}: taken as there already: {str(error)[:300]}", flush=True)
            gid = None
        with lock:
            added.setdefault(name, gid)
        index += 1
        if index % wave == 0:
            time.sleep(rng.uniform(0.2, 1.0))


def wait_for_jobs(api_for, jobs, seconds=1800):
    """The downloads listed once every one of `jobs` is complete, one has failed, or, with some
    missing, the list has not changed for 60 s with every listed one complete."""
    deadline = time.time() + seconds
    listed = []
    settled = None
    while time.time() < deadline:
        try:
            listed = api_for(0).get_downloads()
        except Exception:
            time.sleep(0.5)
            continue
        if len(listed) >= jobs and all(d.is_complete for d in listed):
            break
        if any(d.has_failed for d in listed):
            break
        if all(d.is_complete for d in listed):
            if settled is None or settled[1] != len(listed):
                settled = (time.time(), len(listed))
            elif time.time() - settled[0] > 60:
                break
        else:
            settled = None
        time.sleep(1)
    return listed


def final_checks(listed, sizes, root, server):
    """(ok, what, detail) for: every job listed once and complete, every file's SHA-256, no
    partial left, and the origin's bytes at most 1.1 x the files'."""
    jobs, total = len(sizes), sum(sizes)
    names = [os.path.basename(str(d.files[0].path)) for d in listed]
    failed = [d.gid + " " + str(d.error_message) for d in listed if d.has_failed]
    # A job missing from the list: its name, and what is on disk under it (a lost job whose
    # file is there says more than a count).
    missing = sorted({f"job{index:04d}.bin" for index in range(jobs)} - set(names))
    on_disk = [(name, os.path.getsize(os.path.join(root, name)) if os.path.exists(os.path.join(root, name)) else None)
               for name in missing[:5]]
    results = [(len(names) == jobs and len(set(names)) == jobs, f"{jobs} jobs listed, each once",
                f"{len(names)} listed, {len(set(names))} distinct; missing (name, bytes on disk): {on_disk}"),
               (not failed and all(d.is_complete for d in listed), "every job complete",
                f"{sum(1 for d in listed if d.is_complete)} complete; failed: {failed[:3]}")]
    good = 0
    for index, size in enumerate(sizes):
        path = os.path.join(root, f"job{index:04d}.bin")
        if os.path.exists(path) and os.path.getsize(path) == size and sha256(path) == server.want(size, index):
            good += 1
    results.append((good == jobs, "every file's SHA-256", f"{good} of {jobs}"))
    leftovers = [n for n in os.listdir(root) if n.endswith((".part", ".part.json", ".part.quick.json"))]
    results.append((not leftovers, "no partial file or manifest left", leftovers[:3]))
    sent = server.stats()["bodyBytes"]
    results.append((sent <= 1.1 * total, f"the origin sent at most 1.1 x the files ({sent / total:.3f} x)", f"{sent} of {total}"))
    return results


def report(name, results, elapsed=None):
    """Prints each check and the count; returns the exit status."""
    passed = 0
    for ok, what, detail in results:
        passed += ok
        print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f" ({detail})"), flush=True)
    print(f"{name}: {passed} passed, {len(results) - passed} failed" + (f", {elapsed:.1f} s" if elapsed is not None else ""))
    return 0 if passed == len(results) else 1
