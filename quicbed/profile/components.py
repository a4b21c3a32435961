"""Component shares of a profile: each sampled stack's category, by the per-stack maps.

The categories are the implementation study's: packet I/O (sendmsg/recvmsg, GSO/GRO,
the UDP and IP stack), crypto (AEAD, header protection, TLS), connection management
(ACK processing, loss recovery, congestion control, timers), marshalling (frame and
packet encoding and decoding), file and disk I/O, and other. The patterns are data
(``maps.yaml`` beside this module), per stack for servers and per program for
clients, each used with the kernel's. A stack (``a;b;c count``, as inferno folds it,
root first) is read from its leaf up: the first frame a specific category matches
decides; ``other`` only where no specific one matched; otherwise it is unclassified,
and every table shows that share beside the categories'.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

MAPS = Path(__file__).with_name("maps.yaml")
UNCLASSIFIED = "unclassified"


@cache
def maps() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(MAPS.read_text())
    return data


def categories() -> list[str]:
    return list(maps()["categories"])


@cache
def compiled(kind: str, name: str) -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
    """The kernel's map and ``kind`` (stacks, clients) ``name``'s, merged per category,
    in the categories' order; an unknown name gets the kernel's alone."""
    own = (maps().get(kind) or {}).get(name) or {}
    out = []
    for cat in categories():
        pats = [*maps()["kernel"].get(cat, []), *own.get(cat, [])]
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


def shares(folded: dict[str, int], kind: str, name: str) -> dict[str, Any]:
    """Per category (and ``unclassified``), its share of the sampled CPU time; and
    ``sampled_ms``: inferno weighs a cpu-clock stack by its samples' periods, which are
    nanoseconds of CPU time, so the folded counts add up to the CPU time sampled."""
    table = compiled(kind, name)
    counts = dict.fromkeys([*categories(), UNCLASSIFIED], 0)
    for stack, n in folded.items():
        counts[classify_stack(stack.split(";"), table)] += n
    total = sum(counts.values())
    return {"sampled_ms": total / 1e6} | {
        k: (v / total if total else None) for k, v in counts.items()
    }
