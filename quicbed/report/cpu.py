"""The report's CPU per role: per cell, arm and role, CPU ms per load and per MB.

Computed from the records every load and flow stored (quicbed.results.cpu), for each
cell's latest attempt as the rest of the report: a page cell's measured valid loads,
a bulk cell's verified flows, a compete cell's repetitions (per arm, its flows'
bytes together). ``cpu.csv`` has one row per cell, arm and role.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.results.cpu import ROLE_MEANS, ROLES, CpuUse, load_cpu, summary
from quicbed.results.store import Store
from quicbed.results.transfers import stored_transfer

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
    "total_ms",
    "total_ms_sd",
    "ms_per_mb",
    "core_share",
    "missing",
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
            for arm, got in items(store, cid, att, cfg).items():
                if not got:
                    continue
                per_role = summary(got)
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
                    )
    finally:
        store.close()
    if sec.rows:
        with open(out / FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(sec.rows)
    return sec
