"""Two daemons on one PostgreSQL queue, end to end (scripts/e2e-fleet runs it)."""
import json
import os
import subprocess
import sys
import threading
import time

import aria2p
import websocket

from daemon_test import Daemon, TestServer, check, free_port, sha256, write_secret
import daemon_test


def wait_for(what, seconds=30, every=0.1):
    """Polls `what` until it returns a true value or `seconds` pass; returns the last value."""
    deadline = time.time() + seconds
    value = what()
    while not value and time.time() < deadline:
        time.sleep(every)
        value = what()
    return value


class Listener:
    """A WebSocket client of one daemon: makes one call with the token (notifications go only
    to such a socket), then collects every notification."""

    def __init__(self, port, secret):
        self.ws = websocket.create_connection(f"ws://127.0.0.1:{port}/jsonrpc", timeout=30,
                                              host=f"127.0.0.1:{port}")
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": "v", "method": "aria2.getVersion", "params": [f"token:{secret}"]}))
        self.seen = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while True:
            try:
                message = json.loads(self.ws.recv())
            except Exception:
                return
            if "method" in message:
                with self.lock:
                    self.seen.append((message["method"], message["params"][0]["gid"]))

    def got(self, method, gid):
        with self.lock:
            return (method, gid) in self.seen

    def close(self):
        self.ws.close()


def main():
    daemon_bin, server_bin, work, queue, pgpass = sys.argv[1:6]
    password = open(pgpass).read().strip()
    server = TestServer(server_bin, work, rate=256 << 10)
    root = os.path.join(work, "root")
    os.makedirs(root)
    secret_file, secret = write_secret(work)
    # The slow poll at an hour: a daemon that starts a job added through another was woken by NOTIFY.
    common = ["-n", "2", "--queue", queue, "--queue-password-file", pgpass, "--secret-file", secret_file, "--poll-seconds", "3600"]
    a = Daemon(daemon_bin, os.path.join(work, "a"), root, free_port(), common + ["-j", "1", "--worker-name", "a"]).start()
    b = Daemon(daemon_bin, os.path.join(work, "b"), root, free_port(), common + ["-j", "2", "--worker-name", "b"]).start()

    def api(d):
        return aria2p.API(aria2p.Client(host="http://127.0.0.1", port=d.port, secret=secret, timeout=30))

    def status(d, gid):
        try:
            return api(d).client.tell_status(gid, ["status", "completedLength", "totalLength"])
        except Exception as error:
            return {"status": f"error: {error}"}

    heard_a, heard_b = Listener(a.port, secret), Listener(b.port, secret)

    # One API over the fleet: added through b, seen through a; paused through a, seen through b.
    size = 3 << 20
    first = api(b).client.add_uri([server.url(size, 1, "first.bin")], {"out": "first.bin"})
    check(wait_for(lambda: status(a, first)["status"] in ("waiting", "active")), "a job added through one daemon is listed by the other",
          status(a, first))
    check(wait_for(lambda: status(a, first)["status"] == "active" and status(b, first)["status"] == "active"),
          "both daemons report it active", (status(a, first), status(b, first)))
    check(wait_for(lambda: heard_a.got("aria2.onDownloadStart", first) and heard_b.got("aria2.onDownloadStart", first)),
          "onDownloadStart reaches the WebSocket clients of both daemons", (heard_a.seen, heard_b.seen))
    part = os.path.join(root, "first.bin.part")
    wait_for(lambda: os.path.exists(part) and os.path.getsize(part) > 0 and os.path.exists(part + ".json"), seconds=20)
    api(a).client.pause(first)
    check(wait_for(lambda: status(b, first)["status"] == "paused" and status(a, first)["status"] == "paused"),
          "paused through the other daemon: paused on both", (status(a, first), status(b, first)))
    check(wait_for(lambda: heard_a.got("aria2.onDownloadPause", first) and heard_b.got("aria2.onDownloadPause", first)),
          "onDownloadPause reaches both daemons' clients", (heard_a.seen, heard_b.seen))
    check(os.path.exists(part) and not os.path.exists(os.path.join(root, "first.bin")), "its partial file is kept")
    api(b).client.unpause(first)
    check(wait_for(lambda: status(a, first)["status"] == "complete" and status(b, first)["status"] == "complete", seconds=60),
          "unpaused through the first daemon: complete on both", (status(a, first), status(b, first)))
    path = os.path.join(root, "first.bin")
    check(os.path.exists(path) and sha256(path) == server.want(size, 1), "its SHA-256 is right")
    sent = server.body_bytes()
    check(sent <= 1.1 * size, f"it resumed from its data where the other daemon stopped ({sent / size:.3f} x its size sent)")
    check(wait_for(lambda: heard_a.got("aria2.onDownloadComplete", first) and heard_b.got("aria2.onDownloadComplete", first)),
          "onDownloadComplete reaches both daemons' clients", (heard_a.seen, heard_b.seen))

    # NOTIFY wakes an idle daemon: a (one slot) is busy, so a job added through a runs on b.
    busy = api(a).client.add_uri([server.url(4 << 20, 2, "busy.bin")], {"out": "busy.bin"})
    other = api(a).client.add_uri([server.url(1 << 20, 3, "other.bin")], {"out": "other.bin"})
    check(wait_for(lambda: status(a, busy)["status"] == "active" and status(a, other)["status"] == "active", seconds=20),
          "a job added while its daemon is busy is started by an idle one, woken by NOTIFY (the poll is an hour)",
          (status(a, busy), status(a, other)))
    # Removed through the other daemon while it runs: removed on both, the file not completed.
    api(b).client.remove(busy)
    check(wait_for(lambda: status(a, busy)["status"] == "removed" and status(b, busy)["status"] == "removed"),
          "removed through the other daemon: removed on both", (status(a, busy), status(b, busy)))
    check(wait_for(lambda: status(b, other)["status"] == "complete", seconds=60), "the other job completes")
    check(not os.path.exists(os.path.join(root, "busy.bin")), "the removed job's file was not completed")
    # A second add of a file the queue already writes, through either daemon, is refused.
    again = api(b).client.add_uri([server.url(4 << 20, 4, "first-again.bin")], {"out": "late.bin"})
    try:
        api(a).client.add_uri([server.url(4 << 20, 4, "late.bin")], {"out": "late.bin"})
        refused = False
    except aria2p.ClientException as error:
        refused = "another download" in str(error)
    check(refused, "a second job for a file the fleet is writing is refused")
    api(a).client.remove(again)

    # A worker name is one daemon's.
    clash = subprocess.run([daemon_bin, "serve", "--listen", f"127.0.0.1:{free_port()}", "--state-dir", os.path.join(work, "c"),
                            "--dir", root, "--worker-name", "a"] + common,
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    check(clash.returncode != 0 and "worker 'a'" in clash.stderr, "a second daemon under a worker name in use is refused",
          clash.stderr[-300:])

    # The password is in no process's arguments and no log.
    argv = [open(f"/proc/{d.proc.pid}/cmdline", "rb").read() for d in (a, b)]
    check(all(password.encode() not in arg for arg in argv), "the database password is not in /proc/PID/cmdline")
    heard_a.close()
    heard_b.close()
    a.stop()
    b.stop()
    logs = open(a.log).read() + open(b.log).read()
    check(password not in logs and secret not in logs, "the database password and the RPC secret are in no log")
    server.stop()
    print(f"e2e-fleet: {daemon_test.PASSED} passed, {daemon_test.FAILED} failed", flush=True)
    sys.exit(1 if daemon_test.FAILED else 0)


if __name__ == "__main__":
    main()
