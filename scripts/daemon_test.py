"""End-to-end tests of `splitfetch serve` (scripts/e2e-daemon runs this; see it for the set-up).

Every server here (the project's test server, the daemon) listens on 127.0.0.1 with a free port,
is started by this script and stopped by its PID. The daemon is driven by aria2p, a real aria2
client from PyPI (its library and its command line), and by raw HTTP for what aria2p cannot say
(wrong Host, foreign Origin, malformed JSON, a 64 MiB body, idle connections).
"""
import hashlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import aria2p

PASSED, FAILED = 0, 0


def check(ok, what, detail=""):
    global PASSED, FAILED
    if ok:
        PASSED += 1
        print(f"ok   - {what}", flush=True)
    else:
        FAILED += 1
        print(f"FAIL - {what}{' (' + str(detail)[:400] + ')' if detail else ''}", flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, seconds=20):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def write_secret(work):
    """A random RPC secret in WORK/secret (mode 0600); returns (path, secret)."""
    path = os.path.join(work, "secret")
    with open(path, "w") as f:
        f.write(f"{random.getrandbits(128):032x}\n")
    os.chmod(path, 0o600)
    return path, open(path).read().strip()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class TestServer:
    """The project's test server: /size/N/seed/S/NAME serves N seeded bytes, /__stats counts."""

    def __init__(self, binary, work, rate=0, timing_log=None):
        self.binary = binary
        port_file = os.path.join(work, f"server-port-{random.random()}")
        timing = ["--timing-log", timing_log] if timing_log else []
        self.proc = subprocess.Popen([binary, "serve", "--rate", str(rate), "--port-file", port_file] + timing,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while not (os.path.exists(port_file) and open(port_file).read().strip()) and time.time() < deadline:
            time.sleep(0.05)
        self.port = int(open(port_file).read())

    def url(self, size, seed, name):
        return f"http://127.0.0.1:{self.port}/size/{size}/seed/{seed}/{name}"

    def want(self, size, seed):
        return subprocess.run([self.binary, "hash", str(size), "--seed", str(seed)], capture_output=True, text=True,
                              check=True).stdout.split()[0]

    def stats(self):
        """The server's counters: connections, peakConnections, requests, bodyBytes."""
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(b"GET /__stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    def body_bytes(self):
        return self.stats()["bodyBytes"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


class Daemon:
    """`splitfetch serve` on a state directory and a download root, started and stopped by PID."""

    def __init__(self, binary, state, root, port, extra=()):
        self.binary, self.state, self.root, self.port, self.extra = binary, state, root, port, list(extra)
        self.log = state + ".log"
        self.proc = None

    def start(self):
        log = open(self.log, "ab")
        self.proc = subprocess.Popen([self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--state-dir", self.state,
                                      "--dir", self.root, *self.extra], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        if not wait_port(self.port):
            raise RuntimeError("the daemon did not start: " + open(self.log).read()[-2000:])
        return self

    def secret(self):
        return open(os.path.join(self.state, "secret")).read().strip()

    def api(self):
        return aria2p.API(aria2p.Client(host="http://127.0.0.1", port=self.port, secret=self.secret(), timeout=30))

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def rss_kib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def raw(port, body, headers=None, host=None):
    """POST /jsonrpc with exactly these headers; (status, parsed JSON or None)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("POST", "/jsonrpc", skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{port}")
    for name, value in (headers or {}).items():
        conn.putheader(name, value)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.putheader("Content-Length", str(len(data)))
    conn.endheaders()
    conn.send(data)
    response = conn.getresponse()
    text = response.read()
    conn.close()
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, None


def call(port, method, *params, token=None):
    body = {"jsonrpc": "2.0", "id": "t", "method": method, "params": ([f"token:{token}"] if token else []) + list(params)}
    return raw(port, body)


def wait_for(what, condition, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    print(f"# timed out: {what}", flush=True)
    return False


def library_and_cli(daemon_bin, server, work, aria2p_cli):
    """aria2p's library and command line: add, list, pause, resume, remove, wait for completion."""
    state, root = os.path.join(work, "lib-state"), os.path.join(work, "lib-root")
    os.makedirs(root)
    d = Daemon(daemon_bin, state, root, free_port(), ["-j", "2"]).start()
    try:
        api = d.api()
        files = [(i, 200_000 + i * 400_123) for i in range(6)]
        downloads = [api.add_uris([server.url(size, seed, f"lib{seed}.bin")], options={"out": f"lib{seed}.bin"})
                     for seed, size in files]
        check(len({x.gid for x in downloads}) == 6 and all(len(x.gid) == 16 for x in downloads),
              "aria2p add_uris: six GIDs of 16 hex digits")
        statuses = {api.get_download(x.gid).status for x in downloads}
        check(statuses <= {"active", "waiting", "complete"}, "aria2p get_download: each one's status", statuses)
        last = downloads[-1]
        check(api.pause([last]) == [True], "aria2p pause")
        last.update()
        check(last.status == "paused", "the paused download reports paused", last.status)
        check(api.resume([last]) == [True], "aria2p resume")
        victim = downloads[-2]
        check(api.remove([victim]) == [True], "aria2p remove")
        # aria2p removes the download, then its result (as aria2 keeps one): it is gone.
        check(victim.gid not in {x.gid for x in api.get_downloads()}, "the removed download is gone from the list")
        check(not os.path.exists(os.path.join(root, "lib4.bin")), "nothing is under a removed download's final name")
        kept = [x for x in downloads if x.gid != victim.gid]
        done = wait_for("aria2p downloads complete", lambda: all(api.get_download(x.gid).is_complete for x in kept))
        check(done, "every download completes, as aria2p sees it")
        # Listed once nothing moves: aria2p lists active, then waiting, then stopped downloads in
        # three calls, so one that starts between the first two is in neither (as with aria2).
        listed = {x.gid for x in api.get_downloads()}
        check(listed == {x.gid for x in kept}, "aria2p get_downloads lists every download",
              f"missing {sorted({x.gid for x in kept} - listed)}, listed {sorted(listed)}")
        good = sum(1 for seed, size in files if seed != 4 and os.path.exists(os.path.join(root, f"lib{seed}.bin"))
                   and sha256(os.path.join(root, f"lib{seed}.bin")) == server.want(size, seed))
        check(good == 5, "every completed file's SHA-256", f"{good} of 5")
        stats = api.get_stats()
        check(stats.num_stopped_total == 5 and stats.num_active == 0, "aria2p get_stats counts the stopped downloads",
              f"{stats.num_stopped_total} stopped, {stats.num_active} active")

        # The command line, with its own argument for the secret (the client's, not the daemon's).
        base = [aria2p_cli, "--port", str(d.port), "--secret", d.secret()]
        # Slow enough to pause while it runs.
        check(api.set_global_options({"max-overall-download-limit": "1M"}), "aria2p set_global_options: a global rate limit")
        url = server.url(3_000_000, 77, "cli.bin")
        added = subprocess.run(base + ["add", url], capture_output=True, text=True, timeout=60)
        check(added.returncode == 0 and "Created download" in added.stdout, "aria2p add (command line)", added.stdout + added.stderr)
        gid = added.stdout.split()[-1] if added.returncode == 0 else ""
        shown = subprocess.run(base + ["show"], capture_output=True, text=True, timeout=60)
        check(shown.returncode == 0 and gid in shown.stdout, "aria2p show lists it", shown.stdout[-300:] + shown.stderr)
        paused = subprocess.run(base + ["pause", gid], capture_output=True, text=True, timeout=60)
        resumed = subprocess.run(base + ["resume", gid], capture_output=True, text=True, timeout=60)
        check(paused.returncode == 0 and resumed.returncode == 0, "aria2p pause and resume (command line)",
              paused.stderr + resumed.stderr)
        api.set_global_options({"max-overall-download-limit": "0"})
        done = wait_for("the command line's download completes", lambda: api.get_download(gid).is_complete)
        check(done and sha256(os.path.join(root, "cli.bin")) == server.want(3_000_000, 77),
              "the command line's download completes to its SHA-256")
        removed = subprocess.run(base + ["remove", gid], capture_output=True, text=True, timeout=60)
        check(removed.returncode == 0 and gid not in {x.gid for x in api.get_downloads()},
              "aria2p remove (command line) drops a finished download's result", removed.stderr)
        purged = subprocess.run(base + ["purge"], capture_output=True, text=True, timeout=60)
        check(purged.returncode == 0 and api.get_downloads() == [], "aria2p purge empties the history", purged.stderr)
    finally:
        d.stop()


def security(daemon_bin, server, work):
    state, root = os.path.join(work, "sec-state"), os.path.join(work, "sec-root")
    os.makedirs(root)
    os.makedirs(os.path.join(work, "outside"))
    os.symlink(os.path.join(work, "outside"), os.path.join(root, "escape"))
    events = os.path.join(work, "sec-events.jsonl")
    d = Daemon(daemon_bin, state, root, free_port(), ["--events", events]).start()
    port, secret = d.port, d.secret()
    try:
        status, answer = call(port, "aria2.getGlobalStat")
        check(answer and answer.get("error", {}).get("message") == "Unauthorized", "no token: Unauthorized", answer)
        status, answer = call(port, "aria2.getGlobalStat", token="x" * 32)
        check(answer and answer.get("error", {}).get("message") == "Unauthorized", "a wrong token: Unauthorized", answer)
        status, answer = call(port, "aria2.getGlobalStat", token=secret)
        check(answer and "result" in answer, "the right token: answered", answer)

        body = {"jsonrpc": "2.0", "id": 1, "method": "aria2.getGlobalStat", "params": [f"token:{secret}"]}
        status, answer = raw(port, body, {"Origin": "http://evil.example"})
        check(status == 403, "a foreign Origin is refused, with the token", status)
        status, answer = raw(port, body, host=f"evil.example:{port}")
        check(status == 403, "a foreign Host (DNS rebinding) is refused, with the token", status)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall((f"GET /jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                       "Origin: http://evil.example\r\n\r\n").encode())
            line = s.recv(4096).split(b"\r\n")[0]
        check(b" 101 " not in line, "a WebSocket upgrade from a foreign Origin is refused", line)
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall((f"GET /jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            line = s.recv(4096).split(b"\r\n")[0]
        check(b" 101 " in line, "a WebSocket upgrade from the daemon's own clients is accepted", line)

        url = server.url(1000, 1, "x.bin")
        for options, what in [({"dir": "/etc"}, "dir outside the root"), ({"out": "../x.bin"}, "out with .."),
                              ({"dir": "escape"}, "a symlinked subdirectory pointing outside"),
                              ({"out": "escape/x.bin"}, "out through a symlinked subdirectory"),
                              ({"on-download-complete": "/bin/sh"}, "a command-running option through addUri")]:
            status, answer = call(port, "aria2.addUri", [url], options, token=secret)
            check(answer and "error" in answer, f"refused: {what}", answer)
        status, answer = call(port, "aria2.changeGlobalOption", {"on-download-complete": "/bin/sh"}, token=secret)
        check(answer and "error" in answer, "refused: a command-running option through changeGlobalOption", answer)
        check(os.listdir(os.path.join(work, "outside")) == [], "nothing was written outside the root")

        status, answer = raw(port, b'{"jsonrpc": "2.0", "method": ')
        check(answer and answer.get("error", {}).get("code") == -32700, "malformed JSON: a parse error", answer)
        status, answer = call(port, "aria2.getVersion", token=secret)
        check(answer and "result" in answer, "the daemon answers after malformed JSON")

        before = d.rss_kib()
        big = b'{"jsonrpc":"2.0","id":1,"method":"aria2.getVersion","params":["' + b"a" * (64 << 20) + b'"]}'
        try:
            status, answer = raw(port, big)
        except OSError as error:
            status = str(error)
        grown = d.rss_kib() - before
        check(status == 413 or isinstance(status, str), "a 64 MiB body is refused", status)
        check(grown < 16 * 1024, "the 64 MiB body grew the daemon's RSS by less than 16 MiB", f"{grown} KiB")

        idle = []
        for _ in range(500):
            idle.append(socket.create_connection(("127.0.0.1", port)))
        started = time.time()
        status, answer = call(port, "aria2.getGlobalStat", token=secret)
        took = time.time() - started
        check(answer and "result" in answer and took < 2, "with 500 idle connections a request is answered within 2 s",
              f"{took:.2f} s")
        for s in idle:
            s.close()

        # A real download, so the log and the events have something in them.
        status, answer = call(port, "aria2.addUri", [url], {"out": "x.bin"}, token=secret)
        gid = answer.get("result") if answer else None
        wait_for("x.bin", lambda: call(port, "aria2.tellStatus", gid, ["status"], token=secret)[1]["result"]["status"] == "complete", 60)
        cmdline = open(f"/proc/{d.proc.pid}/cmdline", "rb").read()
        check(secret.encode() not in cmdline, "the secret is not in /proc/PID/cmdline")
    finally:
        d.stop()
    log = open(d.log, "rb").read()
    check(secret.encode() not in log and len(log) > 0, "the secret is not in the daemon's log")
    ev = open(events, "rb").read() if os.path.exists(events) else b""
    check(secret.encode() not in ev and b'"state"' in ev, "the secret is not in the events, which were written")


def restarts(daemon_bin, server, work):
    """A paused job stays paused across a restart; an added job survives SIGKILL 50 ms after addUri."""
    state, root = os.path.join(work, "rs-state"), os.path.join(work, "rs-root")
    os.makedirs(root)
    port = free_port()
    d = Daemon(daemon_bin, state, root, port).start()
    secret = d.secret()
    paused = call(port, "aria2.addUri", [server.url(4_000_000, 5, "p.bin")], {"out": "p.bin", "pause": "true"}, token=secret)[1]["result"]
    d.stop(signal.SIGTERM)
    d.start()
    status = call(port, "aria2.tellStatus", paused, ["status"], token=secret)[1]
    check(status.get("result", {}).get("status") == "paused", "a paused job is paused after a restart", status)
    gids = []
    for i in range(5):
        answer = call(port, "aria2.addUri", [server.url(300_000 + i, 100 + i, f"k{i}.bin")], {"out": f"k{i}.bin"}, token=secret)[1]
        gids.append(answer["result"])
        time.sleep(random.uniform(0, 0.05))
        d.stop(signal.SIGKILL)
        d.start()
        status = call(port, "aria2.tellStatus", gids[-1], ["status"], token=secret)[1]
        check("result" in status, f"a job whose addUri returned survives SIGKILL within 50 ms ({i + 1})", status)
    call(port, "aria2.unpause", paused, token=secret)
    done = wait_for("all complete", lambda: all(call(port, "aria2.tellStatus", g, ["status"], token=secret)[1]["result"]["status"] == "complete"
                                                  for g in gids + [paused]))
    good = sum(1 for i in range(5) if sha256(os.path.join(root, f"k{i}.bin")) == server.want(300_000 + i, 100 + i))
    check(done and good == 5 and sha256(os.path.join(root, "p.bin")) == server.want(4_000_000, 5),
          "every job completes to its SHA-256 after the kills")
    second = subprocess.run([daemon_bin, "serve", "--listen", f"127.0.0.1:{free_port()}", "--state-dir", state, "--dir", root],
                            capture_output=True, text=True, timeout=30)
    check(second.returncode != 0 and "another daemon" in second.stderr, "a second daemon on the same state directory refuses",
          second.stderr[-300:])
    d.stop()
    with open(os.path.join(state, "jobs.sqlite"), "r+b") as f:
        f.write(b"this is not an SQLite database header")
    broken = subprocess.run([daemon_bin, "serve", "--listen", f"127.0.0.1:{free_port()}", "--state-dir", state, "--dir", root],
                            capture_output=True, text=True, timeout=30)
    check(broken.returncode != 0 and "damaged" in broken.stderr and "recover" in broken.stderr,
          "a damaged database: the daemon refuses to start and says how to recover", broken.stderr[-300:])


def schedule(daemon_bin, server, work):
    """A schedule whose window opens during a download: the rate drops within 2 s of the minute."""
    state, root = os.path.join(work, "sch-state"), os.path.join(work, "sch-root")
    os.makedirs(root)
    # The window opens at the next minute that leaves time to start the daemon and see the download run
    # at full rate first (a minute only seconds away left the download no time to start before it).
    boundary = (int(time.time()) // 60 + 1) * 60
    if boundary - time.time() < 20:
        boundary += 60
    opens = (boundary // 60) % 1440
    closes = (opens + 10) % 1440
    rule = f"{opens // 60:02d}:{opens % 60:02d}-{closes // 60:02d}:{closes % 60:02d}=256K"
    env = dict(os.environ, TZ="UTC")
    d = Daemon(daemon_bin, state, root, free_port(), ["--schedule", rule, "--max-overall-download-limit", "2M"])
    log = open(d.log, "ab")
    d.proc = subprocess.Popen([d.binary, "serve", "--listen", f"127.0.0.1:{d.port}", "--state-dir", state, "--dir", root, *d.extra],
                              stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
    wait_port(d.port)
    secret = d.secret()
    try:
        status, answer = call(d.port, "aria2.getGlobalOption", token=secret)
        check(answer["result"].get("schedule") == rule, "the schedule is reported by getGlobalOption", answer)
        time.sleep(max(0, boundary - 6 - time.time()))
        size = 32 << 20
        gid = call(d.port, "aria2.addUri", [server.url(size, 9, "sch.bin")], {"out": "sch.bin"}, token=secret)[1]["result"]
        samples = []  # (time, completedLength)
        while time.time() < boundary + 5:
            done = int(call(d.port, "aria2.tellStatus", gid, ["completedLength"], token=secret)[1]["result"]["completedLength"])
            samples.append((time.time(), done))
            time.sleep(0.1)

        def rate(start, end):
            inside = [(t, b) for t, b in samples if start <= t <= end]
            return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0]) if len(inside) > 1 else 0

        before, after = rate(boundary - 4, boundary - 0.5), rate(boundary + 2, boundary + 5)
        check(before > 1.5 * 2**20 and after < 1.25 * 256 * 1024,
              "a schedule window opening mid-download: 2 MiB/s before, 256 KiB/s from 2 s after the minute",
              f"{before / 2**20:.2f} MiB/s before, {after / 1024:.0f} KiB/s after")
        call(d.port, "aria2.changeGlobalOption", {"schedule": ""}, token=secret)
        status, answer = call(d.port, "aria2.changeGlobalOption", {"schedule": "Moon 25:00-26:00=fast"}, token=secret)
        check(answer and "error" in answer, "a malformed schedule set at run time is refused", answer)
        done = wait_for("sch.bin", lambda: call(d.port, "aria2.tellStatus", gid, ["status"], token=secret)[1]["result"]["status"] == "complete", 60)
        check(done and sha256(os.path.join(root, "sch.bin")) == server.want(size, 9), "cleared, the download finishes to its SHA-256")
    finally:
        d.stop()


def clients(daemon_bin, server, work):
    """splitfetch add, ls, pause, resume, rm and watch against a running daemon, through the one-shot
    tool (which runs the daemon's binary for them), finding it through the state directory."""
    state, root = os.path.join(work, "cl-state"), os.path.join(work, "cl-root")
    os.makedirs(root)
    cli = os.path.join(os.path.dirname(daemon_bin), "splitfetch")
    d = Daemon(cli, state, root, free_port(), ["--max-overall-download-limit", "4M"]).start()

    def run(*args):
        return subprocess.run([cli, *args, "--state-dir", state], capture_output=True, text=True, timeout=120)

    try:
        added = run("add", server.url(8_000_000, 31, "c1.bin"), server.url(300_000, 32, "c2.bin"))
        gids = added.stdout.split()
        check(added.returncode == 0 and len(gids) == 2, "splitfetch add: two IDs", added.stdout + added.stderr)
        paused = run("add", "--out", "c3.bin", "--paused", server.url(200_000, 33, "x.bin"))
        gid3 = paused.stdout.strip()
        listed = run("ls")
        check(listed.returncode == 0 and all(g in listed.stdout for g in gids + [gid3]) and "paused" in listed.stdout,
              "splitfetch ls lists them, with their states", listed.stdout + listed.stderr)
        rows = [json.loads(line) for line in run("ls", "--json").stdout.splitlines() if line.strip()]
        check({r["gid"] for r in rows} == set(gids + [gid3]) and all("status" in r and "totalLength" in r for r in rows),
              "splitfetch ls --json: one status object per line", rows[:1])
        check(run("pause", gids[0]).returncode == 0 and call(d.port, "aria2.tellStatus", gids[0], ["status"], token=d.secret())[1]["result"]["status"] == "paused",
              "splitfetch pause")
        check(run("resume", gids[0], gid3).returncode == 0, "splitfetch resume")
        watched = run("watch", "--json", "--until-idle", "--interval", "0.2")
        events = [json.loads(line) for line in watched.stdout.splitlines() if line.strip()]
        finals = {e["gid"]: e["status"] for e in events}
        check(watched.returncode == 0 and all(finals.get(g) == "complete" for g in gids + [gid3])
              and any(e["status"] == "active" for e in events), "splitfetch watch --json follows them to complete",
              watched.stdout[-400:] + watched.stderr)
        good = sha256(os.path.join(root, "c1.bin")) == server.want(8_000_000, 31) and sha256(os.path.join(root, "c3.bin")) == server.want(200_000, 33)
        check(good, "the client commands' downloads have their SHA-256")
        removed = run("rm", gids[1])
        check(removed.returncode == 0 and gids[1] not in run("ls").stdout, "splitfetch rm drops a finished download", removed.stderr)
        proxied = subprocess.run([cli, "ls", "--state-dir", state], capture_output=True, text=True, timeout=60,
                                 env=dict(os.environ, http_proxy="http://127.0.0.1:9", all_proxy="http://127.0.0.1:9"))
        check(proxied.returncode == 0 and gids[0] in proxied.stdout, "the client ignores a proxy in the environment (the token stays local)",
              proxied.stderr)
        unknown = run("pause", "0000000000000000")
        check(unknown.returncode == 1 and "0000000000000000" in unknown.stderr, "an unknown ID: status 1 and a message", unknown.stderr)
    finally:
        d.stop()
    gone = run("ls")
    check(gone.returncode != 0 and "no daemon runs" in gone.stderr, "with no daemon running: a clear message", gone.stderr)


def hooks(daemon_bin, server, work):
    """--on-complete and --on-error: the details in the environment, exactly once per download,
    across a SIGKILL and restart in the middle."""
    state, root = os.path.join(work, "hk-state"), os.path.join(work, "hk-root")
    os.makedirs(root)
    log = os.path.join(work, "hooks.log")
    script = os.path.join(work, "hook.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\n"
                f"printf '%s|%s|%s|%s|%s\\n' \"$SPLITFETCH_ID\" \"$SPLITFETCH_STATUS\" \"$SPLITFETCH_PATH\" \"$SPLITFETCH_SIZE\" "
                f"\"$SPLITFETCH_ERROR_CODE\" >> {log}\n")
    os.chmod(script, 0o755)
    d = Daemon(daemon_bin, state, root, free_port(), ["-j", "3", "--on-complete", script, "--on-error", script]).start()
    secret = d.secret()
    sizes = {f"h{i}.bin": 1_000_000 + i * 250_000 for i in range(20)}
    gids = {}
    for i, (name, size) in enumerate(sizes.items()):
        gids[name] = call(d.port, "aria2.addUri", [server.url(size, 200 + i, name)], {"out": name}, token=secret)[1]["result"]
    missing = call(d.port, "aria2.addUri", [f"http://127.0.0.1:{server.port}/no/such/file"], {"out": "missing.bin", "max-tries": "1"},
                   token=secret)[1]["result"]
    wait_for("some complete", lambda: sum(1 for line in open(log)) >= 6 if os.path.exists(log) else False, 60)
    d.stop(signal.SIGKILL)
    d.start()
    def all_final():
        return all(call(d.port, "aria2.tellStatus", g, ["status"], token=secret)[1]["result"]["status"] in ("complete", "error")
                   for g in list(gids.values()) + [missing])
    wait_for("all final", all_final, 120)
    wait_for("every hook", lambda: len(open(log).read().splitlines()) >= 21, 30)
    time.sleep(1)  # a hook run twice would show now
    d.stop()
    lines = [line.split("|") for line in open(log).read().splitlines()]
    by_gid = {}
    for fields in lines:
        by_gid.setdefault(fields[0], []).append(fields)
    once = all(len(by_gid.get(g, [])) == 1 for g in list(gids.values()) + [missing]) and len(lines) == 21
    check(once, "each download's hook ran exactly once, across a SIGKILL and restart", f"{len(lines)} lines for 21 downloads")
    right = all(by_gid[g][0][1] == "complete" and by_gid[g][0][2] == os.path.join(os.path.realpath(root), name)
                and by_gid[g][0][3] == str(sizes[name]) for name, g in gids.items() if g in by_gid)
    check(right, "--on-complete got the ID, status, path and size in its environment", lines[:2])
    check(missing in by_gid and by_gid[missing][0][1] == "error" and by_gid[missing][0][4] == "http",
          "--on-error got the status and the error code", by_gid.get(missing))
    good = sum(1 for i, (name, size) in enumerate(sizes.items()) if sha256(os.path.join(root, name)) == server.want(size, 200 + i))
    check(good == 20, "the hooked downloads have their SHA-256", f"{good} of 20")


def webhooks(daemon_bin, server, work):
    """--webhook: a receiver on loopback gets every completion and failure, signed with HMAC-SHA256
    of the body; it refuses each first attempt, so every one is a retry."""
    import hashlib as _h, hmac, http.server, threading
    key = "webhook-key-0123456789"
    key_file = os.path.join(work, "webhook.key")
    with open(key_file, "w") as f:
        f.write(key + "\n")
    received, lock = [], threading.Lock()

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            signature = self.headers.get("X-Splitfetch-Signature", "")
            good = hmac.compare_digest(signature, "sha256=" + hmac.new(key.encode(), body, _h.sha256).hexdigest())
            event = json.loads(body)
            with lock:
                first = not any(e["id"] == event["id"] for e, _ in received)
                received.append((event, good))
            self.send_response(500 if first else 204)
            self.end_headers()

        def log_message(self, *args):
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    state, root = os.path.join(work, "wh-state"), os.path.join(work, "wh-root")
    os.makedirs(root)
    d = Daemon(daemon_bin, state, root, free_port(), ["-j", "3", "--webhook", f"http://127.0.0.1:{receiver.server_port}/hook",
                                                      "--webhook-key-file", key_file]).start()
    secret = d.secret()
    gids = [call(d.port, "aria2.addUri", [server.url(700_000 + i, 300 + i, f"w{i}.bin")], {"out": f"w{i}.bin"}, token=secret)[1]["result"]
            for i in range(10)]
    missing = call(d.port, "aria2.addUri", [f"http://127.0.0.1:{server.port}/no/such/thing"], {"out": "wmiss.bin", "max-tries": "1"},
                   token=secret)[1]["result"]
    wait_for("a few delivered", lambda: len({e["id"] for e, _ in received}) >= 3, 60)
    d.stop(signal.SIGKILL)
    d.start()
    everyone = set(gids + [missing])

    def delivered():
        with lock:
            return {e["id"] for e, _ in received[1:]} >= everyone and all(
                sum(1 for e, _ in received if e["id"] == g) >= 2 for g in everyone)
    ok = wait_for("every webhook delivered", delivered, 90)
    d.stop()
    receiver.shutdown()
    with lock:
        events = list(received)
    check(ok, "the webhook receiver got every completion and failure (each retried after a 500)",
          f"{len({e['id'] for e, _ in events} & everyone)} of {len(everyone)}")
    check(all(good for _, good in events), "every webhook carries a valid HMAC-SHA256 signature")
    kinds = {e["id"]: e["event"] for e, _ in events}
    check(kinds.get(missing) == "error" and all(kinds.get(g) == "complete" for g in gids),
          "the documents say complete or error, with the ID", kinds.get(missing))


def per_host(daemon_bin, server, work):
    """--max-downloads-per-host 1: one download from the server at a time, although -j is 4."""
    state, root = os.path.join(work, "ph-state"), os.path.join(work, "ph-root")
    os.makedirs(root)
    d = Daemon(daemon_bin, state, root, free_port(), ["-j", "4", "--max-downloads-per-host", "1"]).start()
    secret = d.secret()
    try:
        gids = [call(d.port, "aria2.addUri", [server.url(3_000_000, 400 + i, f"p{i}.bin")], {"out": f"p{i}.bin"}, token=secret)[1]["result"]
                for i in range(4)]
        most = 0
        deadline = time.time() + 60
        while time.time() < deadline:
            # Transferring: active with bytes still to come (one that has them all is only syncing its
            # file, and its slot is already the next download's).
            active = call(d.port, "aria2.tellActive", ["completedLength", "totalLength"], token=secret)[1]["result"]
            most = max(most, sum(1 for a in active if int(a["totalLength"]) == 0 or int(a["completedLength"]) < int(a["totalLength"])))
            if int(call(d.port, "aria2.getGlobalStat", token=secret)[1]["result"]["numStopped"]) == 4:
                break
            time.sleep(0.05)
        good = sum(1 for i in range(4) if sha256(os.path.join(root, f"p{i}.bin")) == server.want(3_000_000, 400 + i))
        check(most == 1 and good == 4, "--max-downloads-per-host 1: one transfer at a time from one server, all four to their SHA-256",
              f"at most {most} transferring, {good} of 4 whole")
    finally:
        d.stop()


def main():
    daemon_bin, server_bin, work, aria2p_cli = sys.argv[1:5]
    server = TestServer(server_bin, work, rate=4 << 20)
    try:
        library_and_cli(daemon_bin, server, work, aria2p_cli)
        security(daemon_bin, server, work)
        restarts(daemon_bin, server, work)
        clients(daemon_bin, server, work)
        hooks(daemon_bin, server, work)
        webhooks(daemon_bin, server, work)
        per_host(daemon_bin, server, work)
        schedule(daemon_bin, server, work)
    finally:
        server.stop()
    print(f"e2e-daemon: {PASSED} passed, {FAILED} failed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
