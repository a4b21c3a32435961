"""CPU per role summarised over loads or flows: what the report, the console and the
transfer summaries show of the CpuUse every load and flow stored (quicbed.results.cpuuse).

Computed from the records when read, never stored beside them: CPU ms per load and
per MB the load or flow carried, per arm.
"""

from __future__ import annotations

import statistics
from typing import Any

from quicbed.results.cpuuse import CpuTime, CpuUse
from quicbed.roles import ROLES


def summary(items: list[tuple[CpuUse, int | None]]) -> dict[str, dict[str, Any]]:
    """Per role, over the loads or flows ``items`` ((its CpuUse, bytes it carried)):
    n, the means of user, system and total ms per load, the total's sd, the total per
    MB carried (all the items' CPU over all their bytes) and the share of one core
    (CPU time over wall-clock time).

    The total is the group's run time (exact); user and system are the kernel's tick
    samples (quicbed.results.cpuuse.CpuTime), another counter that need not add up to
    it (a tick charges 4 ms to whatever ran at that instant, softirq work included,
    and work timed to start just after a tick is never sampled): ``user_share`` is
    the user ticks' share of all ticks, the one figure of the split shown beside
    the total."""
    out: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        got = [(u.roles[role], b, u.wall_ms) for u, b in items if role in u.roles]
        if not got:
            why = sorted({u.missing[role] for u, _ in items if role in u.missing})
            out[role] = {"n": 0, "missing": "; ".join(why)}
            continue
        totals = [t.total_ms for t, _, _ in got]
        carried = sum(b for _, b, _ in got if b)
        spent = sum(t.total_ms for t, b, _ in got if b)
        out[role] = {
            "n": len(got),
            "user_ms": statistics.fmean(t.user_ms for t, _, _ in got),
            "system_ms": statistics.fmean(t.system_ms for t, _, _ in got),
            "total_ms": statistics.fmean(totals),
            "total_ms_sd": statistics.stdev(totals) if len(totals) > 1 else None,
            "ms_per_mb": spent / (carried / 1e6) if carried else None,
            "core_share": sum(totals) / wall if (wall := sum(w for _, _, w in got)) else None,
            "user_share": _user_share([t for t, _, _ in got]),
        }
    return out


def _user_share(times: list[CpuTime]) -> float | None:
    """The user ticks' share of all the ticks sampled (None: no tick fell in)."""
    user = sum(t.user_ms for t in times)
    ticks = user + sum(t.system_ms for t in times)
    return user / ticks if ticks else None
