"""Bulk goodput per arm: does TCP CUBIC fill the link, and what do the QUIC stacks get?

Run as root after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/bulk_goodput.py [--rates 10,50,100] [--rtt 36]
        [--reps 3] [--duration 10] [--arms h2,h3,h3-quiche] [--json FILE]

Per rate: one shaped, proven link (quicbed.run.bulk: the receipt first), then ``--reps``
downloads of ``--duration`` seconds per arm, interleaved, one flow at a time, each
with quicbed-bulk (the same Go client for every arm). Prints per arm the mean
goodput (application bytes / time, the handshake and slow start included), its
share of the link's ideal (the rate's TCP payload share, 1448 of 1514 bytes per
frame: quicbed.run.bulk.ideal_goodput_bps), completion time and retransmissions.

The check: TCP CUBIC (h2, Apache) reaches >= 95 % of the ideal at every rate; it
exits 1 if not. The QUIC stacks are reported as measured, without a threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from quicbed.cli.bulk import run_bulk
from quicbed.model.link import make_condition
from quicbed.testbed.local import LocalTestbed

TARGET = 0.95


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,50,100", help="Mbit/s, comma-separated")
    ap.add_argument("--rtt", type=float, default=36.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per download")
    ap.add_argument("--arms", default="h2,h3,h3-quiche")
    ap.add_argument("--json", type=Path, help="write every result record here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("benchmarks/bulk_goodput.py needs root", file=sys.stderr)
        return 2
    tb = LocalTestbed("qbbulk")
    out = Path(tempfile.mkdtemp(prefix="quicbed-bulk-"))
    arms = a.arms.split(",")
    rows, records, failed = [], [], []
    for rate in (float(r) for r in a.rates.split(",")):
        cond = make_condition(rate_mbit=rate, rtt_ms=a.rtt)

        def say(m: str, done: int, total: int, rate: float = rate) -> None:
            print(f"  {rate:g} Mbit/s: {m} ({done}/{total})", file=sys.stderr)

        r = run_bulk(
            cond,
            out / f"{rate:g}",
            arms=arms,
            reps=a.reps,
            duration_s=a.duration,
            testbed=tb,
            receipt_tcp_seconds=5,
            progress=say,
        )
        records.append(r.model_dump(mode="json"))
        for arm in arms:
            s = r.summary[arm]
            rows.append((rate, arm, s))
            if arm == "h2" and (s.of_ideal is None or s.of_ideal < TARGET):
                failed.append(f"h2 at {rate:g} Mbit/s: {s.of_ideal}")
    print(
        f"\nbulk goodput, {a.rtt:g} ms RTT, {a.duration:g} s per download, {a.reps} reps, "
        f"ideal = rate x 1448/1514; results in {out}"
    )
    print(
        f"{'rate':>6} {'arm':<10} {'n':>2} {'goodput Mbit/s':>15} {'sd':>6} {'of ideal':>9} "
        f"{'retrans':>8}"
    )
    for rate, arm, s in rows:
        gp = f"{s.goodput_mbit_mean:.2f}" if s.goodput_mbit_mean is not None else "-"
        sd = f"{s.goodput_mbit_sd:.2f}" if s.goodput_mbit_sd is not None else "-"
        oi = f"{s.of_ideal * 100:.1f} %" if s.of_ideal is not None else "-"
        rt = f"{s.retransmissions_mean:.0f}" if s.retransmissions_mean is not None else "n/a"
        mark = "" if arm != "h2" else ("  ok" if s.of_ideal and s.of_ideal >= TARGET else "  LOW")
        print(f"{rate:>6g} {arm:<10} {s.n:>2} {gp:>15} {sd:>6} {oi:>9} {rt:>8}{mark}")
    if a.json:
        a.json.write_text(json.dumps(records, indent=1))
    if failed:
        print(f"TCP CUBIC below {TARGET * 100:.0f} % of the ideal: {'; '.join(failed)}")
        return 1
    print(f"TCP CUBIC >= {TARGET * 100:.0f} % of the ideal at every rate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
