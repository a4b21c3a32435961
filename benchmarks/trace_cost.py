"""Trace cost: what each capture level (quicbed.traces) adds to a page load.

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/trace_cost.py [--runs 10] [--md FILE]

Measures one cell (100 KB and 1 MB pages, 50 Mbit/s, 36 ms; 10 loads per arm) at
each level none, light and full on one shaped link, and reports per arm the median
PLT, the median harness overhead per load (time between consecutive loads beyond
the PLT, from the stored runs' timestamps: clearing caches, HAR, verification,
storing, and now tracing), the per-load wall time, and the trace bytes per load.

Target (issue 13): ``light`` adds at most 5 % to a load's wall time (PLT + overhead)
over ``none``; ``full`` is measured and stated. Exit 1 if the target is missed.
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

from quicbed.link.proof import prove
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.run.cell import run_cell
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

LEVELS = ("none", "light", "full")
TARGET_PCT = 5.0


def per_load(root: Path, cell_id: str, attempt: int) -> dict[str, dict[str, float]]:
    """Per arm: median PLT, median overhead, median wall per load, trace bytes per load."""
    store = Store(root)
    try:
        runs = [r for r in store.runs(cell_id, attempt) if r["plt_ms"] and not r["warmup"]]
    finally:
        store.close()
    out: dict[str, dict[str, float]] = {}
    stamps = {r["seq"]: datetime.fromisoformat(r["started"]).timestamp() for r in runs}
    for arm in sorted({r["arm"] for r in runs}):
        mine = [r for r in runs if r["arm"] == arm]
        walls, ovs, sizes = [], [], []
        for r in mine:
            nxt = stamps.get(r["seq"] + 1)
            if nxt is not None:
                wall = (nxt - stamps[r["seq"]]) * 1000
                walls.append(wall)
                ovs.append(wall - r["plt_ms"])
            files = ((r["detail"] or {}).get("traces") or {}).get("files") or {}
            sizes.append(
                sum(
                    (root / f).stat().st_size
                    for f in files.values()
                    if (root / f).exists() and not f.endswith("-keys.log")
                )
            )
        out[arm] = {
            "plt_ms": statistics.median(r["plt_ms"] for r in mine),
            "overhead_ms": statistics.median(ovs) if ovs else float("nan"),
            "wall_ms": statistics.median(walls) if walls else float("nan"),
            "trace_kib": statistics.mean(sizes) / 1024 if sizes else 0.0,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--md", type=Path, help="write the table as Markdown here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/trace_cost.py needs root", file=sys.stderr)
        return 2
    cond = make_condition(rate_mbit=50, rtt_ms=36)
    tb = LocalTestbed("qbtrace")
    out = Path(tempfile.mkdtemp(prefix="quicbed-traces-"))
    rows: list[tuple[str, str, str, dict[str, float]]] = []
    try:
        with shaped_link(tb, cond) as link:
            proven = prove(link, tcp_seconds=5, cc="cubic")
            for page in ("100kb", "1mb"):
                cfg = make_cell(condition=cond, page=page, runs=a.runs, warmup=1)
                for level in LEVELS:
                    r = run_cell(cfg, out / level, testbed=tb, link=proven, traces=level)
                    if r.status != "done":
                        print(f"{page} {level}: {r.problem}", file=sys.stderr)
                        return 1
                    for arm, v in per_load(out / level, r.cell_id, r.attempt).items():
                        rows.append((page, level, arm, v))
    finally:
        tb.teardown()
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, kernel {platform.release()}: 50 Mbit/s, 36 ms, "
        f"{a.runs} loads per arm and level, one shaped link.",
        "",
        "| page | level | arm | median PLT ms | overhead ms | wall per load ms "
        "| vs none | trace KiB per load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ok = True
    base = {(p, arm): v["wall_ms"] for p, lv, arm, v in rows if lv == "none"}
    for page, level, arm, v in rows:
        delta = (v["wall_ms"] / base[(page, arm)] - 1) * 100
        if level == "light" and delta > TARGET_PCT:
            ok = False
        lines.append(
            f"| {page} | {level} | {arm} | {v['plt_ms']:.1f} | {v['overhead_ms']:.0f} "
            f"| {v['wall_ms']:.0f} | {delta:+.1f} % | {v['trace_kib']:.0f} |"
        )
    lines += [
        "",
        f"Target: light adds at most {TARGET_PCT:.0f} % to a load's wall time: "
        + ("met" if ok else "MISSED"),
    ]
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
