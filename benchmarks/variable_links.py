"""Page loads over time-varying links (issue 41): PLT per arm per trace.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/variable_links.py [--spec FILE] [--out DIR]
        [--md FILE] [--tables-only]

Runs benchmarks/specs/variable-links-small.yaml (default; sweeps/variable-links.yaml is
the whole preset): two pages at 36 ms over the generated LTE, LTE-with-outages and
Wi-Fi traces, a 50/5 Mbit/s step schedule, and constant 5 and 27 Mbit/s links (the
traces' mean rates), h2 against h3, 10 loads + 1 warm-up per arm.

Prints per cell and arm: valid of the measured loads, PLT mean and standard deviation
(ms) over the valid loads, and the share of the trace's downlink bytes the loads used
(mean over the valid loads of each load's used_pct; "-" on a constant link); then per
cell h2 against h3: the difference of means in % (positive: h3 faster) and Welch's p.
It opens with a tally per link and pair over the pages: where h3 was faster, where h2
was, and where neither (Welch, alpha 0.01).
The head gives the host's steal and busy shares over the run and the wall time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from quicbed.results.rows import RunRow
from quicbed.spec.cellconfig import CellConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from background_traffic import arm_rows, compared, table_rows, tally_rows
from real_pages import _table, bench_main

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "benchmarks" / "specs" / "variable-links-small.yaml"
ARM_HEAD = ["link", "page", "arm", "valid", "PLT", "sd", "trace used %"]
PAIR_HEAD = ["link", "page", "pair", "PLT diff %", "Welch p"]
TALLY_HEAD = ["link", "pair", "pages", "h3 faster", "h2 faster", "neither"]


def by_link(cfg: CellConfig) -> tuple[Any, list[str]]:
    """The link (constant rates first, then traces and schedules by name) and the page."""
    c = cfg.condition
    return (c.varying() is not None, c.mean_rate_mbit() or 0, c.rate_label(), cfg.page), [
        c.rate_label(),
        cfg.page,
    ]


def used(runs: list[RunRow], arm: str) -> str:
    """Mean share (%) of the trace's downlink bytes the arm's valid loads carried."""
    got = []
    for r in runs:
        if r.arm != arm or r.warmup or not r.valid:
            continue
        cap = (((r.detail or {}).get("link") or {}).get("load") or {}).get("directions", {})
        pct = (cap.get("down") or {}).get("capacity", {}).get("used_pct")
        if pct is not None:
            got.append(pct)
    return f"{sum(got) / len(got):.0f}" if got else "-"


def tables(root: Path) -> list[str]:
    cells = compared(root, by_link)
    return [
        *_table(TALLY_HEAD, tally_rows(cells, lambda head: (head[0],))),
        "",
        *_table(ARM_HEAD, arm_rows(root, by_link, used)),
        "",
        *_table(PAIR_HEAD, table_rows(cells)),
        "",
    ]


def main() -> int:
    return bench_main(__doc__ or "", "variable_links.py", SPEC, "qbvl", tables)


if __name__ == "__main__":
    sys.exit(main())
