"""Harness overhead: measured PLT per arm next to an analytic lower bound.

Run as root after `make setup`:  .venv/bin/python benchmarks/harness_overhead.py [--md FILE]

For each single-object page at 10 Mbit/s and RTT 36 and 112 ms, 20 runs + 1 warm-up
per arm (0-RTT mode). The page is an HTML document and one image, fetched one after
the other, so the lower bound is a number of round trips plus the time to put the
bytes on the wire at the rate (slow start ignored, so large pages sit well above it):

- h3, 0-RTT: 2 RTT (the HTML request rides in 0-RTT data; then the image) + transfer;
- h2, TLS 1.3 resumed: 4 RTT (TCP handshake, TLS handshake, HTML, image) + transfer.

Target: the 5 KB cell has sd <= 3 ms and a median within 15 ms of the bound, both arms.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from quicbed import workloads
from quicbed.cell import run_cell
from quicbed.cellconfig import make_cell
from quicbed.link.model import make_condition
from quicbed.store import Store

RTTS = {"h3": 2, "h2": 4}
FRAME_OVERHEAD = 1514 / 1448  # wire bytes per payload byte of a full-sized segment
SINGLE = ["5kb", "10kb", "100kb", "200kb", "500kb", "1mb", "10mb"]


def bound_ms(arm: str, rtt_ms: float, page_bytes: int, rate_mbit: float) -> float:
    return RTTS[arm] * rtt_ms + page_bytes * FRAME_OVERHEAD * 8 / (rate_mbit * 1e3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", default=",".join(SINGLE))
    ap.add_argument("--rtts", default="36,112")
    ap.add_argument("--rate", type=float, default=10)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--md", type=Path, help="write the table as Markdown here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/harness_overhead.py needs root", file=sys.stderr)
        return 2
    console = Console()
    out = Path(tempfile.mkdtemp(prefix="quicbed-harness-"))
    manifest = workloads.generate(out / "www")
    rows, missed = [], []
    for rtt in (float(x) for x in a.rtts.split(",")):
        for page in a.pages.split(","):
            cfg = make_cell(condition=make_condition(rate_mbit=a.rate, rtt_ms=rtt), page=page,
                            runs=a.runs, warmup=1)  # fmt: skip
            console.print(f"{page} at {rtt:g} ms ...")
            r = run_cell(cfg, out / "results", prefix="qbharn", receipt_tcp_seconds=3)
            if r.status != "done":
                missed.append(f"{page}/{rtt:g} ms: {r.problem}")
                continue
            store = Store(out / "results")
            for arm in ("h2", "h3"):
                plts = store.plts(r.cell_id, r.attempt, arm)
                b = bound_ms(arm, rtt, manifest["pages"][page]["bytes"], a.rate)
                med = statistics.median(plts) if plts else float("nan")
                sd = statistics.stdev(plts) if len(plts) > 1 else float("nan")
                rows.append([page, f"{rtt:g}", arm, str(len(plts)), f"{med:.1f}", f"{sd:.2f}",
                             f"{b:.1f}", f"{med - b:+.1f}"])  # fmt: skip
                if page == "5kb" and not (sd <= 3 and abs(med - b) <= 15):
                    missed.append(f"5kb/{rtt:g} ms/{arm}: sd {sd:.2f} ms, median - bound "
                                  f"{med - b:+.1f} ms")  # fmt: skip
            store.close()
    head = ["page", "RTT ms", "arm", "valid n", "median PLT ms", "sd ms", "bound ms",
            "median - bound ms"]  # fmt: skip
    t = Table(title=f"Harness overhead at {a.rate:g} Mbit/s (0-RTT mode)")
    for h in head:
        t.add_column(h)
    for row in rows:
        t.add_row(*row)
    console.print(t)
    if a.md:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines = [f"Measured {stamp} on {platform.node()}, {os.cpu_count()} cores, kernel "
                 f"{platform.release()}.", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]  # fmt: skip
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", "Target: " + ("met" if not missed else "missed: " + "; ".join(missed))]
        a.md.write_text("\n".join(lines) + "\n")
    if missed:
        console.print("[red]target missed:[/] " + "; ".join(missed))
        return 1
    console.print("[green]target met[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
