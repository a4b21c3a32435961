"""Run a sweep: every planned cell into one results folder, resumable at any moment.

The folder belongs to one spec (``sweep.json`` holds it and its digest) and one set
of software versions; resuming into a folder of another spec or other versions is
refused unless forced. A lock file stops two runs from writing one folder, and says
"still running" to anyone who looks (a replication package refuses such a folder).

Resume is exact: a finished cell is skipped, an interrupted attempt continues with
the loads it lacks (each stored load is committed, a load in flight was never
stored), a failed cell stays failed (its receipt says why).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed import provenance
from quicbed.cell import CellResult, run_cell
from quicbed.errors import QuicbedError
from quicbed.link.proof import MAX_RECEIPT_AGE_S, ProvenLink, prove
from quicbed.link.session import shaped_link
from quicbed.paths import check_folder_target
from quicbed.pool import TestbedLost, run_pool
from quicbed.shard import Shard, select
from quicbed.spec import PlannedCell, SweepSpec, estimate_seconds, plan
from quicbed.store import Store, now
from quicbed.testbed.base import Testbed, testbed_id
from quicbed.testbed.local import LocalTestbed

SWEEP_FILE = "sweep.json"
LOCK_FILE = "sweep.lock"
#: software whose version change makes old and new runs not comparable
CHECKED_SOFTWARE = ("chromium", "apache", "quicbed-h3server", "quicbed-linkem", "quicbed")
RECEIPT_SECONDS = 8 + 2 * 2 + 2 * 5  # ping, UDP rate and probes, beside 2 x TCP
# (one receipt per link condition: cells of one condition share it)


@dataclass
class SweepOutcome:
    out: Path
    planned: int
    done: int = 0
    failed: int = 0
    skipped: int = 0
    results: list[CellResult] = field(default_factory=list)
    #: testbed -> why it was taken out of a multi-testbed sweep
    lost: dict[str, str] = field(default_factory=dict)


def _software(tb: Testbed | None) -> dict[str, Any]:
    sw = provenance.software(tb)
    out: dict[str, Any] = {}
    for k in CHECKED_SOFTWARE:
        v = sw.get(k)
        out[k] = v.get("deps") if isinstance(v, dict) else v
    return out


@contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the block. A folder the block never claimed (no
    ``sweep.json`` when it ends, e.g. refused by ``prepare_folder``) is left as it
    was: the lock file and the folder are removed again if this call made them."""
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
        os.write(fd, f"{os.getpid()}\n".encode())
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


def prepare_folder(
    out: Path, spec: SweepSpec, *, resume: bool, force: bool, testbed: Testbed | None = None,
    shard: Shard | None = None,
) -> None:  # fmt: skip
    """Claim ``out`` for ``spec`` or check that it already belongs to it.

    The software is read where it runs (the testbed's hosts); the testbed itself is
    recorded, and a resume on other hosts is allowed as long as the software matches.
    """
    meta = out / SWEEP_FILE
    held = check_folder(out, spec, resume=resume, force=force, shard=shard)
    if testbed is not None:  # a spec whose shaper cannot run here never claims a folder
        from quicbed.link.shapers import get_shaper

        get_shaper(spec.shaper, testbed)
    software = _software(testbed)
    if held is not None:
        changed = [k for k in CHECKED_SOFTWARE if held["software"].get(k) != software.get(k)]
        if changed and not force:
            raise QuicbedError(
                f"software changed since this sweep started ({', '.join(changed)}): its runs "
                "would not be comparable; use --force to continue anyway"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    body = {"format": 1, "created": now(), "digest": spec.digest(),
            "spec": spec.model_dump(mode="json"), "software": software,
            "testbed": testbed.describe() if testbed else None}  # fmt: skip
    if shard is not None:
        body["shard"] = str(shard)
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2))
    tmp.replace(meta)


def check_folder(
    out: Path, spec: SweepSpec, *, resume: bool, force: bool, shard: Shard | None = None
) -> dict[str, Any] | None:
    """Whether ``out`` may take ``spec``, read without touching anything (``run`` asks
    before it opens a testbed; ``prepare_folder`` again under the lock). Returns the
    folder's ``sweep.json`` when resuming, None for a new or empty folder."""
    check_folder_target(out, "--out")
    meta = out / SWEEP_FILE
    if not meta.exists():
        if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()):
            raise QuicbedError(
                f"{out} is not empty and holds no quicbed sweep; choose another --out"
            )
        return None
    try:
        held = json.loads(meta.read_text())
        name, digest, _ = held["spec"]["name"], held["digest"], held["software"]
    except (OSError, ValueError, TypeError, KeyError):
        raise QuicbedError(f"{meta} is not a quicbed sweep file (damaged?)") from None
    if not resume:
        raise QuicbedError(
            f"{out} holds sweep {name!r} already; use --resume to continue it or choose "
            "another --out"
        )
    if digest != spec.digest() and not force:
        raise QuicbedError(
            f"{out} holds another spec (digest {digest}, this one {spec.digest()}); "
            "use --force to add to it anyway"
        )
    had = held.get("shard")
    if had != (str(shard) if shard else None):
        raise QuicbedError(
            f"{out} holds {'shard ' + had if had else 'the whole sweep'}, not "
            f"{'shard ' + str(shard) if shard else 'the whole sweep'}: resume it as it was "
            "started, or choose another --out"
        )
    return held


