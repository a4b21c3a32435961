"""Origins at their own distance (issue 40 item 3): a replayed page whose origins are
at the link's RTT against the same page with every origin 40 ms farther.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/origin_distance.py [--out DIR] [--md FILE] [--tables-only]

Runs benchmarks/specs/origin-distance.yaml: the p50 page model (24 origins, 66
requests) over h2 (Apache), h3 (quic-go) and h3-envoy (Google QUICHE through Envoy)
at 10 Mbit/s and 36 ms, with ``origin_rtt`` none and 40 (every origin's address 40 ms
farther, after the bottleneck), in 1-RTT and 0-RTT mode, 10 loads + 1 warm-up per arm.

Prints per cell and arm: the mode, the origins' extra RTT, valid of the measured
loads, mean and standard deviation of PLT over the valid loads and their mean LCP
(ms); then per cell h2 against each h3 arm: the difference of means in % (positive:
the h3 arm is faster) and Welch's p, for PLT and LCP. The head gives the host's steal
and busy shares over the run (/proc/stat) and the wall time.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from quicbed.results.rows import RunRow
from quicbed.spec.cellconfig import CellConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from background_traffic import arm_rows, pair_rows
from real_pages import _table, bench_main

SPEC = Path(__file__).resolve().parent / "specs" / "origin-distance.yaml"
ARM_HEAD = ["mode", "origins", "arm", "valid", "PLT", "sd", "LCP"]
PAIR_HEAD = ["mode", "origins", "pair", "PLT diff %", "PLT Welch p", "LCP diff %", "LCP Welch p"]


def by_origins(cfg: CellConfig) -> tuple[Any, list[str]]:
    """The mode, then the origins at the link's RTT before the farther ones."""
    extra = cfg.origin_rtt
    return (cfg.mode, extra is not None, extra or ""), [
        cfg.mode,
        f"+{extra} ms" if extra else "link's RTT",
    ]


def lcp(runs: list[RunRow], arm: str) -> str:
    """Mean LCP (ms) of the arm's valid measured loads."""
    got = [r.lcp_ms for r in runs if r.arm == arm and not r.warmup and r.valid and r.lcp_ms]
    return f"{statistics.mean(got):.0f}" if got else "-"


def tables(root: Path) -> list[str]:
    arms = arm_rows(root, by_origins, lcp)
    pairs = pair_rows(root, by_origins, ("plt_ms", "lcp_ms"))
    return [*_table(ARM_HEAD, arms), "", *_table(PAIR_HEAD, pairs), ""]


def main() -> int:
    return bench_main(__doc__ or "", "origin_distance.py", SPEC, "qbod", tables)


if __name__ == "__main__":
    sys.exit(main())
