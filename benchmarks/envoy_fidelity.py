"""Which QUIC under loss and reordering: the study's (Google QUICHE via Envoy) against ours.

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/envoy_fidelity.py [--runs 10] [--pages 100kb,1mb]
        [--rates 10,100] [--md FILE]

The reference study ran Google QUICHE's quic_server (CUBIC, N = 2) and found QUIC well
ahead of TCP under 1 % loss and under its 50 ms jitter; quicbed's quic-go (N = 1) and
quiche did not reproduce it (issue 26). This measures, per scenario, rate and page, one
cell with h2 (Apache, TCP CUBIC), h3 (quic-go, CUBIC N = 1), h3-n2 (quic-go, N = 2),
h3-quiche (Cloudflare quiche, CUBIC) and h3-envoy (Google QUICHE through Envoy, CUBIC
N = 2), interleaved on one shaped link per condition, every load verified (protocol,
0-RTT and CC from the server side), and prints per arm the mean PLT, its sd, the valid
loads, the packets each QUIC server counted as lost or sent again per load (quic-go:
lost; quiche: retransmitted; Envoy: its streams' retransmitted packets) and the
difference against h2 with Welch's p. Scenarios: the study's loss grid (36 ms, 1 %
end to end), its reordering grid (112 ms, 50 ms step jitter) and, for contrast, the
same with per-packet reorder jitter. No threshold: the table is the result; a cell
that fails is a row saying why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed.link.proof import prove
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.run.cell import run_cell
from quicbed.spec.arms import ArmSettings
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

ARMS = ("h2", "h3", "h3-n2", "h3-quiche", "h3-envoy")
SETTINGS = {"h3-n2": ArmSettings(stack="quic-go", cubic_n=2)}
SCENARIOS: dict[str, dict[str, object]] = {
    "loss": {"rtt_ms": 36, "loss_pct": 1.0},
    "reordering (step)": {"rtt_ms": 112, "jitter_ms": 50, "jitter_kind": "step"},
    "reordering (reorder)": {"rtt_ms": 112, "jitter_ms": 50, "jitter_kind": "reorder"},
}


def resent(server: dict[str, Any]) -> int | None:
    """Packets a QUIC server counted as lost or sent again in one load (its own words)."""
    if "stream_retransmitted_packets" in server:
        return int(server["stream_retransmitted_packets"])
    stats = server.get("stats") or []
    if stats:
        s = stats[0]
        for key in ("lost", "retrans"):
            if key in s:
                return sum(int(x.get(key, 0)) for x in stats)
    return None


def arm_rows(store: Store, cell_id: str, attempt: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in store.runs(cell_id, attempt):
        if r.warmup:
            continue
        a = out.setdefault(r.arm, {"plt": [], "measured": 0, "resent": []})
        a["measured"] += 1
        if r.valid and r.plt_ms is not None:
            a["plt"].append(r.plt_ms)
            n = resent((r.detail or {}).get("server") or {})
            if n is not None:
                a["resent"].append(n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--pages", default="100kb,1mb")
    ap.add_argument("--rates", default="10,100")
    ap.add_argument("--md", type=Path, help="write the table as Markdown here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/envoy_fidelity.py needs root", file=sys.stderr)
        return 2
    pages = a.pages.split(",")
    rates = [float(x) for x in a.rates.split(",")]
    tb = LocalTestbed("qbenvoy")
    out = Path(tempfile.mkdtemp(prefix="quicbed-envoy-"))
    rows: list[dict[str, Any]] = []
    try:
        for scenario, cond_args in SCENARIOS.items():
            for rate in rates:
                cond = make_condition(rate_mbit=rate, **cond_args)
                with shaped_link(tb, cond) as link:
                    proven = prove(link, tcp_seconds=5, cc="cubic")
                    for page in pages:
                        cfg = make_cell(
                            condition=cond,
                            page=page,
                            runs=a.runs,
                            warmup=1,
                            arms=ARMS,
                            arm_settings=SETTINGS,
                        )
                        r = run_cell(cfg, out, testbed=tb, link=proven, traces="none")
                        store = Store(out)
                        arms = arm_rows(store, r.cell_id, r.attempt)
                        store.close()
                        diffs = {
                            c.quic.arm: (
                                f"{c.pct_diff:+.1f} % (p {c.welch_p:.2g}"
                                + ("" if c.significant else " n.s.")
                                + ")"
                                if c.enough
                                else c.problem
                            )
                            for c in r.comparisons.values()
                        }
                        rows.append(
                            {
                                "scenario": scenario,
                                "rate_mbit": rate,
                                "page": page,
                                "status": r.status,
                                "problem": r.problem,
                                "arms": arms,
                                "diffs": diffs,
                            }
                        )
                        print(f"{scenario} {rate:g} Mbit/s {page}: {r.status}", file=sys.stderr)
    finally:
        tb.teardown()
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, kernel {platform.release()}: {a.runs} loads per arm "
        "(ABBA, after one warm-up each), one shaped link per condition, every load "
        "verified (protocol, 0-RTT, CC from the server side).",
        "",
        "Per arm: mean PLT ms (sd) [valid/measured] {packets lost or resent per load, "
        "median}. Difference = (mean h2 - mean arm) / mean arm: positive when the QUIC "
        "arm is faster.",
        "",
        "| scenario | rate | page | "
        + " | ".join(ARMS)
        + " | "
        + " | ".join(f"{x} vs h2" for x in ARMS[1:])
        + " |",
        "|" + "---|" * (3 + 2 * len(ARMS) - 1),
    ]
    for row in rows:
        cells: list[str] = []
        for arm in ARMS:
            v = row["arms"].get(arm) or {"plt": [], "measured": 0, "resent": []}
            p = v["plt"]
            text = f"{statistics.mean(p):.0f} ({statistics.stdev(p):.0f})" if len(p) > 1 else "-"
            text += f" [{len(p)}/{v['measured']}]"
            if v["resent"]:
                text += f" {{{statistics.median(v['resent']):.0f}}}"
            cells.append(text)
        vs = [str(row["diffs"].get(x, row["problem"] or "-")) for x in ARMS[1:]]
        lines.append(
            f"| {row['scenario']} | {row['rate_mbit']:g} | {row['page']} | "
            + " | ".join(cells + vs)
            + " |"
        )
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    print(json.dumps({"results": str(out), "cells": rows}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
