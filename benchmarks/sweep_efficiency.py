"""Sweep efficiency: how much of a sweep's wall time is page loading.

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/sweep_efficiency.py [--spec FILE ...] [--md FILE]

Runs each sweep spec (default: sweeps/demo.yaml and the 60-cell baseline + latency
sweep benchmarks/specs/baseline-latency-60.yaml) into a fresh folder and reports the
sum of measured PLTs over the sweep's wall time, the time spent in full receipts
(one per link condition) and in spot checks, and the time per load beyond its PLT
(browser and bookkeeping overhead: clearing caches, closing connections, HAR
building, verification, storing), from the stored runs' timestamps.

Targets (issue 12): PLT share >= 60 % on the 60-cell sweep; the demo's at least
doubled from the 14.6 % measured before receipts were shared (>= 29.2 %); overhead
per load <= 250 ms median. Exit 1 if a target is missed or a cell failed.
"""

from __future__ import annotations

import argparse
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
from quicbed.spec.sweepspec import load_spec, plan
from quicbed.testbed.local import LocalTestbed

OVERHEAD_TARGET_MS = 250.0
#: PLT share of wall time per spec file name, in %
SHARE_TARGETS = {"demo.yaml": 2 * 14.6, "baseline-latency-60.yaml": 60.0}
DEFAULT_SPECS = [Path("sweeps/demo.yaml"), Path("benchmarks/specs/baseline-latency-60.yaml")]


def figures(root: Path) -> dict[str, float | list[float]]:
    """Per-load overheads (ms), the sum of PLTs, receipt and spot-check seconds."""
    store = Store(root)
    ov: list[float] = []
    total_plt = receipts_s = spots_s = 0.0
    receipts: set[str] = set()
    try:
        for cid, att in store.latest_attempts().items():
            runs = [r for r in store.runs(cid, att["attempt"]) if r["plt_ms"] is not None]
            total_plt += sum(r["plt_ms"] for r in runs) / 1000
            stamps = [datetime.fromisoformat(r["started"]).timestamp() for r in runs]
            for prev, cur, r in zip(stamps, stamps[1:], runs[1:], strict=False):
                ov.append((cur - prev) * 1000 - r["plt_ms"])
        for cid in store.cells():
            for n in range(1, store.attempt(cid)["attempt"] + 1):
                rec = store.attempt(cid, n)["receipt"]
                if rec and rec["created"] not in receipts:
                    receipts.add(rec["created"])
                    receipts_s += rec["duration_s"]
                for span in store.link_spans(cid, n):
                    for check in (span["opening"], span["closing"]):
                        if check and not check.get("reused"):  # a reused check pinged once
                            spots_s += check["rtt"]["detail"].get("sent", 0) * 0.01
    finally:
        store.close()
    return {
        "overheads": ov,
        "plt_s": total_plt,
        "receipts": float(len(receipts)),
        "receipts_s": receipts_s,
        "spots_s": spots_s,
    }


def measure(spec_path: Path, out: Path) -> tuple[list[str], bool]:
    spec = load_spec(spec_path)
    tb = LocalTestbed("qbsweep")
    t0 = time.monotonic()
    try:
        outcome = run_sweep(spec, out, testbed=tb)
    finally:
        tb.teardown()
    wall = time.monotonic() - t0
    build(out)
    f = figures(out)
    ov = f["overheads"]
    assert isinstance(ov, list)
    med = statistics.median(ov) if ov else float("nan")
    share = f["plt_s"] / wall * 100
    target = SHARE_TARGETS.get(spec_path.name)
    ok_share = target is None or share >= target
    ok = ok_share and med <= OVERHEAD_TARGET_MS and not outcome.failed
    lines = [
        f"### `{spec_path}`",
        "",
        f"{outcome.done} cells done, {outcome.failed} failed, "
        f"{len({pc.config.link_key() for pc in plan(spec)})} link conditions.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| wall time | {wall:.0f} s |",
        f"| sum of measured PLTs | {f['plt_s']:.1f} s |",
        f"| **PLT share of wall time** | **{share:.1f} %** |",
        f"| full receipts | {f['receipts']:.0f}, {f['receipts_s']:.0f} s "
        f"({f['receipts_s'] / wall * 100:.1f} %) |",
        f"| spot checks (pings) | {f['spots_s']:.0f} s |",
        f"| loads | {len(ov) + outcome.done + outcome.failed} |",
        f"| overhead per load, median | {med:.0f} ms |",
        f"| overhead per load, p90 | {sorted(ov)[int(0.9 * len(ov))] if ov else 0:.0f} ms |",
        "",
        (
            f"Target: PLT share >= {target:.1f} %: " + ("met" if ok_share else "MISSED") + "; "
            if target is not None
            else ""
        )
        + f"overhead per load <= {OVERHEAD_TARGET_MS:.0f} ms median: "
        + ("met" if med <= OVERHEAD_TARGET_MS else "MISSED"),
        "",
    ]
    return lines, ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, action="append", help="sweep spec (repeatable)")
    ap.add_argument("--md", type=Path, help="write the result as Markdown here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/sweep_efficiency.py needs root", file=sys.stderr)
        return 2
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{os.cpu_count()} cores, kernel {platform.release()}, with nothing else running.",
        "",
    ]
    ok = True
    for spec_path in a.spec or DEFAULT_SPECS:
        out = Path(tempfile.mkdtemp(prefix="quicbed-sweep-")) / "results"
        more, good = measure(spec_path, out)
        print("\n".join(more), flush=True)
        lines += more
        ok = ok and good
    text = "\n".join(lines)
    if a.md:
        a.md.write_text(text + "\n")
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
