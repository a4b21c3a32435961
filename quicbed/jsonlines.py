"""JSON-lines logs, as quicbed's own programs write them (its servers, its bulk client)."""

from __future__ import annotations

import json
from typing import Any


def json_events(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines log; a line cut by a concurrent write is skipped."""
    out = []
    for line in lines:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out
