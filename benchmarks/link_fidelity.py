"""Link fidelity benchmark: the receipt table over the reference grid, with targets.

Run as root after `make setup`:  .venv/bin/python benchmarks/link_fidelity.py [--quick]

Conditions: rates 10/50/100/1000 Mbit/s x RTT 36/112 ms, plus 1 % loss and 50 ms
jitter of both kinds. Targets (exit 1 if missed): every 10-100 Mbit/s cell within
tolerance; 1 Gbit/s TCP at 36 ms >= 930 Mbit/s; the emulator at most one core at
100 Mbit/s. Writes the table as Markdown (--md FILE) with the date and machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from quicbed.link.receipt import Receipt, measure
from quicbed.link.session import shaped_link
from quicbed.model.link import LinkCondition, make_condition
from quicbed.progress import progress_bar
from quicbed.testbed.local import LocalTestbed


def grid(quick: bool) -> list[LinkCondition]:
    rates = [10, 100] if quick else [10, 50, 100, 1000]
    rtts = [36] if quick else [36, 112]
    conds = [make_condition(rate_mbit=r, rtt_ms=t) for t in rtts for r in rates]
    conds.append(make_condition(rate_mbit=50, rtt_ms=36, loss_pct=1))
    conds.append(make_condition(rate_mbit=50, rtt_ms=112, jitter_ms=50, jitter_kind="reorder"))
    conds.append(make_condition(rate_mbit=50, rtt_ms=112, jitter_ms=50, jitter_kind="smooth"))
    return conds


def _get(r: Receipt, name: str) -> tuple[str, bool | None]:
    for c in r.checks:
        if c.name == name:
            m = "-" if c.measured is None else f"{c.measured:.4g}"
            e = "-" if c.expected is None else f"{c.expected:.4g}"
            mark = {True: "", False: " ✗", None: " (n/j)"}[c.passed]
            return f"{m} / {e}{mark}", c.passed
    return "-", None


def row(r: Receipt) -> list[str]:
    cpu = (r.emulator or {}).get("cpu_pct_during_tcp_max")
    return [
        r.label,
        _get(r, "rtt")[0],
        _get(r, "owd_down")[0],
        _get(r, "tcp_down")[0],
        _get(r, "tcp_up")[0],
        _get(r, "udp_rate_down")[0],
        _get(r, "loss_down")[0],
        _get(r, "loss_up")[0],
        f"{_get(r, 'reorder_down')[0].split(' /')[0]}",
        "-" if cpu is None else f"{cpu:.0f}",
        "pass" if r.passed else "FAIL",
    ]


HEAD = [
    "condition",
    "RTT ms (meas / exp)",
    "OWD down ms",
    "TCP down Mbit/s",
    "TCP up Mbit/s",
    "UDP 1.2x down Mbit/s",
    "loss down %",
    "loss up %",
    "reordered down",
    "emu CPU %",
    "verdict",
]


def targets(receipts: list[Receipt]) -> list[str]:
    missed = []
    for r in receipts:
        c = r.condition
        rate, loss, jit = c["rate_mbit"], c["loss_pct"], c["jitter_ms"]
        if rate is not None and rate <= 100 and not loss and not jit and not r.passed:
            missed.append(f"{r.label}: out of tolerance")
        if rate == 1000 and c["rtt_ms"] == 36 and not loss and not jit:
            tcp = next(x for x in r.checks if x.name == "tcp_down").measured or 0
            if tcp < 930:
                missed.append(f"{r.label}: TCP {tcp:.0f} Mbit/s < 930")
        if rate == 100:
            cpu = (r.emulator or {}).get("cpu_pct_during_tcp_max", 0)
            if cpu > 100:
                missed.append(f"{r.label}: emulator CPU {cpu:.0f} % > one core")
    return missed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller grid")
    ap.add_argument("--shaper", default="auto")
    ap.add_argument("--tcp-seconds", type=float, default=10)
    ap.add_argument("--md", type=Path, help="write the table as Markdown here")
    ap.add_argument("--json", type=Path, help="write all receipts as JSON here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/link_fidelity.py needs root", file=sys.stderr)
        return 2
    console = Console()
    tb = LocalTestbed("qbbench")
    conds = grid(a.quick)
    receipts: list[Receipt] = []
    t0 = time.monotonic()
    try:
        tb.up()
        with progress_bar(console) as progress:
            task = progress.add_task("receipts", total=len(conds))
            for cond in conds:
                progress.update(task, description=cond.label())
                with shaped_link(tb, cond, a.shaper) as link:
                    receipts.append(
                        measure(tb, cond, link.shaper, link.tuning, tcp_seconds=a.tcp_seconds)
                    )
                progress.advance(task)
    finally:
        tb.down()
    from rich.table import Table

    table = Table(title="Link fidelity (measured / expected)")
    for h in HEAD:
        table.add_column(h)
    rows = [row(r) for r in receipts]
    for r in rows:
        table.add_row(*r)
    console.print(table)
    missed = targets(receipts)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.node()}, {os.cpu_count()} cores, kernel {platform.release()}"
    shaper = receipts[0].shaper["shaper"] if receipts else a.shaper
    if a.md:
        lines = [
            f"Measured {stamp} on {machine}; shaper `{shaper}`; {time.monotonic() - t0:.0f} s.",
            "",
            "| " + " | ".join(HEAD) + " |",
            "|" + "---|" * len(HEAD),
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines += ["", "Targets: " + ("all met" if not missed else "; ".join(missed))]
        a.md.write_text("\n".join(lines) + "\n")
    if a.json:
        a.json.write_text(json.dumps([r.model_dump(mode="json") for r in receipts], indent=1))
    if missed:
        console.print("[red]targets missed:[/] " + "; ".join(missed))
        return 1
    console.print("[green]all targets met[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
