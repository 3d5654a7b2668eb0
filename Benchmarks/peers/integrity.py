"""The integrity benchmark (scenario v): a verified download against downloading then hashing.

v1, 1 GiB unthrottled from nginx: `splitfetch --checksum sha-256=…` (hashes as it downloads),
`splitfetch` then `sha256sum` (the way people check an ISO today), and `aria2c --checksum=…`
(which hashes after the download). v2, 256 MiB from the test server at 4 MiB/s per connection
with 16 connections: the verified download against the same without a digest, for wall time
and peak RSS. The targets are printed as verdicts under the table.
"""
import os
import statistics

MiB = 1 << 20


def integrity_tools(splitfetch, sha):
    """Tools that check the file against `sha` (argv for url, out, n, size), and download+hash."""
    def sf(url, out, n, size):
        return [splitfetch, "-q", "-n", str(n), "--force", "-o", os.path.basename(out), "-d", os.path.dirname(out), url]

    def verified(url, out, n, size):
        return sf(url, out, n, size)[:1] + ["--checksum", f"sha-256={sha}"] + sf(url, out, n, size)[1:]

    def then_sha256sum(url, out, n, size):
        # The digest is compared too, as a person checking an ISO would.
        command = " ".join(f"'{a}'" for a in sf(url, out, n, size))
        return ["sh", "-c", f"{command} && test \"$(sha256sum '{out}' | cut -d' ' -f1)\" = {sha}"]

    def aria2(url, out, n, size):
        return ["aria2c", "-q", "-x", str(n), "-s", str(n), "-k", "1M", "--allow-overwrite=true",
                "--auto-file-renaming=false", f"--checksum=sha-256={sha}", "-d", os.path.dirname(out),
                "-o", os.path.basename(out), url]

    return {"splitfetch-verified": (verified, True), "splitfetch+sha256sum": (then_sha256sum, True),
            "aria2-verified": (aria2, True)}


def integrity_verdicts(rows):
    """The issue's targets, from the v1 and v2 rows: lines of text."""
    def row(scenario, tool):
        return next((r for r in rows if r["scenario"] == scenario and r["tool"] == tool and "wall_median" in r), None)

    lines = []
    verified, then_hash, aria2 = row("v1", "splitfetch-verified"), row("v1", "splitfetch+sha256sum"), row("v1", "aria2-verified")
    if verified and then_hash:
        ratio = verified["wall_median"] / then_hash["wall_median"]
        lines.append(f"v1: verified {verified['wall_median']:.2f} s against download+sha256sum {then_hash['wall_median']:.2f} s: "
                     f"{ratio:.2f} x (target <= 0.80: {'met' if ratio <= 0.8 else 'NOT met'})")
    if verified and aria2:
        lines.append(f"v1: verified {verified['wall_median']:.2f} s against aria2 --checksum {aria2['wall_median']:.2f} s "
                     f"(target: less: {'met' if verified['wall_median'] < aria2['wall_median'] else 'NOT met'})")
    verified2, plain2 = row("v2", "splitfetch-verified"), row("v2", "splitfetch")
    if verified2 and plain2:
        ratio = verified2["wall_median"] / plain2["wall_median"]
        lines.append(f"v2: verified {verified2['wall_median']:.2f} s against unverified {plain2['wall_median']:.2f} s: "
                     f"{ratio:.3f} x (target <= 1.02: {'met' if ratio <= 1.02 else 'NOT met'})")
        extra = verified2["rss_mib"] - plain2["rss_mib"]
        lines.append(f"v2: peak RSS {verified2['rss_mib']:.1f} MiB against {plain2['rss_mib']:.1f} MiB: {extra:+.1f} MiB "
                     f"(target: within 4 MiB: {'met' if extra <= 4 else 'NOT met'})")
    return lines
