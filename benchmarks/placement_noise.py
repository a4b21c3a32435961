"""Page-load noise with and without role placement (issue 27, item 8).

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/placement_noise.py [--pages 5kb,1mb] [--rate 10]
        [--rtt 36] [--runs 20] [--rounds 2] [--placement split] [--json FILE]

Noise is a cost paid in runs: a cell's PLT sd decides how many loads a difference
needs. Here the 5 KB cell at 36 ms has sd 2-4 ms per arm, against 1.8-2.6 ms in the
reference study on Emulab, where the link emulator has a node of its own. Placement
pins the roles' control groups to CPUs (quicbed.roles.cpuaccounting, ``--placement``):
``split`` puts the link emulator on one core and server and browser on the other.

Both in one run, on one testbed: per round, for each page, one cell pinned and one
not, the order of the two alternating from round to round (drift hits both), every
cell an ordinary measured cell (receipt, 1 warm-up, ``--runs`` loads per arm, h2 and
h3 interleaved). Prints per page, placement and arm: valid n, mean, sd and median PLT;
per page and arm, Levene's test of the two placements' variances (Brown-Forsythe,
median-centred) and Welch's test of their means: placement may only become the
default if it is quieter without moving the mean.
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

from scipy import stats

from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.run.cell import run_cell
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed


def plts(out: Path, cell_id: str, attempt: int) -> dict[str, list[float]]:
    store = Store(out)
    try:
        got: dict[str, list[float]] = {}
        for r in store.runs(cell_id, attempt):
            if r.valid and not r.warmup and r.plt_ms is not None:
                got.setdefault(r.arm, []).append(r.plt_ms)
        return got
    finally:
        store.close()


def compare_settings(
    samples: dict[tuple[str, str, str], list[float]], pages: list[str], a: str, b: str
) -> list[dict[str, Any]]:
    """Per page and arm, setting ``a``'s PLTs against ``b``'s (``samples`` keyed by page,
    setting, arm): printed as a table of sds with Levene's test (Brown-Forsythe,
    median-centred) and of means with Welch's; returned as data. A setting may become a
    default only if it is quieter without moving the mean (also benchmarks/noisy_host.py)."""
    print(
        f"\n| page | arm | sd {a} | sd {b} | Levene p | mean {a} | mean {b} | Welch p |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    verdicts: list[dict[str, Any]] = []
    for page in pages:
        for arm in sorted({k[2] for k in samples if k[0] == page}):
            x, y = samples.get((page, a, arm), []), samples.get((page, b, arm), [])
            if len(x) < 3 or len(y) < 3:
                continue
            lev = stats.levene(x, y, center="median").pvalue
            wel = stats.ttest_ind(x, y, equal_var=False).pvalue
            print(
                f"| {page} | {arm} | {statistics.stdev(x):.2f} | {statistics.stdev(y):.2f} | "
                f"{lev:.3g} | {statistics.fmean(x):.1f} | {statistics.fmean(y):.1f} | {wel:.3g} |"
            )
            verdicts.append({"page": page, "arm": arm, "levene_p": lev, "welch_p": wel})
    return verdicts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default="5kb,1mb")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--rtt", type=float, default=36.0)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--placement", default="split", help="the placement against none")
    ap.add_argument("--json", type=Path, help="write every PLT here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/placement_noise.py needs root", file=sys.stderr)
        return 2
    tb = LocalTestbed("qbplace")
    out = Path(tempfile.mkdtemp(prefix="quicbed-placement-"))
    cond = make_condition(rate_mbit=a.rate, rtt_ms=a.rtt)
    samples: dict[tuple[str, str, str], list[float]] = {}
    load = os.getloadavg()[0]
    placements = ("none", a.placement)
    for rnd in range(a.rounds):
        for page in a.pages.split(","):
            cfg = make_cell(condition=cond, page=page, runs=a.runs, warmup=1)
            order = placements if rnd % 2 == 0 else placements[::-1]
            for placement in order:
                tb.cpu.place(placement)
                folder = out / f"{page}-{placement}"
                for _ in range(3):  # a receipt spoiled by a busy machine: measured again
                    r = run_cell(cfg, folder, testbed=tb, receipt_tcp_seconds=2)
                    if r.status == "done" or not r.link_failed:
                        break
                print(
                    f"round {rnd}, {page}, placement {placement}: {r.status} {r.problem}",
                    file=sys.stderr,
                )
                for arm, v in plts(folder, r.cell_id, r.attempt).items():
                    samples.setdefault((page, placement, arm), []).extend(v)
    tb.cpu.place("none")
    load = max(load, os.getloadavg()[0])
    print(
        f"\nPLT with and without placement {a.placement!r}: {a.rate:g} Mbit/s, {a.rtt:g} ms, "
        f"{a.rounds} rounds x {a.runs} loads per arm and placement; "
        f"{datetime.now(UTC):%Y-%m-%d}, {platform.node()}, {os.cpu_count()} CPUs, "
        f"load average up to {load:.1f}; results in {out}\n"
    )
    print(
        "| page | placement | arm | n | mean ms | sd ms | median ms |\n"
        "|---|---|---|---|---|---|---|"
    )
    for (page, placement, arm), v in sorted(samples.items()):
        print(
            f"| {page} | {placement} | {arm} | {len(v)} | {statistics.fmean(v):.1f} | "
            f"{statistics.stdev(v):.2f} | {statistics.median(v):.1f} |"
        )
    verdicts = compare_settings(samples, a.pages.split(","), "none", a.placement)
    if a.json:
        a.json.write_text(
            json.dumps({"|".join(k): v for k, v in samples.items()} | {"tests": verdicts})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
