"""Visual progress per load (issue 40 item 4): Speed Index beside PLT, FCP and LCP, and
what capturing the frames costs.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/visual_progress.py [--out DIR] [--md FILE] [--tables-only]

Runs benchmarks/specs/visual-progress.yaml: the p25 and p50 page models over h2 (Apache)
and h3 (quic-go) at 10 Mbit/s and 36 ms, 0-RTT mode, in Chromium and Firefox, each
without and with ``visual`` (every load's frames captured and scored), 10 loads + 1
warm-up per arm.

Prints per cell and arm: the browser, page, capture, valid of the measured loads, PLT
mean and sd, mean FCP, LCP, Speed Index and visually complete over the valid loads, and
how many valid loads have a Speed Index ("scored"); then the capture's cost per browser,
page and arm: PLT without and with it, the difference in % and Welch's p, and the cell's
wall seconds per load without and with it; then per visual cell h2 against h3 (positive:
h3 faster) on PLT and Speed Index. The head gives the host's steal and busy shares over
the run (/proc/stat) and the wall time.
"""

from __future__ import annotations

import statistics
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from scipy import stats

from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.spec.cellconfig import CellConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from background_traffic import _cells, pair_rows
from real_pages import _mean_sd, _table, bench_main

SPEC = Path(__file__).resolve().parent / "specs" / "visual-progress.yaml"
ARM_HEAD = ["browser", "page", "frames", "arm", "valid", "PLT", "sd", "FCP", "LCP", "SI", "VC"]
ARM_HEAD.append("scored")
COST_HEAD = ["browser", "page", "arm", "PLT off", "PLT on", "diff %", "Welch p", "s/load off"]
COST_HEAD.append("s/load on")
PAIR_HEAD = ["browser", "page", "pair", "PLT diff %", "PLT Welch p", "SI diff %", "SI Welch p"]


def by_capture(cfg: CellConfig) -> tuple[Any, list[str]]:
    """Browser, page, then without before with the capture."""
    browser = cfg.browser or "chromium"
    return (browser, cfg.page, cfg.visual), [browser, cfg.page, "on" if cfg.visual else "off"]


def _valid(runs: list[RunRow], arm: str) -> list[RunRow]:
    return [r for r in runs if r.arm == arm and not r.warmup and r.valid]


def _mean(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{statistics.mean(got):.0f}" if got else "-"


def _wall_per_load(store: Store, cid: str, attempt: int, loads: int) -> float | None:
    att = store.attempt(cid)
    if not (att.started and att.finished) or not loads:
        return None
    took = datetime.fromisoformat(att.finished) - datetime.fromisoformat(att.started)
    return took.total_seconds() / loads


def tables(root: Path) -> list[str]:
    store = Store(root)
    arms, cost = [], []
    plts: dict[tuple[str, str, str], dict[bool, list[float]]] = {}
    walls: dict[tuple[str, str, str], dict[bool, float | None]] = {}
    try:
        for cid, attempt, cfg, head in _cells(store, by_capture):
            runs = store.runs(cid, attempt)
            wall = _wall_per_load(store, cid, attempt, len(runs))
            for arm in cfg.arms:
                measured = [r for r in runs if r.arm == arm and not r.warmup]
                ok = _valid(runs, arm)
                plt = [r.plt_ms for r in ok if r.plt_ms is not None]
                scored = sum(r.speed_index_ms is not None for r in ok)
                arms.append(
                    [
                        *head,
                        arm,
                        f"{len(plt)}/{len(measured)}",
                        *_mean_sd(plt),
                        _mean([r.fcp_ms for r in ok]),
                        _mean([r.lcp_ms for r in ok]),
                        _mean([r.speed_index_ms for r in ok]),
                        _mean([r.visual_complete_ms for r in ok]),
                        f"{scored}/{len(ok)}" if cfg.visual else "-",
                    ]
                )
                key = (head[0], cfg.page, arm)
                plts.setdefault(key, {})[cfg.visual] = plt
                walls.setdefault(key, {})[cfg.visual] = wall
    finally:
        store.close()
    for key, by in sorted(plts.items()):
        off, on = by.get(False, []), by.get(True, [])
        if len(off) < 2 or len(on) < 2:
            continue
        diff = 100 * (statistics.mean(on) - statistics.mean(off)) / statistics.mean(off)
        p = stats.ttest_ind(on, off, equal_var=False).pvalue
        w = walls[key]
        cost.append(
            [
                *key,
                f"{statistics.mean(off):.0f}",
                f"{statistics.mean(on):.0f}",
                f"{diff:+.1f}",
                f"{p:.2g}",
                *(f"{w[v]:.2f}" if w.get(v) else "-" for v in (False, True)),
            ]
        )
    pairs = [
        [r[0], r[1], *r[3:]]
        for r in pair_rows(root, by_capture, ("plt_ms", "speed_index_ms"))
        if r[2] == "on"
    ]
    return [
        *_table(ARM_HEAD, arms),
        "",
        *_table(COST_HEAD, cost),
        "",
        *_table(PAIR_HEAD, pairs),
        "",
    ]


def main() -> int:
    return bench_main(__doc__ or "", "visual_progress.py", SPEC, "qbvis", tables)


if __name__ == "__main__":
    sys.exit(main())
