"""QUIC stacks and CUBIC's N: does N explain the reference study's 10 MB results?

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/quic_stacks.py [--runs 10] [--md FILE]

The reference study has QUIC faster than TCP for 10 MB at 50 and 100 Mbit/s, 36 ms
(+7.5 % and +11.7 %, significant); quicbed with quic-go (CUBIC, N = 1) had it 3-4 %
slower. Google's QUIC, which the study ran, emulates N = 2 connections. This
measures, per rate and page (1 MB, 10 MB), one cell with the arms h2 (Apache, TCP
CUBIC), h3-reno (quic-go as released: NewReno, what quicbed's h3 ran before the
patch), h3 (quic-go CUBIC, N = 1), h3-n2 (N = 2) and h3-quiche (quiche, CUBIC),
interleaved (ABBA) on one shaped link per rate, every load verified (protocol,
0-RTT, CC and N from the server side), and prints the mean PLT per arm and each
QUIC arm's difference against h2 with Welch's p. No threshold: the table is the
result; it exits 1 only if a cell fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from quicbed.link.proof import prove
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.run.cell import run_cell
from quicbed.spec.arms import ArmSettings
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

ARMS = ("h2", "h3-reno", "h3", "h3-n2", "h3-quiche")
SETTINGS = {
    "h3-reno": ArmSettings(stack="quic-go", cc="reno"),
    "h3-n2": ArmSettings(stack="quic-go", cubic_n=2),
}
#: the reference study's (TCP - QUIC) / QUIC for these cells, % (methodology.md)
REFERENCE = {(50.0, "10mb"): "+7.5 (sig.)", (100.0, "10mb"): "+11.7 (sig.)"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--md", type=Path, help="write the table as Markdown here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/quic_stacks.py needs root", file=sys.stderr)
        return 2
    tb = LocalTestbed("qbstack")
    out = Path(tempfile.mkdtemp(prefix="quicbed-stacks-"))
    rows = []
    try:
        for rate in (50.0, 100.0):
            cond = make_condition(rate_mbit=rate, rtt_ms=36)
            with shaped_link(tb, cond) as link:
                proven = prove(link, tcp_seconds=5, cc="cubic")
                for page in ("1mb", "10mb"):
                    cfg = make_cell(
                        condition=cond,
                        page=page,
                        runs=a.runs,
                        warmup=1,
                        arms=ARMS,
                        arm_settings=SETTINGS,
                    )
                    r = run_cell(cfg, out, testbed=tb, link=proven, traces="none")
                    if r.status != "done":
                        print(f"{rate:g} Mbit/s {page}: {r.problem}", file=sys.stderr)
                        return 1
                    rows.append((rate, page, r))
                    print(f"{rate:g} Mbit/s {page}: done", file=sys.stderr)
    finally:
        tb.teardown()
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, kernel {platform.release()}: 36 ms, {a.runs} loads per "
        "arm (ABBA, after one warm-up each), one shaped link per rate, every load verified "
        "(protocol, 0-RTT, CC and CUBIC N from the server side).",
        "",
        "Difference = (mean h2 - mean arm) / mean arm: positive when the QUIC arm is faster.",
        "",
        "| rate | page | h2 ms | h3-reno ms | h3 (N=1) ms | h3-n2 (N=2) ms | h3-quiche ms "
        "| h3-reno vs h2 | h3 vs h2 | h3-n2 vs h2 | h3-quiche vs h2 | reference QUIC vs TCP "
        "| valid loads |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    record = []
    for rate, page, r in rows:
        means, diffs = {}, {}
        for c in r.comparisons.values():
            means[c.tcp.arm], means[c.quic.arm] = c.tcp.mean, c.quic.mean
            sig = "" if c.significant else " n.s."
            diffs[c.quic.arm] = (
                f"{c.pct_diff:+.1f} % (p {c.welch_p:.2g}{sig})" if c.enough else c.problem
            )
        valid = ", ".join(f"{k} {v['valid']}/{v['measured']}" for k, v in r.verified.items())
        cells = " | ".join(f"{means.get(arm) or float('nan'):.0f}" for arm in ARMS)
        lines.append(
            f"| {rate:g} Mbit/s | {page} | {cells} | {diffs.get('h3-reno')} "
            f"| {diffs.get('h3')} "
            f"| {diffs.get('h3-n2')} | {diffs.get('h3-quiche')} "
            f"| {REFERENCE.get((rate, page), '-')} | {valid} |"
        )
        record.append(
            {
                "rate_mbit": rate,
                "page": page,
                "means_ms": means,
                "diffs": diffs,
                "verified": r.verified,
            }
        )
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    print(json.dumps({"results": str(out), "cells": record}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
