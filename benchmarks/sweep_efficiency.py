"""Sweep efficiency: how much of a sweep's wall time is page loading.

Run as root after `make setup`:  .venv/bin/python benchmarks/sweep_efficiency.py [--md FILE]

Runs a sweep spec (default sweeps/demo.yaml) into a fresh folder and reports the sum
of measured PLTs over the sweep's wall time, and the time per load beyond its PLT
(browser and bookkeeping overhead: clearing caches, closing connections, HAR
building, verification, storing), from the stored runs' timestamps. Target: overhead
per load <= 250 ms median. Also builds the report, so the folder shows what a user
gets.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from quicbed.report import build
from quicbed.spec import load_spec
from quicbed.store import Store
from quicbed.sweep import run_sweep

TARGET_MS = 250.0


def overheads(root: Path) -> tuple[list[float], float]:
    """(per-load overhead in ms, sum of all PLTs in s) from the stored runs."""
    store = Store(root)
    out: list[float] = []
    total_plt = 0.0
    try:
        for cid, att in store.latest_attempts().items():
            runs = [r for r in store.runs(cid, att["attempt"]) if r["plt_ms"] is not None]
            total_plt += sum(r["plt_ms"] for r in runs) / 1000
            stamps = [datetime.fromisoformat(r["started"]).timestamp() for r in runs]
            for prev, cur, r in zip(stamps, stamps[1:], runs[1:], strict=False):
                out.append((cur - prev) * 1000 - r["plt_ms"])
    finally:
        store.close()
    return out, total_plt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=Path("sweeps/demo.yaml"))
    ap.add_argument("--out", type=Path, help="results folder (default: a new temporary one)")
    ap.add_argument("--md", type=Path, help="write the result as Markdown here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/sweep_efficiency.py needs root", file=sys.stderr)
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="quicbed-sweep-")) / "results"
    spec = load_spec(a.spec)
    t0 = time.monotonic()
    outcome = run_sweep(spec, out, prefix="qbsweep")
    wall = time.monotonic() - t0
    report = build(out)
    ov, plt_s = overheads(out)
    med = statistics.median(ov) if ov else float("nan")
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, kernel {platform.release()}: `{a.spec}`, "
        f"{outcome.done} cells done, {outcome.failed} failed.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| wall time | {wall:.0f} s |",
        f"| sum of measured PLTs | {plt_s:.1f} s |",
        f"| efficiency (PLT / wall) | {plt_s / wall * 100:.1f} % |",
        f"| loads | {len(ov) + len(outcome.results)} |",
        f"| overhead per load, median | {med:.0f} ms |",
        f"| overhead per load, p90 | {sorted(ov)[int(0.9 * len(ov))] if ov else 0:.0f} ms |",
        "",
        f"Target: overhead per load <= {TARGET_MS:.0f} ms median: "
        + ("met" if med <= TARGET_MS else "MISSED"),
    ]
    text = "\n".join(lines)
    print(text)
    print(f"Report: {report.out / 'index.html'}")
    if a.md:
        a.md.write_text(text + "\n")
    return 0 if med <= TARGET_MS and not outcome.failed else 1


if __name__ == "__main__":
    sys.exit(main())
