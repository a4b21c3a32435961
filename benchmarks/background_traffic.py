"""Page loads beside background traffic (issue 41): PLT per arm with and without it.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/background_traffic.py [--spec FILE] [--out DIR]
        [--md FILE] [--tables-only]

Runs benchmarks/specs/cross-traffic-small.yaml (default; sweeps/cross-traffic.yaml is
the whole preset): pages at 10 and 50 Mbit/s, 36 ms, each beside no flow, a CUBIC
download, a BBR download (its own socket's CC; the page's TCP stays CUBIC) and a
video-like flow (625 KB every 2 s), h2 against h3, 10 loads + 1 warm-up per arm.

Prints first, per rate, background and pair, how many of the pages each side loaded
significantly faster (Welch's test at alpha 0.01, the presets'; "neither": no
significant difference, or too few valid loads to test); then per cell and arm: valid
of the measured loads, PLT mean and standard deviation (ms) over the valid loads, and
the background flows' share of the link over those loads (mean of each load's summed
share); then per cell h2 against h3: the difference of means in % (positive: h3
faster) and Welch's p. The head gives the host's steal and busy shares over the run
(/proc/stat) and the wall time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quicbed.analysis.cells import compare_cell
from quicbed.analysis.stats import Comparison
from quicbed.results.linkload import background_share
from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.spec.background import background_text
from quicbed.spec.cellconfig import CellConfig, make_cell

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from real_pages import _mean_sd, _table, bench_main

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "benchmarks" / "specs" / "cross-traffic-small.yaml"
ARM_HEAD = ["Mbit/s", "page", "background", "arm", "valid", "PLT", "sd", "bg share %"]
PAIR_HEAD = ["Mbit/s", "page", "background", "pair", "PLT diff %", "Welch p"]
TALLY_HEAD = ["Mbit/s", "background", "pair", "pages", "h3 faster", "h2 faster", "neither"]


#: a cell's sort key and the head of its rows (its condition as the tables show it)
Describe = Callable[[CellConfig], tuple[Any, list[str]]]
#: an arm's last column from its cell's runs
Extra = Callable[[list[RunRow], str], str]


def _by_background(cfg: CellConfig) -> tuple[Any, list[str]]:
    """Rate, page and background, the spec's backgrounds in its order."""
    bg = background_text(cfg.background)
    order = ("none", "bulk:tcp:cubic", "bulk:tcp:bbr")
    key = (cfg.condition.rate_mbit or 0, cfg.page, order.index(bg) if bg in order else 9)
    return key, [f"{cfg.condition.rate_mbit:g}", cfg.page, bg]


def _share(runs: list[RunRow], arm: str) -> str:
    share = background_share(runs, arm)
    return f"{100 * share:.0f}" if share is not None else "-"


def _cells(store: Store, describe: Describe) -> list[tuple[str, int, CellConfig, list[str]]]:
    """The latest attempts in ``describe``'s order, each with its head."""
    out = []
    for cid, att in store.latest_attempts().items():
        cfg = make_cell(**store.cell_config(cid))
        key, head = describe(cfg)
        out.append((key, (cid, att.attempt, cfg, head)))
    return [cell for _, cell in sorted(out, key=lambda x: x[0])]


def arm_rows(
    root: Path, describe: Describe = _by_background, extra: Extra = _share
) -> list[list[str]]:
    """Per cell and arm: valid of the measured loads, PLT mean and sd, ``extra``."""
    store = Store(root)
    rows = []
    try:
        for cid, attempt, cfg, head in _cells(store, describe):
            runs = store.runs(cid, attempt)
            for arm in cfg.arms:
                measured = [r for r in runs if r.arm == arm and not r.warmup]
                plt = [r.plt_ms for r in measured if r.valid and r.plt_ms is not None]
                valid = f"{len(plt)}/{len(measured)}"
                rows.append([*head, arm, valid, *_mean_sd(plt), extra(runs, arm)])
    finally:
        store.close()
    return rows


#: per cell, its head and, per metric, its comparisons by pair
Compared = list[tuple[list[str], dict[str, dict[str, Comparison]]]]


def compared(
    root: Path, describe: Describe = _by_background, metrics: tuple[str, ...] = ("plt_ms",)
) -> Compared:
    """Every cell's comparisons for each of ``metrics``, in ``describe``'s order: worked
    out once for the tables that show them."""
    store = Store(root)
    try:
        return [
            (head, {m: compare_cell(store, cid, attempt, cfg, metric=m) for m in metrics})
            for cid, attempt, cfg, head in _cells(store, describe)
        ]
    finally:
        store.close()


def pair_rows(
    root: Path, describe: Describe = _by_background, metrics: tuple[str, ...] = ("plt_ms",)
) -> list[list[str]]:
    """Per cell and pair, for each of ``metrics``: the difference of means (%, positive:
    the second faster) and Welch's p."""
    return table_rows(compared(root, describe, metrics), metrics)


def table_rows(cells: Compared, metrics: tuple[str, ...] = ("plt_ms",)) -> list[list[str]]:
    """``pair_rows`` of comparisons already worked out (``compared``)."""
    out = []
    for head, by in cells:
        for pair in by[metrics[0]]:
            row = [*head, pair]
            for m in metrics:
                c = by[m][pair]
                row.append(f"{c.pct_diff:+.1f}" if c.pct_diff is not None else "-")
                row.append(f"{c.welch_p:.2g}" if c.welch_p is not None else "-")
            out.append(row)
    return out


def tally_rows(
    cells: Compared, group: Callable[[list[str]], tuple[str, ...]] = lambda h: (h[0], h[2])
) -> list[list[str]]:
    """Per group of cells (``group`` of a cell's head: by default its rate and background)
    and pair, over the pages: how many cells the pair's h3 stack loaded faster, how many
    h2 did, and how many neither (no significant difference, or too few valid loads to
    test), by Welch's test at alpha 0.01 (the presets'); a whole preset's answer in a few
    rows. ``cells``: PLT comparisons (``compared``)."""
    counts: dict[tuple[str, ...], list[int]] = {}
    for head, by in cells:
        for pair, c in by["plt_ms"].items():
            n = counts.setdefault((*group(head), pair), [0, 0, 0, 0])
            n[0] += 1
            if c.significant and c.pct_diff is not None:
                n[1 if c.pct_diff > 0 else 2] += 1
            else:
                n[3] += 1
    return [[*key, *(str(x) for x in n)] for key, n in counts.items()]


def tables(root: Path) -> list[str]:
    cells = compared(root)
    return [
        *_table(TALLY_HEAD, tally_rows(cells)),
        "",
        *_table(ARM_HEAD, arm_rows(root)),
        "",
        *_table(PAIR_HEAD, table_rows(cells)),
        "",
    ]


def main() -> int:
    return bench_main(__doc__ or "", "background_traffic.py", SPEC, "qbbg", tables)


if __name__ == "__main__":
    sys.exit(main())
