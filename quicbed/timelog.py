"""Where a run's time goes, phase by phase, for whoever asks (``QUICBED_TIME_LOG``).

A sweep's own figures (a receipt's ``duration_s``, a load's PLT) say what each part
measured, not what it cost the process that waited for it: the test suite's budget is
spent in receipts, spot checks, loads, waits for a quiet host and server starts, and a
regression there shows in nobody's log. With ``QUICBED_TIME_LOG`` naming a file, each
:func:`phase` appends one JSON line when it ends (its name, its start as epoch seconds,
its seconds, the pid), from any process of quicbed, CLI subprocesses included (they
inherit the variable); without it, :func:`phase` costs one dictionary lookup. The test
suite's summary (tests/conftest.py) reads the file back with :func:`read`. Where
several callers write one log at once (the test suite's parallel lane), each names
itself in ``QUICBED_TIME_TAG``, which every line then carries: the lines split by
caller, however their times overlap.

Each second counts in one phase only: a phase that runs inside another (the wait for
a quiet host after a load the host spoiled) is logged as its own, and the phase around
it logs its own seconds without it, so the phases of a process add up. A cell is not a
phase (its time is its caller's).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quicbed.jsonlines import json_events

ENV = "QUICBED_TIME_LOG"
#: who asked (any label the caller sets), kept on each line where set
TAG_ENV = "QUICBED_TIME_TAG"

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
    inner = _open_phases()
    start, t0 = time.time(), time.monotonic()
    inner.append(0.0)  # the seconds of the phases that will run inside this one
    try:
        yield
    finally:
        took = time.monotonic() - t0
        own = took - inner.pop()
        if inner:
            inner[-1] += took
        entry: dict[str, Any] = {
            "phase": name,
            "start": round(start, 3),
            "seconds": round(own, 3),
            "pid": os.getpid(),
        }
        tag = os.environ.get(TAG_ENV)
        if tag:
            entry["tag"] = tag
        line = json.dumps(entry)
        # one short line in append mode: lines of concurrent processes do not interleave
        with open(path, "a") as f:
            f.write(line + "\n")


_THREAD = threading.local()


def _open_phases() -> list[float]:
    """This thread's phases still running, innermost last: each one's inner seconds."""
    if not hasattr(_THREAD, "open"):
        _THREAD.open = []
    stack: list[float] = _THREAD.open
    return stack


def read(path: Path) -> list[dict[str, Any]]:
    """The phases a log holds, in the order they ended; none when it does not exist."""
    if not path.exists():
        return []
    return json_events(path.read_text().splitlines())
