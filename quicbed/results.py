"""The results folder: its layout, its lock, its sweep file, and what a stored attempt says.

Below the runner and above the store: everything that reads or guards a results
folder (the sweep runner, ``cell``, merge, package, verify, rerun, the report) asks
here, so the no-root readers never import the runner, the testbeds or the servers.

Layout of a results folder (the store's own files: quicbed.store)::

    DIR/sweep.json      the spec it belongs to, its digest, the software it was
                        measured with (SWEEP_FILE; only sweeps and merges write one)
    DIR/sweep.lock      held while a run writes the folder (LOCK_FILE)
    DIR/stop.request    ``quicbed stop DIR`` asks the run to stop after its cell in
                        progress (STOP_FILE; the run removes it)
    DIR/store.sqlite, DIR/hars/, DIR/logs/, DIR/traces/   quicbed.store

Runs are comparable only when they were made from one spec (its digest) with the
same versions of CHECKED_SOFTWARE; adding other runs to a folder is refused unless
forced (pyperf refuses to add runs whose checked metadata differ).
"""

from __future__ import annotations

import enum
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quicbed.arms import pairs
from quicbed.errors import QuicbedError
from quicbed.identity import testbed_id
from quicbed.paths import check_folder_target
from quicbed.stats import DEFAULT_ALPHA, Comparison, compare
from quicbed.store import Store, now

if TYPE_CHECKING:  # only compare_cell's annotation: cellconfig imports the shapers' names
    from quicbed.cellconfig import CellConfig

SWEEP_FILE = "sweep.json"
LOCK_FILE = "sweep.lock"
STOP_FILE = "stop.request"
#: software whose version change makes old and new runs not comparable
CHECKED_SOFTWARE = ("chromium", "apache", "quicbed-h3server", "quicbed-linkem", "quicbed")


class FailureReason(enum.Enum):
    """Why an attempt failed, as a code the runner decides on (the message is for people).

    The link's failures are worth one retry on a freshly applied link; the others are not.
    """

    LINK_OUT_OF_TOLERANCE = "link-out-of-tolerance"  # the receipt failed: nothing measured
    LINK_OPENING_CHECK = "link-opening-check"  # a shared receipt's link moved before the loads
    LINK_CLOSING_CHECK = "link-closing-check"  # the link moved during the loads
    LINK_CHANGED = "link-changed"  # the link was re-applied under a load
    OTHER = "other"  # anything else: a server, the browser, the testbed

    @property
    def link(self) -> bool:
        """The link's failure: a freshly applied link may pass."""
        return self.value.startswith("link-")


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
    """The CHECKED_SOFTWARE part of what provenance.software reported (or an attempt's
    provenance recorded): a component's version, or the dependencies it was built from."""
    sw = software or {}
    return {
        k: (v.get("deps") if isinstance(v, dict) else v)
        for k in CHECKED_SOFTWARE
        for v in [sw.get(k)]
    }


def software_changes(
    recorded: Mapping[str, Any], current: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """key -> (recorded, current) for every CHECKED_SOFTWARE key whose version differs."""
    return {
        k: (recorded.get(k), current.get(k))
        for k in CHECKED_SOFTWARE
        if recorded.get(k) != current.get(k)
    }


def describe_changes(changes: Mapping[str, tuple[Any, Any]]) -> str:
    """``chromium (72.0 -> 73.0), quicbed (0.1.0 -> 0.2.0)``."""
    return ", ".join(f"{k} ({old} -> {new})" for k, (old, new) in changes.items())


def check_software(
    recorded: Mapping[str, Any], current: Mapping[str, Any], *, force: bool, what: str
) -> None:
    """Refuse, unless ``force``, to put runs of ``current`` software beside runs of
    ``recorded`` software. ``what`` says whose software differs from what."""
    changes = software_changes(recorded, current)
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


# --- what an attempt says -------------------------------------------------------------
def compare_cell(
    store: Store,
    cell_id: str,
    attempt: int,
    cfg: CellConfig,
    extra_pairs: list[tuple[str, str]] | None = None,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
) -> dict[str, Comparison]:
    """The comparisons of one attempt, by pair name ``reference/candidate``
    (quicbed.arms.pairs): every arm against the reference arm, then ``extra_pairs``.
    ``test`` and ``alpha`` are the spec's (a plain cell's: Welch at 0.01)."""
    out = {}
    for a, b in pairs(cfg.resolved_arms(), extra_pairs):
        out[f"{a}/{b}"] = compare(
            store.plts(cell_id, attempt, a),
            store.plts(cell_id, attempt, b),
            planned=cfg.runs,
            alpha=alpha,
            test=test,
            tcp_arm=a,
            quic_arm=b,
        )
    return out


def measured_on(provenance: dict[str, Any] | None) -> dict[str, Any]:
    """Which testbed measured an attempt, from its provenance: its identity, a label, its
    hardware (Emulab's node type where the nodes report one, else the CPU model), the
    kernels and the OS images. A sweep over several testbeds reports by these."""
    prov = provenance or {}
    desc = prov.get("testbed") or {}
    if desc.get("kind") == "ssh":
        label = desc.get("source") or testbed_id(desc)
        nodes = prov.get("nodes") or {}
        descnodes = desc.get("nodes") or {}

        def per_role(get: Any) -> str | None:
            vals = {r: get(r) for r in ("server", "client", "bridge") if get(r)}
            if not vals:
                return None
            if len(set(vals.values())) == 1:
                return str(next(iter(vals.values())))
            return ", ".join(f"{r} {v}" for r, v in vals.items())

        def mach(key: str) -> Any:
            return lambda r: ((nodes.get(r) or {}).get("machine") or {}).get(key)

        hardware = per_role(
            lambda r: (
                (descnodes.get(r) or {}).get("hardware_type")
                or mach("node_type")(r)
                or mach("cpu")(r)
            )
        )
        kernel = per_role(mach("kernel"))
        image = per_role(lambda r: (descnodes.get(r) or {}).get("image") or mach("os")(r))
    else:
        m = prov.get("machine") or {}
        label = testbed_id(desc)
        hardware, kernel, image = m.get("cpu"), m.get("kernel"), m.get("os")
    return {
        "id": testbed_id(desc),
        "label": label,
        "hardware": hardware or "unknown",
        "kernel": kernel,
        "image": image,
    }
