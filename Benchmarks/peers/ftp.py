"""Scenario "ftp": one 256 MiB file from vsftpd at 4 MiB/s per connection (anon_max_rate), 8 connections.

splitfetch -n 8 against `lftp -c pget -n 8`, `aria2c -x8 -s8` and `axel -n 8`, interleaved, each
run's file checked by SHA-256; the ideal is 32 MiB/s. vsftpd runs on 127.0.0.1 with its own
config and a private port, anonymous and read-only, and is stopped by PID.
"""
import os
import subprocess
import time

KiB = 1024
MiB = 1024 * KiB


class Vsftpd:
    """vsftpd on loopback, anonymous, serving `root`, each connection capped at `rate` bytes/s."""

    def __init__(self, work, root, rate, free_port, wait_port):
        self.dir = os.path.join(work, "vsftpd")
        os.makedirs(os.path.join(self.dir, "empty"), exist_ok=True)
        self.port = free_port()
        conf = os.path.join(self.dir, "vsftpd.conf")
        with open(conf, "w") as f:
            f.write("\n".join([
                "listen=YES", "listen_address=127.0.0.1", f"listen_port={self.port}", "background=NO",
                "anonymous_enable=YES", f"anon_root={root}", "no_anon_password=YES", "local_enable=NO", "write_enable=NO",
                "seccomp_sandbox=NO", f"secure_chroot_dir={os.path.join(self.dir, 'empty')}", "ftp_username=ftp",
                "pasv_enable=YES", f"anon_max_rate={rate}", "max_clients=200", "max_per_ip=64",
            ]) + "\n")
        self.proc = subprocess.Popen(["/usr/sbin/vsftpd", conf], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def ftp_commands(splitfetch):
    """Each tool's argv for URL into OUT with N connections."""
    return {
        "splitfetch": lambda url, out, n: [splitfetch, "-q", "-n", str(n), "--force", "-o", os.path.basename(out),
                                           "-d", os.path.dirname(out), url],
        "lftp": lambda url, out, n: ["lftp", "-c", f"set net:max-retries 3; set xfer:clobber on; pget -n {n} {url} -o {out}"],
        "aria2": lambda url, out, n: ["aria2c", "-q", f"-x{n}", f"-s{n}", "--min-split-size=1M", "--allow-overwrite=true",
                                      "--auto-file-renaming=false", "--file-allocation=none", "-d", os.path.dirname(out),
                                      "-o", os.path.basename(out), url],
        "axel": lambda url, out, n: ["axel", "-q", "-n", str(n), "-o", out, url],
    }


def ftp_scenarios(args, work, www, servers, measured_run, result_row, rows, sha256_file, quick, round_order, settle_disk,
                  free_port, wait_port, tools, make_file):
    size = 64 * MiB if quick else 256 * MiB
    rate = 4 * MiB
    n = 8
    sha = make_file("ftp.bin", size)
    server = Vsftpd(work, www, rate, free_port, wait_port)
    servers.append(server)
    url = f"ftp://127.0.0.1:{server.port}/ftp.bin"
    commands = ftp_commands(os.path.abspath(args.splitfetch))
    selected = [t for t in commands if t in tools]
    runs = {t: [] for t in selected}
    for r in range(args.runs):
        for tool in round_order(selected, r):
            out = os.path.join(work, "out", f"ftp-{tool}.bin")
            for leftover in (out, out + ".st", out + ".aria2", out + ".part", out + ".part.json", out + ".lftp-pget-status"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            settle_disk()
            rc, err, wall, cpu, rss = measured_run(commands[tool](url, out, n), 600)
            ok = rc == 0 and os.path.exists(out) and sha256_file(out) == sha
            runs[tool].append({"ok": ok, "wall": wall, "cpu": cpu, "rss_kib": rss, "requests": None,
                               "error": f"exit {rc}: {(err or '')[-200:]}"})
            print(f"bench: scenario ftp {tool} run {r + 1}: "
                  + (f"{wall:.2f} s, {size / MiB / wall:.1f} MiB/s" if ok else runs[tool][-1]["error"]), flush=True)
            time.sleep(0.5)  # vsftpd's sessions of the last run end
    for tool in selected:
        rows.append(result_row("ftp", f"{size // MiB} MiB from vsftpd at 4 MiB/s per connection, {n} connections", tool, n, size,
                               runs[tool], n * rate))
    return {"runs": runs, "size": size}


def ftp_verdicts(results):
    if not results:
        return []
    ok_walls = lambda runs: sorted(r["wall"] for r in runs if r["ok"])
    med = lambda runs: ok_walls(runs)[len(ok_walls(runs)) // 2] if ok_walls(runs) else None
    runs = results["runs"]
    ours = med(runs.get("splitfetch", []))
    if ours is None:
        return ["ftp: splitfetch did not finish"]
    peers = {t: med(v) for t, v in runs.items() if t != "splitfetch"}
    met = all(w is None or ours <= w for w in peers.values())
    size = results["size"]
    return [f"ftp: splitfetch {ours:.2f} s ({size / MiB / ours:.1f} MiB/s of 32 MiB/s); "
            + ", ".join(f"{t} {w:.2f} s" if w else f"{t} failed" for t, w in sorted(peers.items()))
            + f"; target at most every peer's median: {'met' if met else 'NOT met'}"]
