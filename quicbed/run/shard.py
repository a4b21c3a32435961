"""Which cells of a plan a shard runs: ``quicbed run SPEC --shard i/K``.

Deterministic from the plan alone, so K machines that never talk to each other split
a spec the same way, and ``quicbed merge`` can tell a complete set of shards. Cells
of one link condition stay on one shard (one receipt serves them, as in a sweep);
the conditions are dealt out largest first to the shard with the least estimated
work (ties: lowest shard), which balances shards better than hashing when a spec has
few conditions. Only when there are fewer conditions than shards is a condition's
cell list cut (in plan order), so no shard is left idle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from quicbed.errors import QuicbedError
from quicbed.spec.sweepspec import PlannedCell, estimate_seconds

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as the user writes it
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> Shard(2, 4); anything else is refused naming the value."""
    m = _SHARD.match(text)
    if not m:
        raise QuicbedError(f"--shard: {text!r} is not i/K (e.g. 1/2, the first of two shards)")
    i, k = int(m.group(1)), int(m.group(2))
    if k < 1 or not 1 <= i <= k:
        raise QuicbedError(f"--shard: {text!r}: i must be 1..K and K >= 1")
    return Shard(i, k)


def _groups(cells: list[PlannedCell]) -> list[list[PlannedCell]]:
    groups: dict[str, list[PlannedCell]] = {}
    for pc in cells:
        groups.setdefault(pc.config.link_key(), []).append(pc)
    return list(groups.values())


def assign(cells: list[PlannedCell], count: int) -> list[list[PlannedCell]]:
    """The plan's cells for each of ``count`` shards (plan order within a shard)."""
    groups = _groups(cells)
    # fewer conditions than shards: halve the largest groups until there are enough
    while len(groups) < count and any(len(g) > 1 for g in groups):
        big = max(range(len(groups)), key=lambda j: (len(groups[j]), -j))
        g = groups.pop(big)
        half = (len(g) + 1) // 2
        groups[big:big] = [g[:half], g[half:]]
    cost = [estimate_seconds(g, 0) for g in groups]
    order = sorted(range(len(groups)), key=lambda j: (-cost[j], j))
    load = [0.0] * count
    mine: list[list[int]] = [[] for _ in range(count)]
    for j in order:
        s = min(range(count), key=lambda k: (load[k], k))
        load[s] += cost[j]
        mine[s].append(j)
    pos = {pc.config.cell_id(): n for n, pc in enumerate(cells)}
    return [
        sorted((pc for j in js for pc in groups[j]), key=lambda pc: pos[pc.config.cell_id()])
        for js in mine
    ]


def select(cells: list[PlannedCell], shard: Shard) -> list[PlannedCell]:
    """The cells shard ``shard`` runs."""
    return assign(cells, shard.count)[shard.index - 1]
