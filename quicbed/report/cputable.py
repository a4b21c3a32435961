"""The report's CPU per role: per cell, arm and role, CPU ms per load and per MB.

Computed from the records every load and flow stored (quicbed.results.cpuuse), for each
cell's latest attempt as the rest of the report: a page cell's measured valid loads,
a bulk cell's verified flows, a compete cell's repetitions (per arm, its flows'
bytes together). ``cpu.csv`` has one row per cell, arm and role.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.analysis.cpusummary import summary
from quicbed.analysis.transfers import counter_totals, stored_transfer
from quicbed.results.cpuuse import ROLE_MEANS, CpuUse, load_cpu
from quicbed.results.netcounters import RoleCounters
from quicbed.results.store import Store
from quicbed.results.transfers import BulkResult
from quicbed.roles import ROLES

FILE = "cpu.csv"
COLUMNS = [
    "kind",
    "scenario",
    "cell_id",
    "attempt",
    "page",
    "rate_mbit",
    "rtt_ms",
    "arm",
    "role",
    "group",
    "n",
    "user_ms",
    "system_ms",
    "user_share",
    "total_ms",
    "total_ms_sd",
    "ms_per_mb",
    "core_share",
    "missing",
    # totals over the same loads or flows (page and bulk cells; a compete repetition's
    # counters are the whole bottleneck's, not an arm's)
    "udp_rcvbuf_errors",
    "udp_in_errors",
    "drops",
]


@dataclass
class CpuSection:
    rows: list[dict[str, Any]] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=lambda: dict(ROLE_MEANS))


def items(store: Store, cid: str, attempt: int, cfg: dict[str, Any]) -> dict[str, list[Any]]:
    """Per arm, (CpuUse, bytes) of every load or flow of the attempt that counts."""
    out: dict[str, list[tuple[CpuUse, int | None]]] = {a: [] for a in cfg["arms"]}
    if cfg.get("kind", "page") == "page":
        for r in store.runs(cid, attempt):
            use = load_cpu(r.detail or {})
            if use is not None and r.valid and not r.warmup and r.arm in out:
                out[r.arm].append((use, r.bytes))
        return out
    if store.transfer(cid, attempt) is None:
        return out
    return stored_transfer(store, cid, attempt).cpu_items()


def counter_items(
    store: Store, cid: str, attempt: int, cfg: dict[str, Any]
) -> dict[str, list[dict[str, RoleCounters]]]:
    """Per arm, each counted load's or bulk flow's counters per role."""
    out: dict[str, list[dict[str, RoleCounters]]] = {a: [] for a in cfg["arms"]}
    kind = cfg.get("kind", "page")
    if kind == "page":
        for r in store.runs(cid, attempt):
            raw = (r.detail or {}).get("counters")
            if raw is not None and r.valid and not r.warmup and r.arm in out:
                out[r.arm].append({k: RoleCounters.model_validate(v) for k, v in raw.items()})
    elif kind == "bulk" and store.transfer(cid, attempt) is not None:
        rec = stored_transfer(store, cid, attempt)
        assert isinstance(rec, BulkResult)
        for run in rec.runs:
            if run.flow.ok and run.flow.counters and run.arm in out:
                out[run.arm].append(run.flow.counters)
    return out


def build(root: Path, out: Path) -> CpuSection:
    """Every cell's latest attempt, per arm and role; ``out/cpu.csv`` where any has CPU."""
    sec = CpuSection()
    store = Store.open_readonly(root)
    try:
        scenarios = store.cell_scenarios()
        latest = store.latest_attempts()
        for cid, cfg in store.cell_configs().items():
            if cid not in latest:
                continue
            att = latest[cid].attempt
            cond = cfg["condition"]
            counted = counter_items(store, cid, att, cfg)
            for arm, got in items(store, cid, att, cfg).items():
                if not got:
                    continue
                per_role = summary(got)
                totals = counter_totals(counted[arm]) if counted.get(arm) else {}
                groups = got[0][0].groups
                for role in ROLES:
                    sec.rows.append(
                        dict.fromkeys(COLUMNS)
                        | {
                            "kind": cfg.get("kind", "page"),
                            "scenario": (scenarios.get(cid) or ["cells"])[0],
                            "cell_id": cid,
                            "attempt": att,
                            "page": cfg["page"],
                            "rate_mbit": cond.get("rate_mbit"),
                            "rtt_ms": cond.get("rtt_ms"),
                            "arm": arm,
                            "role": role,
                            "group": groups.get(role),
                        }
                        | per_role[role]
                        | {k: v.get(role) for k, v in totals.items()}
                    )
    finally:
        store.close()
    if sec.rows:
        with open(out / FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(sec.rows)
    return sec
