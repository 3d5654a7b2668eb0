"""Scenario 'm': one file from three mirrors, against aria2 given the same three URIs.

m1: three sf-testserver listeners capped at 2, 4 and 8 MiB/s per connection, 4 connections to
each, 256 MiB (64 MiB with --quick). The ideal is the three together: 4 x 14 = 56 MiB/s.
splitfetch gets the first URL and the others as --mirror; aria2c gets all three URIs with
-x 4 (connections per server) and -s 12 (connections in all). Every output is SHA-256-checked.
"""
MiB = 1 << 20
RATES = [2 * MiB, 4 * MiB, 8 * MiB]
PER_SOURCE = 4


def mirror_tools(splitfetch):
    """argv for (urls, output path) per tool."""
    import os

    def sf(urls, out):
        argv = [splitfetch, "-q", "-n", str(PER_SOURCE), "--force", "-o", os.path.basename(out), "-d", os.path.dirname(out), urls[0]]
        for mirror in urls[1:]:
            argv += ["--mirror", mirror]
        return argv

    def aria2(urls, out):
        return ["aria2c", "-q", "-x", str(PER_SOURCE), "-s", str(PER_SOURCE * len(urls)), "-k", "1M", "--allow-overwrite=true",
                "--auto-file-renaming=false", "-d", os.path.dirname(out), "-o", os.path.basename(out)] + urls

    return {"splitfetch": sf, "aria2": aria2}


def mirror_scenarios(args, work, servers, test_server, hash_of, run_once, result_row, rows, tools):
    import os
    size = 64 * MiB if args.quick else 256 * MiB
    listeners = [test_server(work, args.testserver, rate) for rate in RATES]
    servers.extend(listeners)
    sha = hash_of(size)
    urls = [f"http://127.0.0.1:{s.port}/size/{size}/m1.bin" for s in listeners]
    commands = mirror_tools(os.path.abspath(args.splitfetch))
    selected = [t for t in commands if t in tools]
    out_dir = os.path.join(work, "out")
    ideal = PER_SOURCE * sum(RATES)
    results = {t: [] for t in selected}
    for r in range(args.runs):
        for t in selected:  # interleaved
            out = os.path.join(out_dir, f"{t}-m1.bin")
            res = run_once(commands[t](urls, out), out, sha, 180)
            results[t].append(res)
            status = f"{res['wall']:.2f} s" if res["ok"] else f"FAILED ({res['error']})"
            print(f"bench: scenario m1 three mirrors {t} run {r + 1}: {status}", flush=True)
    for t in selected:
        rows.append(result_row("m1", "three mirrors at 2/4/8 MiB/s per connection, 4 each", t, PER_SOURCE * len(RATES), size,
                               results[t], ideal))


def mirror_verdicts(rows):
    m1 = {r["tool"]: r for r in rows if r["scenario"] == "m1" and "mib_s" in r}
    sf = m1.get("splitfetch")
    if not sf:
        return []
    verdicts = [f"m1: splitfetch from three mirrors: {sf['mib_s']:.1f} MiB/s, {sf['ideal_fraction'] * 100:.1f} % of the "
                f"aggregate ideal of 56 MiB/s (target at least 95 %: {'met' if sf['ideal_fraction'] >= 0.95 else 'NOT met'})"]
    aria2 = m1.get("aria2")
    if aria2:
        faster = sf["wall_median"] < aria2["wall_median"]
        verdicts.append(f"m1: aria2 with the same three URIs: {aria2['mib_s']:.1f} MiB/s; splitfetch "
                        f"{aria2['wall_median'] / sf['wall_median']:.2f} x as fast ({'faster' if faster else 'NOT faster'})")
    return verdicts
