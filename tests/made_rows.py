"""A report cell row for tests that draw or group rows without measuring a cell: every
field a row needs, for a 10 Mbit/s, 36 ms, 5 KB cell, overridden by what a test is about."""

from __future__ import annotations

from typing import Any

from quicbed.report.cellrow import CellRow


def cell_row(**fields: Any) -> CellRow:
    base: dict[str, Any] = {
        "scenario": "s",
        "cell_id": "c",
        "attempt": 1,
        "attempts": 1,
        "page": "5kb",
        "rate_mbit": 10.0,
        "rtt_ms": 36.0,
        "loss_pct": 0.0,
        "jitter_ms": 0.0,
        "jitter_kind": "none",
        "queue": "2bdp",
        "mode": "0rtt",
        "runs": 5,
        "cc": "cubic",
    }
    return CellRow(**{**base, **fields})