def check_budget(
    cells: list[PlannedCell], receipt_tcp_seconds: float, max_hours: float, yes: bool
) -> float:
    """The estimated seconds of ``cells``, refused above ``max_hours`` unless ``yes``.

    The one rule for sweeps and single cells alike, so a typo such as ``--runs
    100000`` is caught before the testbed is touched, as a too-large sweep is.
    """
    if not (0 < max_hours < math.inf):
        raise QuicbedError(f"--max-hours must be a number of hours > 0 (got {max_hours:g})")
    est = estimate_seconds(cells, RECEIPT_SECONDS + 2 * (receipt_tcp_seconds + 2))
    if est > max_hours * 3600 and not yes:
        what = "cell" if len(cells) == 1 else "cells"
        raise QuicbedError(
            f"this would take about {est / 3600:.1f} h ({len(cells)} {what}), more than "
            f"--max-hours {max_hours:g}; pass --yes to run it"
        )
    return est


def by_link(cells: list[PlannedCell]) -> list[list[PlannedCell]]:
    """Cells grouped by link condition (first appearance first, plan order within), so
    one shaped link and its receipt serve a whole group."""
    groups: dict[str, list[PlannedCell]] = {}
    for pc in cells:
        groups.setdefault(pc.config.link_key(), []).append(pc)
    return list(groups.values())


def run_sweep(
    spec: SweepSpec,
    out: Path,
    *,
    prefix: str = "qb",
    testbed: Testbed | None = None,
    testbeds: list[Testbed] | None = None,
    shard: Shard | None = None,
    resume: bool = False,
    force: bool = False,
    on_cell: Callable[[int, int, PlannedCell, str], None] | None = None,
    on_load: Callable[[str, int, int], None] | None = None,
    on_lost: Callable[[Testbed, str], None] | None = None,
) -> SweepOutcome:
    """Every cell of ``spec`` (or of its ``shard``) on ``testbed`` (default: the local
    testbed ``prefix``), or spread over ``testbeds`` (quicbed.pool).

    The cells of one link condition run back to back on one shaped link: one full
    receipt serves them while the link stays the one it measured (each cell opens
    with a spot check and closes with a check; a receipt older than
    MAX_RECEIPT_AGE_S is taken anew). A cell whose link failed is retried once on a
    freshly applied link, as a new attempt. An interrupted attempt is continued only
    on the testbed it started on; elsewhere the cell starts a new attempt.
    """
    out = out.resolve()
    tbs = testbeds or [testbed or LocalTestbed(prefix)]
    for tb in tbs:
        if tb.kind != spec.testbed:
            raise QuicbedError(f"the spec's testbed is {spec.testbed}, testbed "
                               f"{tb.describe_short()} is {tb.kind}")  # fmt: skip
    cells = plan(spec)
    if shard is not None:
        cells = select(cells, shard)
    outcome = SweepOutcome(out=out, planned=len(cells))
    with ExitStack() as held:
        for tb in tbs:
            held.enter_context(tb.claim("quicbed run"))
        held.enter_context(folder_lock(out))
        prepare_folder(out, spec, resume=resume, force=force, testbed=tbs[0], shard=shard)
        for tb in tbs[1:]:
            _same_software(out, tb, force)
        store = Store(out, create=True)
        latest = store.latest_attempts()
        store.close()
        index = {pc.config.cell_id(): i for i, pc in enumerate(cells)}
        work: list[list[PlannedCell]] = []
        for group in by_link(cells):
            todo = []
            for pc in group:
                prev = latest.get(pc.config.cell_id())
                if prev and prev["status"] in ("done", "failed"):
                    outcome.skipped += 1
                    if on_cell:
                        on_cell(index[pc.config.cell_id()], len(cells), pc,
                                f"kept ({prev['status']})")  # fmt: skip
                else:
                    todo.append(pc)
            if todo:
                work.append(todo)
        lock = threading.Lock()

        def run_group(tb: Testbed, group: list[PlannedCell],
                      finished: Callable[[PlannedCell], None]) -> None:  # fmt: skip
            _run_group(tb, group, out, spec, latest, lock, outcome, finished,
                       strict=len(tbs) > 1,
                       on_cell=lambda pc, what: on_cell(index[pc.config.cell_id()], len(cells),
                                                        pc, what) if on_cell else None,
                       on_load=on_load)  # fmt: skip

        if len(tbs) == 1:
            tbs[0].up()  # once for the sweep; the caller tears it down (quicbed run: by default)
            for group in work:
                run_group(tbs[0], group, lambda pc: None)
        else:
            outcome.lost = run_pool(tbs, work, run_group, on_lost=on_lost).lost
    return outcome


