"""h3-envoy with Envoy's QUICHE settings against the study's server's (issue 48, item 4).

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/envoy_settings.py [--spec FILE] [--out DIR]
        [--md FILE] [--tables-only]

Runs benchmarks/specs/envoy-settings-small.yaml (default): the reordering grid's step
jitter at 112 ms, 1 MB and 10 MB at 10 and 50 Mbit/s, h2 (Apache) against h3-envoy as
Envoy configures QUICHE (16 MiB stream and 24 MiB connection windows) and
h3-envoy-qs with the windows Chromium's quic_server, the study's server, advertises
(64 KiB and 1 MiB; docs/envoy-vs-quic-server.md), 10 loads + 1 warm-up per arm.

Prints per cell and arm: valid of the measured loads, PLT mean and standard deviation
(ms) over the valid loads, and the median per load of the packets Envoy counted as sent
again for the page's streams (its access log); then per cell each pair: the difference
of means in % (positive: the second arm faster) and Welch's p. The head gives the host's
steal and busy shares over the run and the wall time.
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

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "benchmarks" / "specs" / "envoy-settings-small.yaml"
ARM_HEAD = ["Mbit/s", "page", "arm", "valid", "PLT", "sd", "resent/load"]
PAIR_HEAD = ["Mbit/s", "page", "pair", "PLT diff %", "Welch p"]


def by_rate(cfg: CellConfig) -> tuple[Any, list[str]]:
    """The rate, then the page."""
    rate = cfg.condition.rate_mbit or 0
    return (rate, cfg.page), [f"{rate:g}", cfg.page]


def resent(runs: list[RunRow], arm: str) -> str:
    """Median per valid load of the packets the QUIC server sent again for the page's
    streams (Envoy's access log; "-" for TCP, whose retransmissions are the kernel's)."""
    got = [
        int(r.detail["server"]["stream_retransmitted_packets"])
        for r in runs
        if r.arm == arm
        and not r.warmup
        and r.valid
        and "stream_retransmitted_packets" in ((r.detail or {}).get("server") or {})
    ]
    return f"{statistics.median(got):.0f}" if got else "-"


def tables(root: Path) -> list[str]:
    arms = arm_rows(root, by_rate, resent)
    return [*_table(ARM_HEAD, arms), "", *_table(PAIR_HEAD, pair_rows(root, by_rate)), ""]


def main() -> int:
    return bench_main(__doc__ or "", "envoy_settings.py", SPEC, "qbenvs", tables)


if __name__ == "__main__":
    sys.exit(main())
