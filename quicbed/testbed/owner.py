"""One owner per testbed: a command that changes or measures a testbed holds it alone.

Without this, ``quicbed link check`` in one shell could replace the link emulator
under a cell measuring in another, and the cell would store valid-looking loads of
the wrong link (issue 12 saw exactly that). So every command that shapes, measures,
creates or removes a testbed first claims it:

- the claim is an exclusive ``flock`` on a small file named after the testbed (the
  local testbed's prefix; the ssh testbed's set of hosts, on the controller). The
  kernel drops the lock when its process dies, even by ``kill -9``, so a dead
  owner never blocks anyone;
- the file records who holds it (PID, command, since when), for the refusal
  message and ``quicbed testbed status``; a clean release empties and removes it
  (one file per test prefix used to pile up in /run/quicbed), so a file still
  naming a dead PID means its owner was killed: the next owner takes over and is
  told to clean what was left (:attr:`Claim.stale`). Removing a lock file races
  with a claimer that opened it just before: a claimer checks, once it holds the
  lock, that the file it locked is still the one at the path, and tries again if not;
- a claim is re-entrant within one process (the CLI claims, then the runner and the
  shaped link claim again), and is never inherited by child processes (daemons do
  not keep a testbed claimed after quicbed is gone: ``os.open`` fds are not
  inheritable).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError

#: path -> [fd, depth] of the claims this process holds
_HELD: dict[str, list[int]] = {}


@dataclass(frozen=True)
class Claim:
    """A held claim; ``stale`` is the record of a killed previous owner, if there was one."""

    path: Path
    stale: dict[str, Any] | None


def _record(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096).decode(errors="replace").strip()
    if not raw:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return {"pid": None, "command": raw[:80], "since": "?"}
    return rec if isinstance(rec, dict) else None


def holder(path: Path) -> dict[str, Any] | None:
    """Who holds the claim at ``path`` now (their record), or None if nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _record(fd) or {"pid": None, "command": "?", "since": "?"}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def describe(rec: dict[str, Any]) -> str:
    return f"{rec.get('command', '?')!r} (PID {rec.get('pid', '?')}, since {rec.get('since', '?')})"


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise QuicbedError(f"cannot open the testbed's lock file {path}: {exc.strerror}") from None


def acquire(path: Path, name: str, what: str) -> Claim:
    """Claim ``path`` for this process (re-entrant) or refuse naming the holder."""
    key = str(path)
    if key in _HELD:
        _HELD[key][1] += 1
        return Claim(path, None)
    while True:
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            rec = _record(fd) or {}
            os.close(fd)
            raise QuicbedError(
                f"testbed {name} is in use by {describe(rec)}; wait for it to finish or stop it"
            ) from None
        if _still_at(fd, path):
            break
        os.close(fd)  # its holder released and removed it meanwhile: lock the new one
    stale = _record(fd)
    if stale is not None and stale.get("pid") == os.getpid():
        stale = None  # our own record from an earlier claim in this process
    rec = {
        "pid": os.getpid(),
        "command": what,
        "argv": sys.argv[1:],
        "since": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(rec).encode())
    _HELD[key] = [fd, 1]
    return Claim(path, stale)


def release(path: Path) -> None:
    """Drop one level of the claim; the last one empties the record and unlocks."""
    key = str(path)
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] > 0:
        return
    fd = held[0]
    del _HELD[key]
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    with contextlib.suppress(OSError):  # e.g. another user's file in a sticky folder
        path.unlink()  # while still locked: a claimer that opened it sees it went
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    """True if the open file ``fd`` is the file at ``path`` (not one since removed)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold off Ctrl-C and SIGTERM while cleaning up, so a second Ctrl-C cannot leave a
    half-removed testbed; signals that arrived meanwhile are delivered afterwards."""
    blocked = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