#: a testbed whose receipts fail on this many cells in a row leaves a multi-testbed sweep
LINK_FAILURES_IN_A_ROW = 2


def _run_group(
    tb: Testbed, group: list[PlannedCell], out: Path, spec: SweepSpec,
    latest: dict[str, dict[str, Any]], lock: threading.Lock, outcome: SweepOutcome,
    finished: Callable[[PlannedCell], None], *, strict: bool,
    on_cell: Callable[[PlannedCell, str], None],
    on_load: Callable[[str, int, int], None] | None,
) -> None:  # fmt: skip
    """One link condition's cells on one testbed. ``strict`` (several testbeds): a
    failed cell on a testbed that is gone, or receipts failing on cells in a row, raise
    TestbedLost before the cell counts, so another testbed measures it."""
    tcp_s = spec.receipt_tcp_seconds
    c0 = group[0].config
    here = tb.identity()
    link_failures = 0
    with shaped_link(tb, c0.condition, c0.shaper, cc=c0.tcp_cc()) as shaped:
        proven: ProvenLink | None = None
        for pc in group:
            on_cell(pc, "running" if not strict else f"running on {tb.describe_short()}")
            prev = latest.get(pc.config.cell_id())
            resume_attempt = None
            if prev and prev["status"] == "running":
                started_on = testbed_id((prev["provenance"] or {}).get("testbed"))
                resume_attempt = prev["attempt"] if started_on == here else None
            if proven is None or proven.age_s() > MAX_RECEIPT_AGE_S:
                proven = prove(shaped, tcp_s, c0.tcp_cc())
            r = run_cell(pc.config, out, testbed=tb, link=proven, progress=on_load,
                         resume_attempt=resume_attempt, traces=spec.traces)  # fmt: skip
            if r.status == "failed" and r.link_failed:
                # one retry on a freshly applied link, as a new attempt
                shaped.reapply()
                proven = prove(shaped, tcp_s, c0.tcp_cc())
                r = run_cell(pc.config, out, testbed=tb, link=proven, progress=on_load,
                             traces=spec.traces)  # fmt: skip
                if r.link_failed:
                    proven = None  # the next cell starts from a fresh receipt
            if strict and r.status == "failed":
                gone = _gone(tb)
                link_failures = link_failures + 1 if r.link_failed else 0
                if gone:
                    raise TestbedLost(f"{gone} (cell {r.cell_id} attempt {r.attempt}: "
                                      f"{r.problem})")  # fmt: skip
                if link_failures >= LINK_FAILURES_IN_A_ROW:
                    raise TestbedLost(f"receipts failed on {link_failures} cells in a row "
                                      f"(last: {r.problem})")  # fmt: skip
            else:
                link_failures = 0
            with lock:
                outcome.results.append(r)
                if r.status == "done":
                    outcome.done += 1
                else:
                    outcome.failed += 1
            finished(pc)


def _gone(tb: Testbed) -> str | None:
    """Why ``tb`` cannot measure any more (a role unreachable or missing), or None."""
    try:
        status = tb.status()
    except Exception as exc:  # any failure to ask is an answer
        return f"testbed unreachable: {exc}"
    if status.get("complete"):
        return None
    roles = status.get("roles") or {}
    bad = [r for r, v in roles.items() if not v or not v.get("reachable", True)]
    return f"testbed incomplete ({', '.join(bad) or 'roles missing'})"


def _same_software(out: Path, tb: Testbed, force: bool) -> None:
    """A second testbed of one sweep must run the software the folder records."""
    held = json.loads((out / SWEEP_FILE).read_text())["software"]
    software = _software(tb)
    changed = [k for k in CHECKED_SOFTWARE if held.get(k) != software.get(k)]
    if changed and not force:
        raise QuicbedError(
            f"testbed {tb.describe_short()} runs other software than this sweep records "
            f"({', '.join(changed)}): its runs would not be comparable; use --force anyway"
        )
