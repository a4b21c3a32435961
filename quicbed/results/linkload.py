"""A load's or a flow's link proof (quicbed.link.loadproof) as each run stores it: the one
reading of it for the runner (spoiled, replaced), the export, the report's cell table and
``verify``. A page load keeps its proof in its run's ``detail`` (load_proof); a bulk flow
or a compete repetition in its own ``link`` (quicbed.results.transfers)."""

from __future__ import annotations

from collections.abc import Iterable
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


def background_share(runs: Iterable[Any], arm: str, direction: str = "down") -> float | None:
    """The background flows' share of the link in ``direction`` (quicbed.run.background)
    over ``arm``'s valid measured loads: per load the shares of the flows of that
    direction summed, then their mean. ``down`` (the default) is the page's own
    direction: the downloads that compete with its data; ``up``: the uploads, whose
    share is of the uplink, where the page's requests and ACKs go. None where no such
    load has such a flow (none, or a link without a rate)."""
    per_load = []
    for r in runs:
        flows = [
            f
            for f in (r.detail or {}).get("background") or []
            if f.get("direction", "down") == direction
        ]
        if r.arm != arm or not r.valid or r.warmup or not flows:
            continue
        if all(f.get("share") is not None for f in flows):
            per_load.append(sum(f["share"] for f in flows))
    return round(sum(per_load) / len(per_load), 4) if per_load else None


def spoiled_only(proof: dict[str, Any]) -> bool:
    """The load was spoiled by the link or the host and failed none of its own checks
    (kept invalid, replaced)."""
    return bool(proof.get("spoiled")) and not proof.get("own_reasons")


def is_replacement(proof: dict[str, Any]) -> bool:
    """The load was measured at its cell's end in place of a spoiled one."""
    return bool(proof.get("replacement"))


def owes_replacement(proofs: Iterable[dict[str, Any]], bound: int) -> bool:
    """Whether a group of transfers (an arm's bulk flows, a cell's compete repetitions)
    owes one more: one per transfer the link or host spoiled and nothing else (a spoiled
    replacement too), until ``bound`` were measured in place of spoiled ones."""
    seen = list(proofs)
    spoiled = sum(1 for p in seen if spoiled_only(p))
    return sum(1 for p in seen if is_replacement(p)) < min(spoiled, bound)


def shortfall(
    measured: Iterable[tuple[str, bool, dict[str, Any]]], planned: int
) -> dict[str, tuple[int, int]]:
    """Per arm (or any group) of ``measured`` (arm, valid, proof): its valid and planned
    count where it ended short of ``planned`` with loads the link or host spoiled among
    them, so a report says the cell's sample is smaller than asked, and why."""
    valid: dict[str, int] = {}
    spoiled: set[str] = set()
    for arm, ok, proof in measured:
        valid[arm] = valid.get(arm, 0) + int(ok)
        if proof.get("spoiled"):
            spoiled.add(arm)
    return {a: (valid[a], planned) for a in sorted(spoiled) if valid[a] < planned}


def figures(load: dict[str, Any]) -> dict[str, Any]:
    """The figures of one proof (None where the run predates the proof, or the shaper
    keeps no per-frame clock); worst of the two directions."""
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


def cell_line(
    proofs: list[dict[str, Any]],
    waited_s: float | None,
    short: dict[str, tuple[int, int]] | None = None,
    what: str = "loads",
) -> str | None:
    """One sentence of what the link and the host did during a cell's measured loads
    (or flows, repetitions: ``what``), for the report: the latest frame's lateness
    (median and worst, the tolerance), the host's steal and other work at worst, the
    loads spoiled and replaced, the wait for a quiet host, and ``short``: per arm, its
    valid and planned loads where the spoiled ones outran the replacements it may
    measure. None where no load has a proof."""
    rows = [figures(p) for p in proofs]
    rows = [f for f in rows if f["link_spoiled"] is not None]
    if not rows:
        return None
    parts = []
    late = sorted(f["link_late_max_ms"] for f in rows if f["link_late_max_ms"] is not None)
    if late:
        tol = rows[0]["link_late_tolerance_ms"]
        parts.append(
            f"latest frame {late[len(late) // 2]:.2f} ms late in the median of the {what}, "
            f"{late[-1]:.1f} ms at worst (tolerance {tol:g} ms)"
        )
    else:
        parts.append("no per-frame clock (the kernel's shaper): the host alone judged")
    for key, label in (("host_steal_pct", "steal"), ("host_other_pct", "other work")):
        got = [f[key] for f in rows if f[key] is not None]
        if got:
            parts.append(f"{label} up to {max(got):.0f} % of the host")
    spoiled = sum(f["link_spoiled"] for f in rows)
    replaced = sum(f["replacement"] or 0 for f in rows)
    parts.append(f"{spoiled} of {len(rows)} {what} spoiled, {replaced} measured in their place")
    if waited_s:
        parts.append(f"waited {waited_s:.0f} s for a quiet host")
    for arm, (valid, planned) in sorted((short or {}).items()):
        parts.append(
            f"{arm} has {valid} of its {planned} planned {what} valid: the spoiled ones outran "
            "the replacements it may measure (max_replaced)"
        )
    return "; ".join(parts)
