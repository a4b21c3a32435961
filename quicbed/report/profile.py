"""The report's CPU profiles: per cell and arm, its flame graph and component shares.

From what ``--profile cpu`` left in the results folder (quicbed.profile.session: the
attempt's provenance record ``profile``, the folded stacks per arm and role, one SVG
per arm); the shares are computed here, from the folded files, by the per-stack maps
(quicbed.profile.components), so a better map changes the next report, not the data.
``profile.csv`` has one row per cell, arm and role.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.client import browsers
from quicbed.profile.components import UNCLASSIFIED, categories, parse_folded, shares
from quicbed.results.store import Store
from quicbed.run.bulk import CLIENT as BULK_CLIENT
from quicbed.run.bulk import cpu_map as bulk_cpu_map
from quicbed.servers import stacks

FILE = "profile.csv"


def program_map(role: str, name: str) -> dict[str, tuple[str, ...]]:
    """The CPU map a profiled program declares: a server's by its stack, a client's by
    its browser, or the bulk client's; {} (the kernel's map alone) for one unknown here."""
    if role == "server":
        stack = stacks().get(name)
        return stack.cpu_map() if stack else {}
    if name == BULK_CLIENT:
        return bulk_cpu_map()
    browser = browsers().get(name)
    return browser.cpu_map() if browser else {}


@dataclass
class ProfileSection:
    rows: list[dict[str, Any]] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    #: per cell: (cell_id, attempt, the record's event and rate, {arm: svg path from the report})
    graphs: list[dict[str, Any]] = field(default_factory=list)


def build(root: Path, out: Path) -> ProfileSection:
    sec = ProfileSection(categories=[*categories(), UNCLASSIFIED])
    store = Store.open_readonly(root)
    try:
        latest = store.latest_attempts()
        for cid, att in sorted(latest.items()):
            rec = (att.provenance or {}).get("profile")
            if not rec:
                continue
            folder = root / rec["folder"]
            svgs = {}
            for arm, files in sorted((rec.get("files") or {}).items()):
                if files.get("svg") and (folder / files["svg"]).exists():
                    svgs[arm] = f"../{rec['folder']}/{files['svg']}"
                for role in ("server", "client"):
                    f = folder / files.get(role, "")
                    if not files.get(role) or not f.is_file():
                        continue
                    name = (
                        rec["stacks"].get(arm, "")
                        if role == "server"
                        else (rec.get("clients") or {}).get(arm, rec.get("client", ""))
                    )
                    got = shares(parse_folded(f.read_text()), program_map(role, name))
                    sec.rows.append(
                        {
                            "cell_id": cid,
                            "attempt": att.attempt,
                            "arm": arm,
                            "role": role,
                            "program": name,
                        }
                        | got
                    )
            sec.graphs.append(
                {
                    "cell_id": cid,
                    "attempt": att.attempt,
                    "event": rec.get("event"),
                    "frequency_hz": rec.get("frequency_hz"),
                    "svgs": svgs,
                    "notes": rec.get("notes") or [],
                }
            )
    finally:
        store.close()
    if sec.rows:
        cols = ["cell_id", "attempt", "arm", "role", "program", "sampled_ms", *sec.categories]
        with open(out / FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(sec.rows)
    return sec
