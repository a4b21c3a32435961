"""How much of its CPU the machine gives when asked: ``python -m quicbed.link.cpuprobe S``.

One busy process per core spins for S seconds; each counts the CPU time it got. On a
quiet machine they get nearly all of the cores' time; a hypervisor that steals it, or
other work on the machine, leaves them less. This is the host judged *under load*:
an idle machine's /proc/stat can read little steal while a receipt started right
after it loses a quarter of its time (the hypervisor schedules a busy guest less).
The aggregate ``cpu`` line of /proc/stat over the same span says how much was steal.
Prints one JSON object. Internal to quicbed.link.quiet, which runs it on the bridge's
machine (where the emulator runs).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from typing import Any

#: /proc/stat's cpu columns, in its order (Linux >= 2.6.33)
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _stat() -> list[int] | None:
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    if not parts or parts[0] != "cpu" or len(parts) < 1 + len(FIELDS):
        return None
    return [int(x) for x in parts[1 : 1 + len(FIELDS)]]


def _spin(seconds: float, out: Any) -> None:
    t0, c0 = time.monotonic(), time.process_time()
    while time.monotonic() - t0 < seconds:
        pass
    out.put(time.process_time() - c0)


def probe(seconds: float) -> dict[str, Any]:
    """Spin every core for ``seconds``: the share of the cores' time the spinners got,
    and /proc/stat's steal share over the same span."""
    cpus = len(os.sched_getaffinity(0))
    q: Any = multiprocessing.Queue()
    before = _stat()
    t0 = time.monotonic()
    procs = [multiprocessing.Process(target=_spin, args=(seconds, q)) for _ in range(cpus)]
    for p in procs:
        p.start()
    got = sum(q.get(timeout=seconds + 30) for _ in procs)
    for p in procs:
        p.join(timeout=5)
    wall = time.monotonic() - t0
    after = _stat()
    steal = None
    if before and after:
        d = [a - b for a, b in zip(after, before, strict=True)]
        if sum(d) > 0:
            steal = round(100 * d[FIELDS.index("steal")] / sum(d), 2)
    return {
        "cpus": cpus,
        "wall_s": round(wall, 3),
        "cpu_s": round(got, 3),
        "available_pct": round(100 * got / (wall * cpus), 2),
        "steal_pct": steal,
    }


def main(argv: list[str]) -> int:
    seconds = float(argv[0]) if argv else 2.0
    print(json.dumps(probe(seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
