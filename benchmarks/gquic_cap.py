"""The gQUIC arm before and after issue 31's fix: does it now reach the link?

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/gquic_cap.py [--runs 10] [--md FILE]

Before the fix the gquic arm (quicbed-gquic-server on quic-go v0.10.2, Chromium 72)
delivered about 12.5 Mbit/s whatever the link: v0.10.2 paces in 100 us steps, which
Go's timers stretch to about 1.1 ms, so it sent about one packet per millisecond
(docs/gquic-cap.md). This measures 1 MB and 10 MB at 10, 50 and 100 Mbit/s, 36 ms,
h2 (Apache, TCP CUBIC, TLS 1.2) against gquic (Q039), both in Chromium 72, with the
server as it was (built here from ``--before-rev``, the commit before the fix, by
the same patch program and toolchain) and as it is (build/bin), on one shaped link
per rate: for each page the before cell, then the after cell, each interleaved
(ABBA) and every load verified (protocol, 0-RTT, CC, and for the after build the
server's window and flight record). It prints the mean PLT per arm and build and
gquic's difference against h2 with Welch's p; for the after build also gquic's
handshake round trips, its window limit and the most it sent in one RTT against the
BDP. No threshold: the table is the result; it exits 1 only if a cell fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

from quicbed.link.proof import prove
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.paths import REPO_ROOT
from quicbed.results.store import Store
from quicbed.run.cell import CellResult, run_cell
from quicbed.servers.gquic import flight_per_rtt
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

#: the last commit before the fix (ec9d532): its go/patches and go/gquic build the
#: server as it was
BEFORE_REV = "996f954c76d4a9a66931deba7cf565a9def7cecf"
SERVER = "quicbed-gquic-server"
PATCH = "quic-go-v0.10.2-keep-ciphertext"
ARMS = ("h2", "gquic")
RATES = (10.0, 50.0, 100.0)
PAGES = ("1mb", "10mb")
RTT_MS = 36.0


def build_before(rev: str, work: Path) -> Path:
    """A bin folder like build/bin whose gQUIC server is built from ``rev``'s go/ tree
    (git archive: the checkout is not touched) the way the quicbed_binaries role builds
    it (-trimpath, CGO_ENABLED=0)."""
    tree = work / "src"
    tree.mkdir(parents=True)
    blob = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", rev, "go"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(tree, filter="tar")
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = {**os.environ, "CGO_ENABLED": "0"}
    patched = tree / "build" / "quic-go-v0.10.2-patched"
    subprocess.run(
        [go, "run", "-trimpath", "./patches", "-go", go, "-patch", PATCH, "-out", str(patched)],
        cwd=tree / "go",
        env=env,
        check=True,
        capture_output=True,
    )
    bindir = work / "bin"
    bindir.mkdir()
    argv = [go, "build", "-trimpath", f"-modfile={patched}/quicbed.mod", "-o", str(bindir / SERVER)]
    subprocess.run(
        [*argv, "./cmd/" + SERVER],
        cwd=tree / "go" / "gquic",
        env=env,
        check=True,
        capture_output=True,
    )
    for f in (REPO_ROOT / "build" / "bin").iterdir():  # everything else: today's builds
        if f.name != SERVER:
            (bindir / f.name).symlink_to(f)
    return bindir


def gquic_record(r: CellResult, rtt_ms: float) -> dict[str, Any]:
    """The after build's record of gquic's measured loads: handshake round trips, the
    window limit, and the most bytes sent in one RTT (median over the loads)."""
    store = Store(r.out)
    try:
        runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "gquic" and not x.warmup]
    finally:
        store.close()
    rtts: set[int] = set()
    limits: set[str] = set()
    flights = []
    for x in runs:
        srv = (x.detail or {}).get("server") or {}
        rtts.update(v for v in srv.get("handshake_rtts") or [] if v is not None)
        if srv.get("window_limit_bytes") is not None:
            limits.add(
                f"{srv['window_limit_bytes'] / 1e6:.2f} MB ({','.join(srv['window_limit'])})"
            )
        f = flight_per_rtt(srv.get("flight"), rtt_ms)
        if f is not None:
            flights.append(f)
    return {
        "handshake_rtts": sorted(rtts),
        "window_limit": sorted(limits),
        "flight_per_rtt_bytes": statistics.median(flights) if flights else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--md", type=Path, help="write the table as Markdown here")
    ap.add_argument("--before-rev", default=BEFORE_REV, help="commit to build 'before' from")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/gquic_cap.py needs root", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="quicbed-gquic-cap-"))
    builds = {"before": str(build_before(a.before_rev, work / "before")), "after": None}
    tb = LocalTestbed("qbgcap")
    out = work / "results"
    res: dict[tuple[float, str, str], CellResult] = {}
    try:
        for rate in RATES:
            cond = make_condition(rate_mbit=rate, rtt_ms=RTT_MS)
            with shaped_link(tb, cond) as link:
                proven = prove(link, tcp_seconds=5, cc="cubic")
                for page in PAGES:
                    for build, bindir in builds.items():
                        if bindir:
                            os.environ["QUICBED_BIN_DIR"] = bindir
                        else:
                            os.environ.pop("QUICBED_BIN_DIR", None)
                        cfg = make_cell(condition=cond, page=page, runs=a.runs, warmup=1, arms=ARMS)
                        r = run_cell(cfg, out / build, testbed=tb, link=proven, traces="none")
                        if r.status != "done":
                            print(f"{rate:g} Mbit/s {page} {build}: {r.problem}", file=sys.stderr)
                            return 1
                        res[(rate, page, build)] = r
                        print(f"{rate:g} Mbit/s {page} {build}: done", file=sys.stderr)
    finally:
        os.environ.pop("QUICBED_BIN_DIR", None)
        tb.teardown()
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, kernel {platform.release()}: {RTT_MS:g} ms, no loss, "
        f"2-BDP queue, {a.runs} loads per arm (ABBA, after one warm-up each), Chromium 72 "
        f"for both arms, one shaped link per rate; before: the server built from "
        f"{a.before_rev[:7]}, after: build/bin.",
        "",
        "gquic vs h2 = (mean h2 - mean gquic) / mean gquic: positive when gquic is faster. "
        "Flight: the most the after build's server sent in one RTT (median over the loads), "
        "against the BDP.",
        "",
        "| rate | page | h2 before ms | gquic before ms | gquic vs h2 before | h2 after ms "
        "| gquic after ms | gquic vs h2 after | gquic after / before | handshake RTTs "
        "| window limit | flight / BDP | valid loads (before; after) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    record = []
    for rate in RATES:
        bdp = make_condition(rate_mbit=rate, rtt_ms=RTT_MS).bdp_bytes() or 0
        for page in PAGES:
            row: dict[str, Any] = {"rate_mbit": rate, "page": page}
            for build in builds:
                r = res[(rate, page, build)]
                (c,) = r.comparisons.values()
                sig = "" if c.significant else " n.s."
                row[build] = {
                    "h2": c.tcp.mean,
                    "gquic": c.quic.mean,
                    "diff": f"{c.pct_diff:+.1f} % (p {c.welch_p:.2g}{sig})"
                    if c.enough
                    else c.problem,
                    "valid": ", ".join(
                        f"{k} {v['valid']}/{v['measured']}" for k, v in r.verified.items()
                    ),
                }
            g = gquic_record(res[(rate, page, "after")], RTT_MS)
            row["after"].update(g)
            b, f = row["before"], row["after"]
            fl = g["flight_per_rtt_bytes"]
            flight = f"{fl / 1e3:.0f} / {bdp / 1e3:.0f} kB" if fl is not None else "-"
            lines.append(
                f"| {rate:g} Mbit/s | {page} | {b['h2']:.0f} | {b['gquic']:.0f} | {b['diff']} "
                f"| {f['h2']:.0f} | {f['gquic']:.0f} | {f['diff']} "
                f"| {f['gquic'] / b['gquic']:.2f} "
                f"| {', '.join(map(str, g['handshake_rtts'])) or '-'} "
                f"| {', '.join(g['window_limit']) or '-'} | {flight} "
                f"| {b['valid']}; {f['valid']} |"
            )
            record.append(row)
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    print(json.dumps({"results": str(out), "cells": record}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
