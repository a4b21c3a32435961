"""Run one cell: shape the link, prove it, load the page per arm, verify and store every load.

The order of work is the method of the reference study with its pitfalls removed:
- the link is checked first (a fidelity receipt); a link out of tolerance is never
  measured on: the attempt is recorded as failed with its receipt;
- both servers serve the same generated tree with the same certificate;
- the arms are interleaved (ABBA by default) so drift hits both;
- warm-up loads are stored, flagged, and never enter the statistics;
- every load is verified (status, protocol per entry, objects, bytes, and for QUIC
  0-RTT mode the server's own log) and an invalid load is stored with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quicbed.cellconfig import CellConfig
from quicbed.link.receipt import Receipt
from quicbed.servers.base import ServeSpec, WebServer
from quicbed.stats import Comparison
from quicbed.testbed.local import LocalTestbed

Progress = Callable[[str, int, int], None]


@dataclass
class CellResult:
    cell_id: str
    attempt: int
    status: str  # done | failed
    problem: str
    receipt: Receipt | None
    comparison: Comparison | None
    invalid: dict[str, list[str]]
    out: Path

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell_id": self.cell_id,
            "attempt": self.attempt,
            "status": self.status,
            "problem": self.problem,
            "out": str(self.out),
            "receipt_passed": None if self.receipt is None else self.receipt.passed,
            "comparison": None if self.comparison is None else self.comparison.model_dump(),
            "invalid": self.invalid,
        }


def servers_for(cfg: CellConfig, tb: LocalTestbed, spec: ServeSpec) -> dict[str, WebServer]:
    """One server per arm; unsupported knobs fail here, before anything starts."""
    from quicbed.servers.apache import ApacheServer
    from quicbed.servers.quic_go import QuicGoServer

    out: dict[str, WebServer] = {}
    for arm in cfg.arms:
        if arm == "h3":
            QuicGoServer.check_cc(cfg.cc)
            out[arm] = QuicGoServer(tb, spec)
        else:
            out[arm] = ApacheServer(tb, spec)
    return out
