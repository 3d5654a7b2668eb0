"""Scenario "h2": nginx with TLS and HTTP/2, through `sf-testserver relay` at a 50 ms round trip.

(h2a) 1,000 files of 64 KiB, 50 at a time: splitfetch (`--http2 auto`, the default, and `never`)
against `curl --parallel` (multiplexed), wget2 and aria2 (HTTP/1.1 only). (h2b) one 1 GiB file
at nginx's `limit_rate 4m` per request, 16 connections: splitfetch with `--http2 auto`, `never`
and `always`, against the ideal 64 MiB/s and against what 16 curl range requests at once get from
the same server in the same run. Every file is checked by SHA-256; nginx's log counts the
requests over each protocol and the connections.
"""
import hashlib
import os
import subprocess
import time

from nginxconf import nginx_conf
from refresh import Relay

KiB = 1024
MiB = 1024 * KiB


class TLSNginx:
    """nginx with TLS and h2 on loopback, its own prefix, config, certificates and pid file."""

    def __init__(self, work, root, free_port, wait_port):
        self.dir = os.path.join(work, "nginx-h2")
        for sub in ("logs", "tmp", "certs"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        certs = os.path.join(self.dir, "certs")
        self.ca = os.path.join(certs, "ca.pem")
        run = lambda *argv: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=splitfetch bench CA",
            "-keyout", os.path.join(certs, "ca.key"), "-out", self.ca)
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", os.path.join(certs, "server.key"),
            "-out", os.path.join(certs, "server.csr"))
        with open(os.path.join(certs, "san.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        run("openssl", "x509", "-req", "-in", os.path.join(certs, "server.csr"), "-CA", self.ca, "-CAkey", os.path.join(certs, "ca.key"),
            "-CAcreateserial", "-days", "2", "-extfile", os.path.join(certs, "san.ext"), "-out", os.path.join(certs, "server.pem"))
        self.port = free_port()
        self.log = os.path.join(self.dir, "logs", "access.log")
        # A worker per core (nginx's `auto`), and over TLS, where nginx copies the file into its
        # output buffers, /limited/ writes 16 KiB at a time. nginx's limit_rate waits, after each
        # write, that write's time at the rate, and loses whatever the event loop was late; with
        # one worker and 64 KiB writes, 16 TLS connections each got 3.77 MiB/s of the 4 (16 curl
        # ranges: 91-95 % of 64 MiB/s). With smaller writes its whole-second allowance (the rate
        # times the seconds begun, plus one) makes up for the lateness: 16 curl ranges got 98.4-99.5 %.
        # Every run still measures what 16 curl ranges get from it, beside splitfetch.
        conf = nginx_conf(self.dir, self.port, root, self.log, "$request_uri $status $body_bytes_sent $server_protocol $connection",
                          listen="ssl http2", server=f"    ssl_certificate {certs}/server.pem;\n    ssl_certificate_key {certs}/server.key;",
                          workers="auto", limited="output_buffers 2 16k;")
        with open(os.path.join(self.dir, "nginx.conf"), "w") as f:
            f.write(conf)
        subprocess.run(["/usr/sbin/nginx", "-p", self.dir, "-c", os.path.join(self.dir, "nginx.conf"),
                        "-e", os.path.join(self.dir, "logs", "error.log")], check=True)
        wait_port(self.port)

    def log_size(self):
        return os.path.getsize(self.log) if os.path.exists(self.log) else 0

    def since(self, offset):
        """Requests since `offset`: (over HTTP/2, over HTTP/1.1, distinct connections)."""
        time.sleep(0.3)
        with open(self.log, "rb") as f:
            f.seek(offset)
            lines = [l.split() for l in f.read().decode(errors="replace").splitlines()]
        return (sum(1 for l in lines if len(l) == 5 and l[3] == "HTTP/2.0"), sum(1 for l in lines if len(l) == 5 and l[3] == "HTTP/1.1"),
                len({l[4] for l in lines if len(l) == 5}))

    def stop(self):
        pidfile = os.path.join(self.dir, "nginx.pid")
        if os.path.exists(pidfile):
            try:
                os.kill(int(open(pidfile).read().strip()), 15)
            except ProcessLookupError:
                pass


def http2_scenarios(args, work, www, servers, measured_run, result_row, rows, sha256_file, quick, round_order, settle_disk,
                    free_port, wait_port, tools, make_file):
    nginx = TLSNginx(work, www, free_port, wait_port)
    servers.append(nginx)
    relay = Relay(work, args.testserver, nginx.port, 50)
    servers.append(relay)
    base = f"https://127.0.0.1:{relay.port}"
    splitfetch = os.path.abspath(args.splitfetch)
    results = {}

    # h2a: many small files.
    count = 200 if quick else 1000
    small = os.path.join(www, "h2")
    os.makedirs(small, exist_ok=True)
    os.chmod(small, 0o755)
    expected = {f"h{i}.bin": make_file(f"h2/h{i}.bin", 64 * KiB) for i in range(count)}
    urls = [f"{base}/h2/h{i}.bin" for i in range(count)]
    listfile = os.path.join(work, "h2-list.txt")
    with open(listfile, "w") as f:
        f.write("\n".join(urls) + "\n")
    j = "50"
    commands = {
        "splitfetch": lambda d: [splitfetch, "-q", "-j", j, "-i", listfile, "-d", d, "--cacert", nginx.ca],
        "splitfetch --http2 never": lambda d: [splitfetch, "-q", "-j", j, "--http2", "never", "-i", listfile, "-d", d, "--cacert", nginx.ca],
        "curl": lambda d: ["curl", "-s", "--parallel", "--parallel-max", j, "--cacert", nginx.ca, "--output-dir", d, "--remote-name-all"] + urls,
        "wget2": lambda d: ["wget2", "-q", "--no-robots", f"--max-threads={j}", f"--ca-certificate={nginx.ca}", "-nd", "-P", d, "-i", listfile],
        "aria2": lambda d: ["aria2c", "-q", "-j", j, "-x", "1", f"--ca-certificate={nginx.ca}", "-i", listfile, "-d", d,
                            "--allow-overwrite=true", "--auto-file-renaming=false"],
    }
    selected = [t for t in commands if t.split(" ")[0] in tools]
    runs = {t: [] for t in selected}
    for r in range(args.runs):
        for tool in round_order(selected, r):
            d = os.path.join(work, "out", "h2a-" + tool.replace(" ", "_"))
            subprocess.run(["rm", "-rf", d])
            os.makedirs(d)
            settle_disk()
            offset = nginx.log_size()
            rc, err, wall, cpu, rss = measured_run(commands[tool](d), 600)
            h2, h1, conns = nginx.since(offset)
            bad = [n for n, sha in expected.items() if not os.path.exists(os.path.join(d, n)) or sha256_file(os.path.join(d, n)) != sha]
            ok = rc == 0 and not bad
            runs[tool].append({"ok": ok, "wall": wall, "cpu": cpu, "rss_kib": rss, "requests": h1 + h2,
                               "error": f"exit {rc}, {len(bad)} files wrong: {(err or '')[-200:]}"})
            print(f"bench: scenario h2a {tool} run {r + 1}: " + (f"{wall:.2f} s" if ok else runs[tool][-1]["error"]) +
                  f", {h2} over HTTP/2, {h1} over HTTP/1.1, {conns} connections", flush=True)
    for tool in selected:
        rows.append(result_row("h2a", f"{count} files of 64 KiB, {j} at a time, nginx TLS+h2 through a 50 ms relay", tool, int(j),
                               count * 64 * KiB, runs[tool], None))
    results["h2a"] = runs

    # h2b: one large file at 4 MiB/s per request, 16 connections.
    size = 256 * MiB if quick else 1024 * MiB
    sha = make_file("h2big.bin", size)
    # The reference: 16 curl range requests at once, each over HTTP/1.1 on a connection of its
    # own, show what this server gives 16 connections in this run (nginx's limit_rate over TLS
    # delivers less than 4 MiB/s per connection when 16 run at once).
    modes = ["auto", "never", "always", "16 curl ranges"]
    big = {m: [] for m in modes}
    for r in range(args.runs):
        for mode in round_order(modes, r):
            out = os.path.join(work, "out", "h2big.bin")
            subprocess.run(["rm", "-rf", os.path.dirname(out)])
            os.makedirs(os.path.dirname(out))
            settle_disk()
            offset = nginx.log_size()
            if mode == "16 curl ranges":
                rc, err, wall, cpu, rss = measured_run(["sh", "-c", curl_ranges(16, size, nginx.ca, f"{base}/limited/h2big.bin", out)], 600)
            else:
                rc, err, wall, cpu, rss = measured_run([splitfetch, "-q", "-n", "16", "--http2", mode, "-o", "h2big.bin", "-d",
                                                       os.path.dirname(out), "--cacert", nginx.ca, f"{base}/limited/h2big.bin"], 600)
            h2, h1, conns = nginx.since(offset)
            ok = rc == 0 and (joined_sha256([f"{out}.{i}" for i in range(16)]) if mode.startswith("16") else sha256_file(out)) == sha
            big[mode].append({"ok": ok, "wall": wall, "cpu": cpu, "rss_kib": rss, "requests": h1 + h2, "error": f"exit {rc}"})
            print(f"bench: scenario h2b {mode if mode.startswith('16') else '--http2 ' + mode} run {r + 1}: " + (f"{wall:.2f} s, {size / MiB / wall:.1f} MiB/s" if ok else f"exit {rc}")
                  + f", {h2} over HTTP/2, {h1} over HTTP/1.1, {conns} connections", flush=True)
    for mode in modes:
        rows.append(result_row("h2b", f"{size // MiB} MiB at 4 MiB/s per request, 16 connections, nginx TLS+h2 through a 50 ms relay",
                               mode if mode.startswith("16") else f"splitfetch --http2 {mode}", 16, size, big[mode], 16 * 4 * MiB))
    results["h2b"] = big
    results["size"] = size
    return results


def curl_ranges(count, size, ca, url, out):
    """A shell command: `count` curl range requests of `size` at once into `out`.0, `out`.1, …
    (exit status not 0 if any failed). Not joined: the wall is the downloads' alone."""
    share = size // count
    parts = []
    for i in range(count):
        last = size - 1 if i == count - 1 else (i + 1) * share - 1
        parts.append(f"curl -sf --http1.1 --cacert {ca} -r {i * share}-{last} -o {out}.{i} {url} & p{i}=$!")
    return "; ".join(parts) + "; " + " && ".join(f"wait $p{i}" for i in range(count))


def joined_sha256(paths):
    """The SHA-256 of the files' bytes one after the other; `None` if one is missing."""
    digest = hashlib.sha256()
    for path in paths:
        if not os.path.exists(path):
            return None
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def http2_verdicts(results):
    if not results:
        return []
    med = lambda runs: sorted(r["wall"] for r in runs if r["ok"])[len([r for r in runs if r["ok"]]) // 2] \
        if any(r["ok"] for r in runs) else None
    verdicts = []
    small = results.get("h2a", {})
    ours = med(small.get("splitfetch", []))
    if ours:
        peers = {t: med(v) for t, v in small.items() if t in ("curl", "wget2", "aria2") and med(v)}
        bound = [w for t, w in peers.items() if t in ("curl", "wget2")]
        verdicts.append(f"h2a: splitfetch {ours:.2f} s (" + ", ".join(f"{t} {w:.2f} s" for t, w in sorted(peers.items()))
                        + (f", --http2 never {med(small['splitfetch --http2 never']):.2f} s" if med(small.get("splitfetch --http2 never", [])) else "")
                        + f"); target at most curl and wget2, ahead of aria2: "
                        + ("met" if bound and ours <= min(bound) and ours < peers.get("aria2", float("inf")) else "NOT met"))
    big = results.get("h2b", {})
    size = results.get("size", 0)
    ceiling = med(big.get("16 curl ranges", []))
    for mode, runs in big.items():
        wall = med(runs)
        if wall:
            fraction = size / wall / (64 * MiB)
            label = mode if mode.startswith("16") else f"--http2 {mode}"
            verdicts.append(f"h2b: {label}: {size / MiB / wall:.1f} MiB/s, {fraction * 100:.1f} % of 64 MiB/s"
                            + (f", {ceiling / wall * 100:.1f} % of 16 curl ranges at once" if ceiling and not mode.startswith("16") else "")
                            + (f" (target at least 97 % of 64 MiB/s: {'met' if fraction >= 0.97 else 'NOT met'})" if mode == "auto" else ""))
    return verdicts
