"""What an attempt's software record costs, probed afresh and kept (issue 39).

Run after `make setup`, with nothing else running on the machine:

    .venv/bin/python benchmarks/software_record.py [--rounds 10]

Every attempt records the build of every component (quicbed.results.provenance.software).
Each round takes the record twice on this machine: once with an empty cache (every
component probed: what every attempt paid before records were kept) and once with the
cache the first left (what an attempt pays while nothing was rebuilt), and checks the
two records are equal. It prints each way's median, min and max seconds, which
components were kept, and the host's steal and busy shares over the run (/proc/stat),
with the date and machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from quicbed.link import hostcpu
from quicbed.results import provenance
from quicbed.results.software_cache import SoftwareCache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="records each way (default 10)")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds}: at least 1")
    times: dict[str, list[float]] = {"probed": [], "kept": []}
    kept_names: set[str] = set()
    cpu0 = hostcpu.sample_here()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            cache_file = Path(tmp) / f"records-{i}.json"
            records = []
            for way in ("probed", "kept"):
                cache = SoftwareCache(cache_file)
                start = time.perf_counter()
                records.append(provenance.software(cache=cache))
                times[way].append(time.perf_counter() - start)
                if way == "kept":
                    kept_names = {k.split("\t")[1] for k, v in cache.outcomes.items() if v == way}
            if records[0] != records[1]:
                raise SystemExit(f"round {i + 1}: the kept record differs from the probed one")
            print(
                f"round {i + 1}/{a.rounds}: {times['probed'][-1]:.2f} s, {times['kept'][-1]:.2f} s"
            )
    cpu = hostcpu.shares(cpu0, hostcpu.sample_here())
    steal = f"host steal {cpu['steal_pct']:.1f} %, busy {cpu['busy_pct']:.1f} %" if cpu else ""
    print(
        f"\nsoftware records; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, kernel {platform.release()}; {steal} over the run\n"
    )
    print("| record | rounds | median s | min s | max s |")
    print("|---|---:|---:|---:|---:|")
    for way, label in (("probed", "every component probed"), ("kept", "kept records")):
        t = times[way]
        print(f"| {label} | {len(t)} | {statistics.median(t):.3f} | {min(t):.3f} | {max(t):.3f} |")
    print(f"\nkept: {', '.join(sorted(kept_names))}")


if __name__ == "__main__":
    main()
