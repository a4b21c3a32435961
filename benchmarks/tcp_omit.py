"""How much of TCP's start a receipt must leave out: the TCP check's goodput with a shorter
floor (1 s) and 2 s omitted, A/B pairs on the same shaped link (issue 39).

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/tcp_omit.py [--pairs 4] [--seconds 2] [--floor 1]

The receipt's TCP probe (quicbed.link.probes.tcp_goodput, as quicbed.link.receipt runs
it: the link's reporting interval, CUBIC, the host tuning of the link) leaves out
``tcp_omit_seconds`` before it measures: slow start's length by the formula, but never
under a floor. The floor's second is paid twice per receipt (down and up) and a receipt
opens every cell. Per condition and direction this takes ``--pairs`` pairs of runs, one
omitting ``--floor`` s and one omitting 2 s (or the formula's length where it is longer), in
alternating order, each measuring ``--seconds`` (2: the receipt's first run; 1: the
tests'), and prints each arm's goodput as a share of the ideal the check wants 97 % of,
its lowest share and how many runs passed. It prints the host's steal and busy shares
over the run (/proc/stat), with the date and machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
from datetime import UTC, datetime

from quicbed.link import hostcpu, probes
from quicbed.link.receipt import (
    _report_interval,
    slow_start_seconds,
    tcp_ideal_bps,
    tcp_omit_seconds,
)
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.testbed.local import LocalTestbed

#: the conditions of the demo, the long look's 112 ms grid and the tests' links
CONDITIONS = (
    (10.0, 36.0),
    (50.0, 20.0),
    (50.0, 36.0),
    (100.0, 36.0),
    (10.0, 112.0),
    (100.0, 112.0),
)
#: the check's pass mark (quicbed.link.receipt._tcp_check)
PASS_SHARE = 0.97


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--floor", type=float, default=1.0, help="the shorter arm's floor (s)")
    a = ap.parse_args()
    if a.pairs < 1:
        ap.error(f"--pairs {a.pairs}: at least 1")
    if not 0 < a.seconds <= 10:
        ap.error(f"--seconds {a.seconds}: between 0 and 10")
    if not 0 < a.floor < 2:
        ap.error(f"--floor {a.floor}: above 0 and under the receipt's 2 s")
    tb = LocalTestbed("to" + secrets.token_hex(2))
    tb.up()
    shares: dict[tuple[str, str, float], list[float]] = {}
    cpu0 = hostcpu.sample(tb)
    try:
        for rate, rtt in CONDITIONS:
            cond = make_condition(rate_mbit=rate, rtt_ms=rtt)
            pair = (max(a.floor, slow_start_seconds(cond)), tcp_omit_seconds(cond))
            ideal = tcp_ideal_bps(cond)
            assert ideal is not None  # every condition here has a rate
            interval = _report_interval(cond, rate * 1e6)
            with shaped_link(tb, cond, "userspace"), probes.iperf3_server(tb, interval=interval):
                for i in range(a.pairs):
                    for d in ("down", "up"):
                        order = pair if i % 2 == 0 else pair[::-1]
                        for omit in order:
                            r = probes.tcp_goodput(
                                tb, d, seconds=a.seconds, omit=omit, interval=interval
                            )
                            share = r["goodput_bps"] / ideal
                            key = (cond.label(), d, omit)
                            shares.setdefault(key, []).append(share)
                            print(f"  {cond.label()} {d} omit {omit:g} s: {share:.3f}", flush=True)
    finally:
        cpu = hostcpu.shares(cpu0, hostcpu.sample(tb))
        tb.down()
    steal = f"host steal {cpu['steal_pct']:.1f} %, busy {cpu['busy_pct']:.1f} %" if cpu else ""
    print(
        f"\nTCP goodput / ideal, {a.seconds:g} s measured per run, {a.pairs} pairs; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, "
        f"kernel {platform.release()}; {steal} over the run\n"
    )
    print("| condition | dir | omit s | median | lowest | passed |")
    print("|---|---|---:|---:|---:|---:|")
    for (label, d, omit), xs in shares.items():
        ok = sum(x >= PASS_SHARE for x in xs)
        print(
            f"| {label} | {d} | {omit:g} | {statistics.median(xs):.3f} | {min(xs):.3f} "
            f"| {ok}/{len(xs)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
