"""The results folder: its layout, its lock, its stop requests, its sweep file, and the
software check (who may add runs to it).

Below the runner and above the store: everything that reads or guards a results
folder (the sweep runner, ``cell``, merge, package, verify, rerun, the report) asks
here, so the no-root readers never import the runner, the testbeds or the servers.

Layout of a results folder (the store's own files: quicbed.results.store)::

    DIR/sweep.json      the spec it belongs to, its digest, the software it was
                        measured with (SWEEP_FILE; only sweeps and merges write one)
    DIR/sweep.lock      held while a run writes the folder (LOCK_FILE)
    DIR/stop.request    ``quicbed stop DIR`` asks the run to stop after its cell in
                        progress (STOP_FILE; the run removes it)
    DIR/store.sqlite, DIR/hars/, DIR/logs/, DIR/traces/   quicbed.results.store

Runs are comparable only when they were made from one spec (its digest) with the
same builds of the software they ran: quicbed, the link emulator, the cell's browser
and its arms' stacks (used_software), each by its version and digest; adding other
runs to a folder is refused unless forced (pyperf refuses to add runs whose checked
metadata differ). What a record lacks is not checked (software_changes).
"""

from __future__ import annotations

import enum
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quicbed.errors import QuicbedError
from quicbed.paths import check_folder_target
from quicbed.results.provenance import (
    BULK_CLIENT,
    LINK_EMULATOR,
    component_identity,
    setup_identity,
)
from quicbed.results.store import now

if TYPE_CHECKING:  # annotations only: cellconfig imports the shapers' names
    from quicbed.spec.cellconfig import CellConfig
    from quicbed.spec.sweepspec import SweepSpec

SWEEP_FILE = "sweep.json"
LOCK_FILE = "sweep.lock"
STOP_FILE = "stop.request"
#: the software every cell runs, whatever its arms: quicbed itself and the link emulator
#: (a cell's browser and its arms' stacks are the cell's: used_software)
BASE_SOFTWARE = ("quicbed", LINK_EMULATOR)
#: recorded with every attempt but not checked: no load runs them (the controller's
#: Python; iperf3 measures the link for the receipt, which judges it by its own rules;
#: node drives the browser, which times the load)
UNCHECKED = ("python", "iperf3", "node")


class FailureReason(enum.Enum):
    """Why an attempt failed, as a code the runner decides on (the message is for people).

    The link's failures are worth one retry on a freshly applied link; the others are not.
    """

    LINK_OUT_OF_TOLERANCE = "link-out-of-tolerance"  # the receipt failed: nothing measured
    LINK_OPENING_CHECK = "link-opening-check"  # a shared receipt's link moved before the loads
    LINK_CLOSING_CHECK = "link-closing-check"  # the link moved during the loads
    LINK_CHANGED = "link-changed"  # the link was re-applied under a load
    #: an arm's every run, its replacements too, was spoiled by the link or the host (the
    #: emulator's own clock, or the host's CPU: quicbed.link.loadproof) and failed none
    #: of its own checks: the runs measured the host, not the protocols
    LINK_SPOILED_RUNS = "link-spoiled-runs"
    #: the host stayed busy (steal, other work) past the cell's wait for a quiet host
    HOST_BUSY = "host-busy"
    OTHER = "other"  # anything else: a server, the browser, the testbed

    @property
    def link(self) -> bool:
        """The link's failure: a freshly applied link may pass at once."""
        return self.value.startswith("link-")

    @property
    def unmeasured(self) -> bool:
        """The link or the host failed the attempt, not the protocols: what it holds
        proves nothing about them, so a resume measures the cell again."""
        return self.link or self is FailureReason.HOST_BUSY


