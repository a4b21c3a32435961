"""A load's link proof (quicbed.link.loadproof) as each run stores it: the one reading
of it for the runner (spoiled, replaced), the export, the report's cell table and
``verify``."""

from __future__ import annotations

from typing import Any

#: the figures, in column order
COLUMNS = (
    "link_late_max_ms",
    "link_late_p99_ms",
    "link_late_tolerance_ms",
    "link_unasked_drops",
    "link_spoiled",
    "replacement",
    "host_steal_pct",
    "host_busy_pct",
    "host_other_pct",
)


def load_proof(detail: dict[str, Any] | None) -> dict[str, Any]:
    """The link proof one run's ``detail`` keeps ({} where the run predates it)."""
    proof: dict[str, Any] = ((detail or {}).get("link") or {}).get("load") or {}
    return proof


def spoiled_only(detail: dict[str, Any] | None) -> bool:
    """The load was spoiled by the link or the host and failed none of its own checks
    (kept invalid, replaced)."""
    proof = load_proof(detail)
    return bool(proof.get("spoiled")) and not proof.get("own_reasons")


def is_replacement(detail: dict[str, Any] | None) -> bool:
    """The load was measured at its cell's end in place of a spoiled one."""
    return bool(load_proof(detail).get("replacement"))


def figures(detail: dict[str, Any] | None) -> dict[str, Any]:
    """The figures of one run's ``detail`` (None where the run predates the proof, or
    the shaper keeps no per-frame clock); worst of the two directions."""
    load = load_proof(detail)
    dirs = (load.get("directions") or {}).values()

    def worst(key: str) -> float | None:
        got = [d[key] for d in dirs if d.get(key) is not None]
        return max(got) if got else None

    host = load.get("host") or {}
    drops = [d.get("socket_drops", 0) + d.get("send_errors", 0) for d in dirs]
    return {
        "link_late_max_ms": worst("late_max_ms"),
        "link_late_p99_ms": worst("late_p99_ms"),
        "link_late_tolerance_ms": load.get("late_tolerance_ms"),
        "link_unasked_drops": sum(drops) if drops else None,
        "link_spoiled": int(load["spoiled"]) if "spoiled" in load else None,
        "replacement": int(load["replacement"]) if "replacement" in load else None,
        "host_steal_pct": host.get("steal_pct"),
        "host_busy_pct": host.get("busy_pct"),
        "host_other_pct": host.get("other_pct"),
    }


def cell_line(details: list[dict[str, Any] | None], waited_s: float | None) -> str | None:
    """One sentence of what the link and the host did during a cell's measured loads,
    for the report: the latest frame's lateness (median and worst over the loads, the
    tolerance), the host's steal and other work at worst, the loads spoiled and
    replaced, the wait for a quiet host. None where no load has a proof."""
    rows = [figures(d) for d in details]
    rows = [f for f in rows if f["link_spoiled"] is not None]
    if not rows:
        return None
    parts = []
    late = sorted(f["link_late_max_ms"] for f in rows if f["link_late_max_ms"] is not None)
    if late:
        tol = rows[0]["link_late_tolerance_ms"]
        parts.append(
            f"latest frame of a load {late[len(late) // 2]:.2f} ms late in the median load, "
            f"{late[-1]:.1f} ms at worst (tolerance {tol:g} ms)"
        )
    else:
        parts.append("no per-frame clock (the kernel's shaper): the host alone judged")
    for key, what in (("host_steal_pct", "steal"), ("host_other_pct", "other work")):
        got = [f[key] for f in rows if f[key] is not None]
        if got:
            parts.append(f"{what} up to {max(got):.0f} % of the host")
    spoiled = sum(f["link_spoiled"] for f in rows)
    replaced = sum(f["replacement"] or 0 for f in rows)
    parts.append(f"{spoiled} of {len(rows)} loads spoiled, {replaced} replacement loads")
    if waited_s:
        parts.append(f"waited {waited_s:.0f} s for a quiet host")
    return "; ".join(parts)
