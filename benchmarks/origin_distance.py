"""Origins at their own distance (issue 40 item 3): a replayed page whose origins are
at the link's RTT against the same page with every origin 40 ms farther.

Run as root after `make setup-all`, with nothing else running on the machine:

    .venv/bin/python benchmarks/origin_distance.py [--out DIR] [--md FILE] [--tables-only]

Runs benchmarks/specs/origin-distance.yaml: the p50 page model (24 origins, 66
requests) over h2 (Apache), h3 (quic-go) and h3-envoy (Google QUICHE through Envoy)
at 10 Mbit/s and 36 ms, with ``origin_rtt`` none and 40 (every origin's address 40 ms
farther, after the bottleneck), in 1-RTT and 0-RTT mode, 10 loads + 1 warm-up per arm.

Prints per cell and arm: the mode, the origins' extra RTT, valid of the measured
loads, and mean and standard deviation of PLT and LCP over the valid loads (ms); then
per cell h2 against each h3 arm: the difference of means in % (positive: the h3 arm
is faster) and Welch's p, for PLT and LCP. The head gives the host's steal and busy
shares over the run (/proc/stat) and the wall time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from quicbed.analysis.cells import compare_cell
from quicbed.results.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported
from real_pages import _cells, _mean_sd, _table, bench_main

SPEC = Path(__file__).resolve().parent / "specs" / "origin-distance.yaml"
ARM_HEAD = ["mode", "origins", "arm", "valid", "PLT", "sd", "LCP", "sd"]
PAIR_HEAD = ["mode", "origins", "pair", "PLT diff %", "PLT Welch p", "LCP diff %", "LCP Welch p"]


def _where(cfg: object) -> list[str]:
    extra = getattr(cfg, "origin_rtt", None)
    return [str(getattr(cfg, "mode", "")), f"+{extra} ms" if extra else "link's RTT"]


def tables(root: Path) -> list[str]:
    store = Store(root)
    arms, pairs = [], []
    try:
        cells = sorted(_cells(store), key=lambda c: (c[2].mode, c[2].origin_rtt or ""))
        for cid, attempt, cfg, _ in cells:
            runs = store.runs(cid, attempt)
            for a in cfg.resolved_arms():
                measured = [r for r in runs if r.arm == a.name and not r.warmup]
                row = [*_where(cfg), a.name, f"{sum(r.valid for r in measured)}/{len(measured)}"]
                for metric in ("plt_ms", "lcp_ms"):
                    row += _mean_sd(store.values(cid, attempt, a.name, metric))
                arms.append(row)
            by = {m: compare_cell(store, cid, attempt, cfg, metric=m) for m in ("plt_ms", "lcp_ms")}
            for pair in by["plt_ms"]:
                row = [*_where(cfg), pair]
                for m in ("plt_ms", "lcp_ms"):
                    cmp = by[m][pair]
                    row.append(f"{cmp.pct_diff:+.1f}" if cmp.pct_diff is not None else "-")
                    row.append(f"{cmp.welch_p:.2g}" if cmp.welch_p is not None else "-")
                pairs.append(row)
    finally:
        store.close()
    return [*_table(ARM_HEAD, arms), "", *_table(PAIR_HEAD, pairs), ""]


def main() -> int:
    return bench_main(__doc__ or "", "origin_distance.py", SPEC, "qbod", tables)


if __name__ == "__main__":
    sys.exit(main())
