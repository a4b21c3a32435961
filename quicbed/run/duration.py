"""How long a finished sweep took, beside what quicbed estimates for it.

``quicbed run`` and the catalog (``quicbed reproduce``) print one estimate, from one
model (quicbed.run.sweep.estimate: a receipt per link condition, spot checks, loads at
about three times their bound). A model nobody checks drifts: the transport-parameter
preset was estimated at 147 min, listed at 94 and took about 130. So every finished
run worth keeping is recorded (:func:`measured`, written by ``tools/record_duration.py``
into ``benchmarks/durations/``) with the spec *as it ran* (its ``sweep.json``), and
``tests/test_estimate.py`` plans each stored spec with today's estimator and compares:
the estimate may not be shorter than the run took (less the waits for a quiet host,
which the estimate leaves out) nor more than :data:`MAX_RATIO` times it. A shard's
folder (``--shard i/K``) is recorded with its shard, and compared with the estimate of
the cells that shard runs: a preset too long to run at once is checked shard by shard.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError

#: the estimate errs long on purpose (a user plans around it), by at most this much
MAX_RATIO = 2.0
#: a record's format
FORMAT = 1


def measured(folder: Path) -> dict[str, Any]:
    """A finished sweep folder's record: its spec as it ran, when it began and ended,
    how long it waited for a quiet host, how many attempts and how many failed."""
    from quicbed.results.store import Store

    meta = folder / "sweep.json"
    if not meta.exists() or not (folder / "store.sqlite").exists():
        raise QuicbedError(f"{folder}: not a sweep's results folder (no sweep.json or store)")
    sweep = json.loads(meta.read_text())
    store = Store(folder)
    try:
        attempts = [a for cid in store.cells() for a in store.attempts(cid)]
    finally:
        store.close()
    if not attempts or any(a.status == "running" or a.finished is None for a in attempts):
        raise QuicbedError(f"{folder}: the sweep has not finished (attempts still running)")
    first = min(attempts, key=lambda a: a.started)
    finished = max(str(a.finished) for a in attempts)
    began = datetime.fromisoformat(sweep["created"])
    wall = (datetime.fromisoformat(finished) - began).total_seconds()
    git = (first.provenance or {}).get("git") or {}
    return {
        "format": FORMAT,
        "name": sweep["spec"]["name"],
        "digest": sweep["digest"],
        "spec": sweep["spec"],
        "began": sweep["created"],
        "finished": finished,
        "wall_s": round(wall, 1),
        "waited_s": round(sum(a.waited_s or 0.0 for a in attempts), 1),
        "attempts": len(attempts),
        "failed": sum(1 for a in attempts if a.status == "failed"),
        "git": git.get("sha"),
        "git_dirty": git.get("dirty"),
        "shard": sweep.get("shard"),
    }


def compare(record: dict[str, Any]) -> dict[str, Any]:
    """Today's estimate of a recorded run's spec against its measured time."""
    from quicbed.run.shard import parse_shard, select
    from quicbed.run.sweep import estimate
    from quicbed.spec.sweepspec import SweepSpec, plan

    spec = SweepSpec.model_validate(record["spec"])
    cells = plan(spec, source=record["name"])
    if record.get("shard"):
        cells = select(cells, parse_shard(record["shard"]))
    est = estimate(cells, spec.receipt_tcp_seconds)
    took = record["wall_s"] - record["waited_s"]
    return {
        "name": record["name"],
        "shard": record.get("shard"),
        "cells": len(cells),
        "estimate_min": round(est / 60, 1),
        "took_min": round(took / 60, 1),
        "ratio": round(est / took, 2) if took > 0 else None,
        "within": took <= est <= MAX_RATIO * took,
    }
