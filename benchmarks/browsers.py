"""Two browsers on the demo grid: h2 vs h3 in Chromium and in Firefox, and h3 in both.

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/browsers.py [--md FILE] [--out DIR] [--tables-only]

(--tables-only: print the tables of a results folder already measured, e.g. after some
of its cells were measured again with `quicbed cell --from DIR --cell ID`, whose latest
attempt then counts.)

Runs benchmarks/specs/browsers.yaml (the demo grid, 10 and 50 Mbit/s x 5 KB, 100 KB
and 1 MB at 36 ms, and 5 KB at 10 Mbit/s and 112 ms; 10 loads + 1 warm-up per arm,
0-RTT mode, quicbed's own servers: Apache for h2, quic-go for h3) and prints, per cell
and arm, the browser and its build, the mean PLT and its standard deviation over the
valid measured loads, how many of the measured loads were valid, and two figures of
the harness:

- overhead per load: the wall time from the previous load's end (its row stored) to
  this load's, less this load's PLT: the driver's clearing (caches, connections; in
  Firefox the wait until nsIDashboard lists no connection), the navigation to
  about:blank, the HAR, the server facts, verification and storing (median);
- nav - onLoad: Navigation Timing's loadEventEnd less the HAR page's onLoad, the PLT's
  source (median): how far the browser's own navigation clock is from what quicbed
  calls the PLT. Chromium's onLoad (chrome-har-capturer) runs from the main request's
  Network.requestWillBeSent to Page.loadEventFired; Firefox's onLoad is
  loadEventStart itself, from the navigation's start (docs/browsers.md);
- html -> img: from the HTML's last byte to the image request's start, both from the
  HAR (median): the browser's own time to parse the page and ask for its image.

Then, per cell, the comparisons the report draws: h2 vs h3 in each browser, and h3 in
Chromium vs h3 in Firefox (the spec's named pair), with Welch's p.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from quicbed.report.build import build
from quicbed.results.store import Store
from quicbed.run.sweep import run_sweep
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec
from quicbed.testbed.local import LocalTestbed

SPEC = Path(__file__).resolve().parent / "specs" / "browsers.yaml"


def _ms(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp() * 1000


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f}" if xs else "-"


def html_to_image_ms(har_path: Path) -> float | None:
    """A two-entry page's time from the HTML's end to the image request's start."""
    with gzip.open(har_path) as f:
        entries = json.load(f)["log"]["entries"]
    if len(entries) != 2:
        return None
    start = [datetime.fromisoformat(e["startedDateTime"].replace("Z", "+00:00")) for e in entries]
    html_end = start[0].timestamp() * 1000 + entries[0]["time"]
    return start[1].timestamp() * 1000 - html_end


def arm_rows(root: Path) -> list[list[str]]:
    """One row per cell and arm, from the store alone."""
    store = Store(root)
    rows = []
    try:
        for cid, att in sorted(store.latest_attempts().items()):
            cfg = make_cell(**store.cell_config(cid))
            cond = cfg.condition
            comps = (att.provenance or {}).get("components") or {}
            runs = sorted(store.runs(cid, att.attempt), key=lambda r: r.seq)
            overhead: dict[str, list[float]] = {}
            for prev, cur in itertools.pairwise(runs):
                if cur.plt_ms is not None and not cur.warmup:
                    cycle = _ms(cur.started) - _ms(prev.started)
                    overhead.setdefault(cur.arm, []).append(cycle - cur.plt_ms)
            for a in cfg.resolved_arms():
                measured = [r for r in runs if r.arm == a.name and not r.warmup]
                valid = [r for r in measured if r.valid and r.plt_ms is not None]
                plts = [r.plt_ms for r in valid if r.plt_ms is not None]
                gap = [
                    r.nav_load_ms - r.onload_ms
                    for r in valid
                    if r.nav_load_ms is not None and r.onload_ms is not None
                ]
                parse = [
                    x
                    for r in valid
                    if r.har_path and (x := html_to_image_ms(root / r.har_path)) is not None
                ]
                build_name = (comps.get("browsers") or {}).get(a.name) or comps.get("browser")
                rows.append(
                    [
                        f"{cond.rate_mbit:g}",
                        f"{cond.rtt():g}",
                        cfg.page,
                        str(build_name or a.browser),
                        a.name,
                        f"{len(valid)}/{len(measured)}",
                        f"{statistics.mean(plts):.1f}" if plts else "-",
                        f"{statistics.stdev(plts):.1f}" if len(plts) > 1 else "-",
                        _med(overhead.get(a.name, [])),
                        _med(gap),
                        _med(parse),
                    ]
                )
    finally:
        store.close()
    return rows


def pair_rows(root: Path) -> list[list[str]]:
    """Each comparison of the report's table (h2/h3 per browser, h3/h3-ff)."""
    report = build(root)
    out = []
    for r in report.rows:
        if not r.pair:
            continue
        out.append(
            [
                f"{r.rate_mbit:g}",
                f"{r.rtt_ms:g}",
                r.page,
                f"{r.ref} in {r.ref_browser} vs {r.cand} in {r.cand_browser}",
                f"{r.pct_diff:+.1f}" if r.pct_diff is not None else "-",
                f"{r.welch_p:.2g}" if r.welch_p is not None else "-",
            ]
        )
    return out


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", type=Path, help="write the tables as Markdown here")
    ap.add_argument("--out", type=Path, help="results folder (default: a new temporary one)")
    ap.add_argument("--tables-only", action="store_true", help="only the tables of --out")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/browsers.py needs root", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="quicbed-browsers-")) / "r"
    failed = 0
    if a.tables_only:
        head = f"Tables of {out}, printed {datetime.now(UTC):%Y-%m-%d %H:%M} UTC."
    else:
        spec = load_spec(SPEC)
        tb = LocalTestbed("qbbrow")
        t0 = time.monotonic()
        try:
            outcome = run_sweep(spec, out, testbed=tb, resume=out.exists())
        finally:
            tb.teardown()
        wall = time.monotonic() - t0
        failed = outcome.failed
        head = (
            f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
            f"{os.cpu_count()} cores, kernel {platform.release()}, with nothing else "
            f"running; {outcome.done} cells done, {outcome.failed} failed, "
            f"{wall / 60:.0f} min (results: {out})."
        )
    lines = [
        head,
        "",
        "PLT in ms over the valid measured loads (10 per arm + 1 warm-up, 0-RTT mode); "
        "overhead per load, nav - onLoad and html -> img as medians, in ms (see the script's "
        "docstring).",
        "",
        *_table(
            [
                "Mbit/s",
                "RTT ms",
                "page",
                "browser",
                "arm",
                "valid",
                "mean PLT",
                "sd",
                "overhead/load",
                "nav - onLoad",
                "html -> img",
            ],
            arm_rows(out),
        ),
        "",
        "Differences: (mean reference - mean candidate) / mean candidate x 100, positive when "
        "the candidate is faster; Welch's p.",
        "",
        *_table(
            ["Mbit/s", "RTT ms", "page", "pair", "diff %", "Welch p"],
            pair_rows(out),
        ),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if a.md:
        a.md.write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