# --- the folder lock ------------------------------------------------------------------
@contextmanager
def folder_lock(out: Path, what: str) -> Iterator[None]:
    """Hold ``out``'s lock for the block; the lock file says who holds it (PID and
    ``what``: "sweep", "cell", "merge"). A folder the block never claimed (no
    ``sweep.json`` and no store when it ends, e.g. refused by ``prepare_folder``) is
    left as it was: the lock file and the folder are removed again if this call made
    them."""
    check_folder_target(out, "--out")
    made_dir = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    lock = out / LOCK_FILE
    made_lock = not lock.exists()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise QuicbedError(f"{out} is in use by a running sweep") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "what": what}).encode())
        yield
    finally:
        if not (out / SWEEP_FILE).exists():
            if made_lock:
                lock.unlink(missing_ok=True)
            if made_dir and not any(out.iterdir()):
                out.rmdir()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def is_running(out: Path) -> bool:
    """True while some process holds the folder's lock."""
    path = out / LOCK_FILE
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# --- a request to stop between cells ---------------------------------------------------
def request_stop(out: Path) -> int | None:
    """Ask the sweep writing ``out`` to stop once its cell in progress ends; the PID of
    that run (from its lock file), or None if unknown.

    A file, not a signal: Ctrl-C reaches the browser and servers of the cell too and
    loses it, which on a long path is an hour of measurement. Refused (naming the
    folder) where no sweep is running, so a stale request cannot stop the next run.
    """
    if not (out / SWEEP_FILE).exists():
        raise QuicbedError(f"{out}: not a sweep's results folder (no {SWEEP_FILE})")
    if not is_running(out):
        raise QuicbedError(f"{out}: no sweep is running there, nothing to stop")
    try:
        held = json.loads((out / LOCK_FILE).read_text())
        pid: int | None = int(held["pid"])
        what = str(held["what"])
    except (OSError, ValueError, KeyError, TypeError):  # caught mid-write: a sweep's, say
        pid, what = None, "sweep"
    if what != "sweep":
        raise QuicbedError(
            f"{out}: a {what} is being written into it (PID {pid}), not a "
            "sweep: nothing stops it between cells"
        )
    (out / STOP_FILE).write_text(json.dumps({"run_pid": pid, "requested": now()}))
    return pid


def stop_requested(out: Path) -> bool:
    """True once ``quicbed stop`` asked the run writing ``out`` to stop."""
    return (out / STOP_FILE).exists()


def clear_stop(out: Path, *, keep_for_pid: int | None = None) -> bool:
    """Remove a stop request: the run that honoured it, at its end; a run at its start,
    unless the request names that run (``keep_for_pid``: one made in the run's first
    moments, after it took the lock, stands). True if one was removed."""
    path = out / STOP_FILE
    if keep_for_pid is not None:
        try:
            if json.loads(path.read_text()).get("run_pid") == keep_for_pid:
                return False
        except (OSError, ValueError, AttributeError):
            pass
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


# --- sweep.json -----------------------------------------------------------------------
def read_sweep(folder: Path) -> dict[str, Any]:
    """A folder's ``sweep.json``: the spec (with its name), its digest and the software,
    or an error naming the file if it is not one (the caller has seen that it exists)."""
    meta = Path(folder) / SWEEP_FILE
    try:
        held = json.loads(meta.read_text())
        if not (
            isinstance(held, dict)
            and isinstance(held["spec"]["name"], str)
            and isinstance(held["digest"], str)
            and isinstance(held["software"], dict)
        ):
            raise TypeError
    except (OSError, ValueError, TypeError, KeyError):
        raise QuicbedError(f"{meta} is not a quicbed sweep file (damaged?)") from None
    return held


def write_sweep(folder: Path, body: Mapping[str, Any]) -> None:
    """Write ``sweep.json`` beside and rename it into place: never half a file."""
    meta = Path(folder) / SWEEP_FILE
    tmp = meta.with_name(SWEEP_FILE + ".tmp")
    tmp.write_text(json.dumps(body, indent=2))
    tmp.replace(meta)


