"""What a receipt costs and whether it holds beside a stalling emulator (issue 38, item 5).

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/receipt_cost.py [--receipts 3] [--stall]

On the demo's conditions (sweeps/demo.yaml: 10 and 50 Mbit/s at 36 ms, 5 s of TCP per
direction), ``--receipts`` receipts per condition on one local testbed: their seconds,
verdict and the probes the host spoiled and were taken again. ``--stall`` stops the
emulator (SIGSTOP) for 200 ms every 3 s while they run, as the demo's stall nuisance
does (benchmarks/noisy_host.py demo --nuisance stall).

The quicbed it measures is the one on PYTHONPATH: run it once with this tree and once
with PYTHONPATH pointing at a checkout from before the probes were sized, for the
before/after table of docs/benchmarks/receipt-cost.md. It prints the host's steal and
busy shares over the run (/proc/stat), with the date and machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import threading
import time
from datetime import UTC, datetime

from quicbed.link import hostcpu
from quicbed.link.receipt import measure
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.shapers.userspace import UserspaceShaper
from quicbed.testbed.local import LocalTestbed

#: the demo's conditions and receipt TCP seconds (sweeps/demo.yaml)
CONDITIONS = ((10.0, 36.0), (50.0, 36.0))
DEMO_TCP_SECONDS = 5.0


def stall_every(tb: LocalTestbed, period_s: float, stop_s: float, done: threading.Event) -> None:
    """Stop the emulator for ``stop_s`` every ``period_s`` until ``done``."""
    while not done.wait(period_s - stop_s):
        pid = UserspaceShaper().pid(tb)
        if pid is None:
            continue
        tb.kill("bridge", pid, "STOP")
        time.sleep(stop_s)
        tb.kill("bridge", pid, "CONT")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receipts", type=int, default=3)
    ap.add_argument("--stall", action="store_true")
    a = ap.parse_args()
    if a.receipts < 1:
        ap.error(f"--receipts {a.receipts}: at least 1")
    tb = LocalTestbed("rc" + secrets.token_hex(2))
    tb.up()
    rows = []
    cpu0 = hostcpu.sample(tb)
    try:
        for rate, rtt in CONDITIONS:
            cond = make_condition(rate_mbit=rate, rtt_ms=rtt)
            with shaped_link(tb, cond, "userspace") as link:
                done = threading.Event()
                if a.stall:
                    threading.Thread(
                        target=stall_every, args=(tb, 3.0, 0.2, done), daemon=True
                    ).start()
                try:
                    for i in range(a.receipts):
                        r = measure(
                            tb, cond, link.shaper, link.tuning, tcp_seconds=DEMO_TCP_SECONDS
                        )
                        probes = getattr(r, "probes", [])
                        retaken = sum(len(p["retaken"]) for p in probes)
                        failed = ", ".join(c.name for c in r.failed_checks()) or "-"
                        steal = (r.host_cpu or {}).get("steal_pct")
                        rows.append(
                            (cond.label(), i + 1, r.duration_s, r.passed, retaken, failed, steal)
                        )
                        print(f"  {rows[-1]}", flush=True)
                finally:
                    done.set()
    finally:
        cpu = hostcpu.shares(cpu0, hostcpu.sample(tb))
        tb.down()
    what = "receipts beside an emulator stopped 200 ms every 3 s" if a.stall else "receipts"
    steal = f"host steal {cpu['steal_pct']:.1f} %, busy {cpu['busy_pct']:.1f} %" if cpu else ""
    print(
        f"\n{what}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}; {steal} over the run\n"
    )
    print("| condition | # | seconds | passed | probes retaken | failed checks | steal % |")
    print("|---|---:|---:|---|---:|---|---:|")
    for label, i, secs, ok, retaken, failed, st in rows:
        st_s = "-" if st is None else f"{st:.1f}"
        print(f"| {label} | {i} | {secs:.1f} | {ok} | {retaken} | {failed} | {st_s} |")
    for label in dict.fromkeys(r[0] for r in rows):
        secs = [r[2] for r in rows if r[0] == label]
        print(f"\n{label}: median {statistics.median(secs):.1f} s over {len(secs)} receipts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
