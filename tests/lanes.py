"""make test's two lanes, and a measurement in the parallel one that runs alone.

``make test`` runs the tests that time nothing side by side (pytest-xdist), then the
tests that time something (a receipt, a page load, a flow) one at a time, so that no
measurement shares the two cores. A root test belongs to the parallel lane when it is
marked ``parallel``: it times nothing, or times something only inside :func:`alone`
(the fresh-machine test: minutes of installs that share the cores well, then two small
cells that must not).

:func:`alone` waits until the tests the other workers are running end, and holds
their next tests back until the block ends. Every test holds the lane lock shared for
its run (:func:`share`); ``alone`` holds it exclusively. ``flock(2)`` prefers no one, so a
worker that starts test after test could keep a waiting ``alone`` out for good: a gate
lock, held by ``alone`` while it waits and taken briefly by each test before its shared
hold, lets the waiting block in first. The locks live in the temporary directory, so a
second pytest session on the machine (``make check`` beside ``make test``) respects them
too; a process's locks go with it, however it ends.

Each test names itself in ``QUICBED_TIME_TAG`` (quicbed.timelog), so the time log's lines
say which test timed what: a test of the parallel lane that timed a measuring phase
outside ``alone`` fails, naming the phases.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from quicbed import timelog
from quicbed.jsonlines import json_events

#: the phases that time the link or a transfer: what must not share the cores
MEASURING = frozenset(
    {timelog.RECEIPT, timelog.SPOT_CHECK, timelog.LOAD, timelog.FLOW, timelog.COMPETE}
)
#: the tag of the lines a test's ``alone`` block writes (its own tag, marked)
ALONE = " (alone)"

_DIR = Path(os.environ.get("QUICBED_TEST_LANE_LOCKS", tempfile.gettempdir()))
_held: dict[str, int] = {}


def _file(name: str) -> int:
    """The lock file's descriptor, opened for reading only: flock needs no more, and a
    file another user made (root's ``make test`` before a user's ``make check``) opens
    for reading where it would not for writing, nor with O_CREAT where the temporary
    directory protects other users' files (fs.protected_regular)."""
    if name not in _held:
        path = _DIR / f"quicbed-test-lane.{name}"
        try:
            _held[name] = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            _held[name] = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    return _held[name]


def _take_shared() -> None:
    gate, lane = _file("gate"), _file("lane")
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(lane, fcntl.LOCK_SH)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)


@contextmanager
def share(nodeid: str) -> Iterator[None]:
    """The run of one test: the lane held shared, and the test named on the time log's
    lines of every process it starts."""
    before = os.environ.get(timelog.TAG_ENV)
    _take_shared()
    os.environ[timelog.TAG_ENV] = nodeid
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(timelog.TAG_ENV, None)
        else:
            os.environ[timelog.TAG_ENV] = before
        fcntl.flock(_file("lane"), fcntl.LOCK_UN)


@contextmanager
def alone() -> Iterator[None]:
    """The block runs while no other test of any pytest session on this machine does
    (called from within a test, which holds the lane shared)."""
    gate, lane = _file("gate"), _file("lane")
    tag = os.environ.get(timelog.TAG_ENV, "")
    fcntl.flock(lane, fcntl.LOCK_UN)
    fcntl.flock(gate, fcntl.LOCK_EX)
    try:
        fcntl.flock(lane, fcntl.LOCK_EX)
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)
    os.environ[timelog.TAG_ENV] = tag + ALONE
    try:
        yield
    finally:
        os.environ[timelog.TAG_ENV] = tag
        fcntl.flock(lane, fcntl.LOCK_UN)
        _take_shared()


def measured_outside_alone(log: Path, offset: int, nodeid: str) -> dict[str, int]:
    """The measuring phases ``nodeid`` logged after byte ``offset`` of the time log,
    outside :func:`alone`, counted by phase."""
    if not log.exists():
        return {}
    with open(log) as f:
        f.seek(offset)
        text = f.read()
    found: dict[str, int] = {}
    for e in json_events(text.splitlines()):
        if e.get("tag") == nodeid and e.get("phase") in MEASURING:
            found[e["phase"]] = found.get(e["phase"], 0) + 1
    return found