# --- comparability --------------------------------------------------------------------
def checked_software(software: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the software check compares of a software record (provenance.software's, or
    an attempt's recorded one): the software part of the set-up identity (quicbed
    .provenance.setup_identity: each component's version, digests and module versions,
    never its path) but UNCHECKED's. A sweep file keeps this for all components; a check
    compares those a cell uses (used_software)."""
    identity = setup_identity({"software": software or {}})["software"]
    return {k: v for k, v in identity.items() if k not in UNCHECKED}


def used_software(cells: Iterable[CellConfig]) -> tuple[str, ...]:
    """The components ``cells`` run, by the names provenance.software records them under:
    BASE_SOFTWARE, each cell's browsers (each arm's, as quicbed.spec.arms resolves it; the
    transfer client for bulk and compete cells) and every arm's stack (its class names
    its program: WebServer.software_name)."""
    from quicbed.servers import get_stack

    out = dict.fromkeys(BASE_SOFTWARE)
    for cfg in cells:
        stacks = [get_stack(a.stack) for a in cfg.resolved_arms()]
        if cfg.kind == "page":
            out.update(dict.fromkeys(cfg.browsers()))
        else:
            out[BULK_CLIENT] = None
        out.update(dict.fromkeys(s.software_name for s in stacks if s.software_name))
    return tuple(out)


def sweep_software(spec: SweepSpec | Mapping[str, Any]) -> tuple[str, ...] | None:
    """used_software of every cell of a spec (a sweep file's stored one too); None where
    a stored spec no longer plans (an older quicbed's): then every component is checked."""
    from quicbed.spec.sweepspec import SweepSpec, plan

    try:
        held = spec if isinstance(spec, SweepSpec) else SweepSpec(**spec)
        return used_software(pc.config for pc in plan(held))
    except (QuicbedError, ValueError, TypeError):
        return None


def software_changes(
    recorded: Mapping[str, Any],
    current: Mapping[str, Any],
    uses: Iterable[str] | None = None,
) -> dict[str, tuple[Any, Any]]:
    """component -> (recorded, current) for every component ``uses`` names (None: every
    checked one) whose recorded build differs from the current one, each side shown by
    the fields that differ.

    Only what the record holds is compared. A component it lacks was never checked (a
    folder measured before quicbed probed it stays resumable); one it holds that is not
    installed now has changed. Of a component both hold, the fields both hold are
    compared (an older record has a version or module versions but no digest: those
    are compared, the digest cannot be); two that share no field cannot be shown to be
    one build, and count as changed."""
    names = [k for k in recorded if k not in UNCHECKED] if uses is None else list(uses)
    out: dict[str, tuple[Any, Any]] = {}
    for k in dict.fromkeys(names):
        if k not in recorded:
            continue
        old, new = component_identity(recorded[k]), component_identity(current.get(k))
        common = [f for f in old or () if f in (new or ())]
        if old is None or new is None or not common:
            if old != new:
                out[k] = (old, new)
            continue
        diff = {f: _differing(old[f], new[f]) for f in common if old[f] != new[f]}
        if diff:
            out[k] = ({f: d[0] for f, d in diff.items()}, {f: d[1] for f, d in diff.items()})
    return out


def _differing(old: Any, new: Any) -> tuple[Any, Any]:
    """Two values of one field, of module versions or file digests only the entries that
    differ (a message names the module that changed, not the forty that did not)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
        return {k: old.get(k) for k in keys}, {k: new.get(k) for k in keys}
    return old, new


def _shown(side: Any) -> str:
    """One side of a change: a version as itself, digests cut to 12 characters (as git
    cuts commits), a component that is not there as "not installed"."""
    if side is None:
        return "not installed"
    if not isinstance(side, Mapping):
        return str(side)
    if set(side) == {"version"}:
        return str(side["version"])

    def value(v: Any) -> str:
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{k} {value(x)}" for k, x in v.items()) + "}"
        text = str(v)
        return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text

    return ", ".join(f"{f} {value(v)}" for f, v in side.items())


def describe_changes(changes: Mapping[str, tuple[Any, Any]]) -> str:
    """``chromium (72.0 -> 73.0), quicbed-quiche-server (sha256 0f1e2d3c4b5a -> 9a8b7c6d5e4f)``."""
    return ", ".join(f"{k} ({_shown(old)} -> {_shown(new)})" for k, (old, new) in changes.items())


def check_software(
    recorded: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    force: bool,
    what: str,
    uses: Iterable[str] | None = None,
) -> None:
    """Refuse, unless ``force``, to put runs of ``current`` software beside runs of
    ``recorded`` software: of the components ``uses`` names (a cell's or a sweep's,
    used_software; None: every checked one), by the rule of software_changes. ``what``
    says whose software differs from what."""
    changes = software_changes(recorded, current, uses)
    if changes and not force:
        raise QuicbedError(
            f"{what} ({describe_changes(changes)}): the runs would not be "
            "comparable; use --force to go on anyway"
        )


def check_spec(
    held: Mapping[str, Any], digest: str, *, force: bool, where: str, this: str, action: str
) -> None:
    """Refuse, unless ``force``, runs of another spec (by digest) than ``held``'s sweep."""
    if held["digest"] != digest and not force:
        raise QuicbedError(
            f"{where} holds another spec (digest {held['digest']}, {this} "
            f"{digest}); use --force to {action} anyway"
        )
