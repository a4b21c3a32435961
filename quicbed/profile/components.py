"""Component shares of a profile: each sampled stack's category, by the per-stack maps.

The categories are the implementation study's: packet I/O (sendmsg/recvmsg, GSO/GRO,
the UDP and IP stack), crypto (AEAD, header protection, TLS), connection management
(ACK processing, loss recovery, congestion control, timers), marshalling (frame and
packet encoding and decoding), file and disk I/O, and other. The patterns are data:
the categories and the kernel's map in ``maps.yaml`` beside this module, each program's
own in a file beside its plug-in's module (a stack's or a browser's ``cpu_map_file``,
read by own_map), used with the kernel's. A stack (``a;b;c count``, as inferno folds it,
root first) is read from its leaf up: the first frame a specific category matches
decides; ``other`` only where no specific one matched; otherwise it is unclassified,
and every table shows that share beside the categories'.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from quicbed.errors import QuicbedError

MAPS = Path(__file__).with_name("maps.yaml")
UNCLASSIFIED = "unclassified"


@cache
def maps() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(MAPS.read_text())
    return data


def categories() -> list[str]:
    return list(maps()["categories"])


#: a program's own map: per category, its patterns
Map = Mapping[str, tuple[str, ...]]


def own_map(cls: type, attr: str = "cpu_map_file") -> dict[str, tuple[str, ...]]:
    """The map a plug-in class declares: the YAML file its ``attr`` names, beside the
    module of the class that names it (a subclass elsewhere inherits the file); {} where
    none is named. A category the study does not have is refused by name."""
    owner = next((c for c in cls.__mro__ if c.__dict__.get(attr)), None)
    if owner is None:
        return {}
    return read_map(Path(inspect.getfile(owner)).with_name(owner.__dict__[attr]))


def read_map(path: Path) -> dict[str, tuple[str, ...]]:
    """A program's own map from its YAML file (category: [patterns])."""
    data = yaml.safe_load(path.read_text()) or {}
    unknown = set(data) - set(categories())
    if unknown:
        raise QuicbedError(f"{path}: unknown categories {sorted(unknown)} ({categories()})")
    return {cat: tuple(pats) for cat, pats in data.items()}


def compiled(own: Map) -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
    """The kernel's map and ``own``, merged per category, in the categories' order."""
    return _compiled(tuple((cat, tuple(pats)) for cat, pats in sorted(own.items())))


@cache
def _compiled(
    own: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
    mine = dict(own)
    out = []
    for cat in categories():
        pats = [*maps()["kernel"].get(cat, []), *mine.get(cat, ())]
        out.append((cat, tuple(re.compile(p) for p in pats)))
    return tuple(out)


def classify_stack(frames: list[str], table: tuple[tuple[str, tuple[Any, ...]], ...]) -> str:
    """A stack's category: frames root first, read from the leaf up."""
    seen_other = False
    for frame in reversed(frames):
        for cat, pats in table:
            if any(p.search(frame) for p in pats):
                if cat != "other":
                    return cat
                seen_other = True
                break
    return "other" if seen_other else UNCLASSIFIED


def parse_folded(text: str) -> dict[str, int]:
    """inferno's folded stacks (``frame;frame;... count`` per line) as stack -> count."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out[stack] = out.get(stack, 0) + int(count)
    return out


def shares(folded: dict[str, int], own: Map) -> dict[str, Any]:
    """Per category (and ``unclassified``), its share of the sampled CPU time; and
    ``sampled_ms``: inferno weighs a cpu-clock stack by its samples' periods, which are
    nanoseconds of CPU time, so the folded counts add up to the CPU time sampled."""
    table = compiled(own)
    counts = dict.fromkeys([*categories(), UNCLASSIFIED], 0)
    for stack, n in folded.items():
        counts[classify_stack(stack.split(";"), table)] += n
    total = sum(counts.values())
    return {"sampled_ms": total / 1e6} | {
        k: (v / total if total else None) for k, v in counts.items()
    }
