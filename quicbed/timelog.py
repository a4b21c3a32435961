"""Where a run's time goes, phase by phase, for whoever asks (``QUICBED_TIME_LOG``).

A sweep's own figures (a receipt's ``duration_s``, a load's PLT) say what each part
measured, not what it cost the process that waited for it: the test suite's budget is
spent in receipts, spot checks, loads, waits for a quiet host and server starts, and a
regression there shows in nobody's log. With ``QUICBED_TIME_LOG`` naming a file, each
:func:`phase` appends one JSON line when it ends (its name, its start as epoch seconds,
its seconds, the pid), from any process of quicbed, CLI subprocesses included (they
inherit the variable); without it, :func:`phase` costs one dictionary lookup. The test
suite's summary (tests/conftest.py) reads the file back with :func:`read`.

Phases are named where they are timed and never nest within the same name; a load
inside a cell is its own phase, and the cell around it is not a phase (its time is the
test's), so the phases of one process can be summed without counting a second twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quicbed.jsonlines import json_events

ENV = "QUICBED_TIME_LOG"

#: the phases quicbed times, in the order a summary shows them
RECEIPT, SPOT_CHECK, LOAD, QUIET_WAIT, SERVERS, BROWSERS, FLOW, COMPETE = (
    "receipt",
    "spot check",
    "page load",
    "wait for a quiet host",
    "servers start",
    "browsers start",
    "bulk flow",
    "compete repetition",
)
PHASES = (RECEIPT, SPOT_CHECK, LOAD, FLOW, COMPETE, QUIET_WAIT, SERVERS, BROWSERS)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as ``name`` into the log ``QUICBED_TIME_LOG`` names, if any. The
    line is written however the block ends (a failed receipt cost its time too)."""
    path = os.environ.get(ENV)
    if not path:
        yield
        return
    start, t0 = time.time(), time.monotonic()
    try:
        yield
    finally:
        line = json.dumps(
            {
                "phase": name,
                "start": round(start, 3),
                "seconds": round(time.monotonic() - t0, 3),
                "pid": os.getpid(),
            }
        )
        # one short line in append mode: lines of concurrent processes do not interleave
        with open(path, "a") as f:
            f.write(line + "\n")


def read(path: Path) -> list[dict[str, Any]]:
    """The phases a log holds, in the order they ended; none when it does not exist."""
    if not path.exists():
        return []
    return json_events(path.read_text().splitlines())
