"""Run a sweep: every planned cell into one results folder, resumable at any moment.

The folder belongs to one spec (``sweep.json`` holds it and its digest) and one set
of software versions; resuming into a folder of another spec or other versions is
refused unless forced. A lock file stops two runs from writing one folder, and says
"still running" to anyone who looks (a replication package refuses such a folder).

Resume is exact: a finished cell is skipped, an interrupted attempt continues with
the loads it lacks (each stored load is committed, a load in flight was never
stored), a failed cell stays failed (its receipt says why) unless the resume is asked
to retry failed cells. ``quicbed stop DIR`` ends a run between cells: the cell in
progress finishes, no other starts, and a resume continues from there.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.identity import testbed_id
from quicbed.link.hostpolicy import HostPolicy
from quicbed.link.proof import MAX_RECEIPT_AGE_S, ProvenLink, prove
from quicbed.link.quiet import HostWait
from quicbed.link.receipt import TCP_FIRST_S
from quicbed.link.session import shaped_link
from quicbed.paths import check_folder_target
from quicbed.results import provenance
from quicbed.results.folder import (
    LOCK_FILE,
    SWEEP_FILE,
    FailureReason,
    check_software,
    check_spec,
    checked_software,
    clear_stop,
    folder_lock,
    read_sweep,
    stop_requested,
    sweep_software,
    used_software,
    write_sweep,
)
from quicbed.results.rows import AttemptRow
from quicbed.results.store import DB_NAME, Store, now
from quicbed.run.cell import CellResult, run_cell, saying
from quicbed.run.console import warn
from quicbed.run.pool import TestbedLost, run_pool
from quicbed.run.shard import Shard, select
from quicbed.shapers import get_shaper
from quicbed.spec.cellconfig import CellConfig
from quicbed.spec.sweepspec import (
    PlannedCell,
    SweepSpec,
    cell_traces,
    estimate_seconds,
    plan,
    plan_warnings,
)
from quicbed.testbed.lifecycle import Testbed
from quicbed.testbed.local import LocalTestbed

#: a receipt's seconds beside its TCP (quicbed.link.receipt): pings, the delay and loss
#: streams (up to 20,000 datagrams where the loss is small), 2 UDP rate probes, retakes
RECEIPT_SECONDS = 1 + 6 + 2 * 2 + 3
# (one receipt per link condition: cells of one condition share it)


@dataclass
class SweepOutcome:
    out: Path
    planned: int
    done: int = 0
    failed: int = 0
    skipped: int = 0
    #: cells not started because ``quicbed stop`` asked the run to stop
    stopped: int = 0
    #: cells kept from before whose latest attempt failed (not on its link or host:
    #: those are measured again); with ``failed``, the cells failed now
    kept_failed: int = 0
    #: seconds the cells measured here waited for a quiet host
    waited_s: float = 0.0
    results: list[CellResult] = field(default_factory=list)
    #: testbed -> why it was taken out of a multi-testbed sweep
    lost: dict[str, str] = field(default_factory=dict)


def _software(tb: Testbed | None) -> dict[str, Any]:
    """The builds of the checked software where ``tb`` runs it (the rule: results.folder)."""
    return checked_software(provenance.software(tb))


def run_cell_into(
    cfg: CellConfig, out: Path, *, testbed: Testbed, force: bool = False, **kwargs: Any
) -> CellResult:
    """``quicbed cell``: measure one cell as a new attempt in ``out``, a new folder or one
    that holds runs already (a sweep's, earlier cells', a package's being rerun).

    Under the folder's lock, as a sweep writes it: a running sweep and a cell never
    write one folder at once. And by the rule ``run --resume`` follows: the report takes
    a cell's latest attempt, so an attempt made with other software than the folder's
    sweep (``sweep.json``) or than the cell's latest attempt would silently replace
    comparable runs; it is refused, naming each version that differs, unless ``force``.
    ``kwargs`` go to run_cell.
    """
    out = Path(out).resolve()
    with folder_lock(out, "cell"):
        recorded = _recorded_software(out, cfg.cell_id())
        if recorded:
            current = _software(testbed)
            uses = used_software([cfg])  # quicbed, the link emulator, its browser and stacks
            for what, software in recorded:
                check_software(software, current, force=force, what=what, uses=uses)
        return run_cell(cfg, out, testbed=testbed, **kwargs)


def _recorded_software(out: Path, cell_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(who, checked software builds) of the runs a new attempt of ``cell_id`` in
    ``out`` would join: the folder's sweep, the cell's latest attempt (where it
    recorded its software)."""
    found = []
    if (out / SWEEP_FILE).exists():
        held = read_sweep(out)
        found.append(
            (
                f"{out} holds sweep {held['spec']['name']!r}, measured with other software",
                held["software"],
            )
        )
    if (out / DB_NAME).exists():
        store = Store.open_readonly(out)
        try:
            attempts = store.attempts(cell_id)
        finally:
            store.close()
        prov = (attempts[-1].provenance or {}) if attempts else {}
        if "software" in prov:
            found.append(
                (
                    f"cell {cell_id} attempt {attempts[-1].attempt} in {out} was "
                    "measured with other software",
                    checked_software(prov["software"]),
                )
            )
    return found


def prepare_folder(
    out: Path,
    spec: SweepSpec,
    *,
    resume: bool,
    force: bool,
    testbed: Testbed | None = None,
    shard: Shard | None = None,
    measuring: bool = True,
) -> None:
    """Claim ``out`` for ``spec`` or check that it already belongs to it.

    The software is read where it runs (the testbed's hosts); the testbed itself is
    recorded, and a resume on other hosts is allowed as long as the software matches.
    A resume that will measure nothing (``measuring`` False: every cell kept) puts no
    run beside the folder's, so it is not refused for software that changed since.
    """
    held = check_folder(out, spec, resume=resume, force=force, shard=shard)
    if testbed is not None:  # a spec whose shaper cannot run here never claims a folder
        get_shaper(spec.shaper, testbed)
    if held is not None and not measuring:
        return
    software = _software(testbed)
    if held is not None:
        check_software(
            held["software"],
            software,
            force=force,
            what="software changed since this sweep started",
            uses=sweep_software(spec),
        )
        return
    out.mkdir(parents=True, exist_ok=True)
    body = {
        "format": 1,
        "created": now(),
        "digest": spec.digest(),
        "spec": spec.model_dump(mode="json"),
        "software": software,
        "testbed": testbed.describe() if testbed else None,
    }
    if shard is not None:
        body["shard"] = str(shard)
    write_sweep(out, body)


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
    held = read_sweep(out)
    if not resume:
        raise QuicbedError(
            f"{out} holds sweep {held['spec']['name']!r} already; use --resume to continue it "
            "or choose another --out"
        )
    check_spec(
        held, spec.digest(), force=force, where=str(out), this="this one", action="add to it"
    )
    had = held.get("shard")
    if had != (str(shard) if shard else None):
        raise QuicbedError(
            f"{out} holds {'shard ' + had if had else 'the whole sweep'}, not "
            f"{'shard ' + str(shard) if shard else 'the whole sweep'}: resume it as it was "
            "started, or choose another --out"
        )
    return held


def keeps(latest: AttemptRow | None, retry_failed: bool = False) -> bool:
    """Whether a resume keeps a cell whose latest attempt is ``latest``: a done cell,
    and a failed one (its problem says why) unless ``retry_failed``, or unless it failed
    on its link or its host (FailureReason.unmeasured): such an attempt proves nothing
    about the protocols, so it is measured again as a new attempt, as ``quicbed cell
    --from DIR --cell ID`` would."""
    if latest is None or latest.status == "running":
        return False
    if latest.status == "done":
        return True
    unmeasured = latest.reason is not None and FailureReason(latest.reason).unmeasured
    return not (retry_failed or unmeasured)


def kept_cells(out: Path, *, retry_failed: bool = False) -> set[str]:
    """The cells of the results folder ``out`` that resuming it keeps, read only: the
    plan's estimate on resume is of the cells still to measure."""
    return {cid for cid, a in _latest_attempts(out).items() if keeps(a, retry_failed)}


def estimate(cells: list[PlannedCell], receipt_tcp_seconds: float) -> float:
    """The pessimistic wall-time estimate of ``cells`` in seconds, their receipts' share
    from the iperf3 seconds (quicbed.spec.sweepspec.estimate_seconds)."""
    tcp = min(receipt_tcp_seconds, TCP_FIRST_S) + 2  # a pass ends TCP after its first run
    return estimate_seconds(cells, RECEIPT_SECONDS + 2 * tcp)


def check_budget(
    cells: list[PlannedCell],
    receipt_tcp_seconds: float,
    max_hours: float,
    yes: bool,
    host: HostPolicy | None = None,
) -> float:
    """The estimated seconds of ``cells``, refused above ``max_hours`` unless ``yes``.

    The one rule for sweeps and single cells alike, so a typo such as ``--runs
    100000`` is caught before the testbed is touched, as a too-large sweep is. With
    ``host``, a second estimate adds every load the cells may replace (its
    max_replaced): a bound that would take the run past ``max_hours`` is refused
    naming it. (The wait for a quiet host is not added: it is a limit, rarely spent.)
    """
    if not (0 < max_hours < math.inf):
        raise QuicbedError(f"--max-hours must be a number of hours > 0 (got {max_hours:g})")

    for w in plan_warnings(cells):  # the plan's warnings (small queues), before measuring
        warn(w)
    est = estimate(cells, receipt_tcp_seconds)
    what = "cell" if len(cells) == 1 else "cells"
    if est > max_hours * 3600 and not yes:
        raise QuicbedError(
            f"this would take about {est / 3600:.1f} h ({len(cells)} {what}), more than "
            f"--max-hours {max_hours:g}; pass --yes to run it"
        )
    if host is not None and not yes:
        worst = est + replacement_seconds(cells, host)
        if worst > max_hours * 3600:
            raise QuicbedError(
                f"--max-replaced {host.max_replaced}: replacing that many spoiled loads per "
                f"arm could take the {len(cells)} {what} to about {worst / 3600:.1f} h, "
                f"more than --max-hours {max_hours:g}; a smaller bound, or --yes"
            )
    return est


def replacement_seconds(cells: list[PlannedCell], host: HostPolicy) -> float:
    """The most the cells' replaced loads add to their estimate: per page cell, its
    measured loads' share scaled by max_replaced / runs (estimate_seconds' own model)."""
    extra = 0.0
    for pc in cells:
        cfg = pc.config
        if cfg.kind != "page" or not cfg.runs:
            continue
        loads = estimate_seconds([pc], 0.0)
        extra += loads * host.replaced_per_arm(cfg.runs) / cfg.runs
    return extra


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
    retry_failed: bool = False,
    force: bool = False,
    on_cell: Callable[[int, int, PlannedCell, str], None] | None = None,
    on_load: Callable[[str, int, int], None] | None = None,
    on_lost: Callable[[Testbed, str], None] | None = None,
) -> SweepOutcome:
    """Every cell of ``spec`` (or of its ``shard``) on ``testbed`` (default: the local
    testbed ``prefix``), or spread over ``testbeds`` (quicbed.run.pool).

    The cells of one link condition run back to back on one shaped link: one full
    receipt serves them while the link stays the one it measured (each cell opens
    with a spot check and closes with a check; a receipt older than
    MAX_RECEIPT_AGE_S is taken anew). A cell whose link failed is retried once on a
    freshly applied link, as a new attempt. An interrupted attempt is continued only
    on the testbed it started on; elsewhere the cell starts a new attempt. A stop
    request (``quicbed stop``) is honoured between cells and removed at the end; one
    left from an earlier run is removed at the start.
    """
    out = out.resolve()
    tbs = testbeds or [testbed or LocalTestbed(prefix)]
    for tb in tbs:
        if tb.kind != spec.testbed:
            raise QuicbedError(
                f"the spec's testbed is {spec.testbed}, testbed {tb.describe_short()} is {tb.kind}"
            )
    planned = plan(spec)
    cells = select(planned, shard) if shard is not None else planned
    outcome = SweepOutcome(out=out, planned=len(cells))
    with ExitStack() as held:
        for tb in tbs:
            held.enter_context(tb.claim("quicbed run"))
        held.enter_context(folder_lock(out, "sweep"))
        # what a resume keeps, read before the folder is checked: a resume that measures
        # nothing is not refused for software that changed since (prepare_folder)
        latest = _latest_attempts(out)
        kept: list[PlannedCell] = []
        work: list[list[PlannedCell]] = []
        for group in by_link(cells):
            todo: list[PlannedCell] = []
            for pc in group:
                prev = latest.get(pc.config.cell_id())
                (kept if keeps(prev, retry_failed) else todo).append(pc)
            if todo:
                work.append(todo)
        prepare_folder(
            out,
            spec,
            resume=resume,
            force=force,
            testbed=tbs[0],
            shard=shard,
            measuring=bool(work),
        )
        clear_stop(out, keep_for_pid=os.getpid())  # an earlier run's request is stale
        if work:
            for tb in tbs[1:]:
                _same_software(out, tb, force)
        store = Store(out, create=True)
        try:
            # the scenarios of every cell of the spec (also of other shards: merged
            # folders agree), for the report to group by; kept from earlier starts
            store.add_scenarios([(pc.config.cell_id(), pc.scenario) for pc in planned])
        finally:
            store.close()
        index = {pc.config.cell_id(): i for i, pc in enumerate(cells)}
        outcome.skipped = len(kept)
        outcome.kept_failed = sum(latest[pc.config.cell_id()].status == "failed" for pc in kept)
        if on_cell:
            for pc in kept:
                status = latest[pc.config.cell_id()].status
                on_cell(index[pc.config.cell_id()], len(cells), pc, f"kept ({status})")
        lock = threading.Lock()

        def run_group(
            tb: Testbed, group: list[PlannedCell], finished: Callable[[PlannedCell], None]
        ) -> None:
            _run_group(
                tb,
                group,
                out,
                spec,
                latest,
                lock,
                outcome,
                finished,
                strict=len(tbs) > 1,
                on_cell=lambda pc, what: (
                    on_cell(index[pc.config.cell_id()], len(cells), pc, what) if on_cell else None
                ),
                on_load=on_load,
            )

        try:
            if len(tbs) == 1 and work:
                tbs[0].up()  # once for the sweep; the caller tears it down (by default)
                for group in work:
                    run_group(tbs[0], group, lambda pc: None)
            elif work:
                outcome.lost = run_pool(tbs, work, run_group, on_lost=on_lost).lost
        finally:
            clear_stop(out)
    return outcome


def _latest_attempts(out: Path) -> dict[str, AttemptRow]:
    """Each cell's latest attempt in ``out``'s store ({} where there is none yet)."""
    if not (out / DB_NAME).exists():
        return {}
    store = Store.open_readonly(out)
    try:
        return store.latest_attempts()
    finally:
        store.close()


#: a testbed whose receipts fail on this many cells in a row leaves a multi-testbed sweep
LINK_FAILURES_IN_A_ROW = 2


def _run_group(
    tb: Testbed,
    group: list[PlannedCell],
    out: Path,
    spec: SweepSpec,
    latest: dict[str, AttemptRow],
    lock: threading.Lock,
    outcome: SweepOutcome,
    finished: Callable[[PlannedCell], None],
    *,
    strict: bool,
    on_cell: Callable[[PlannedCell, str], None],
    on_load: Callable[[str, int, int], None] | None,
) -> None:
    """One link condition's cells on one testbed. ``strict`` (several testbeds): a
    failed cell on a testbed that is gone, or receipts failing on cells in a row, raise
    TestbedLost before the cell counts, so another testbed measures it."""
    tcp_s = spec.receipt_tcp_seconds
    c0 = group[0].config
    here = tb.identity()
    link_failures = 0
    if _stopping(out, group, lock, outcome, on_cell):  # before shaping a link for nothing
        return
    with shaped_link(
        tb,
        c0.condition,
        c0.shaper,
        cc=c0.tcp_cc(),
        offloads_set=c0.offloads,
        emulator_priority=spec.host.emulator_priority,
    ) as shaped:
        proven: ProvenLink | None = None
        for i, pc in enumerate(group):
            if _stopping(out, group[i:], lock, outcome, on_cell):
                return
            on_cell(pc, "running" if not strict else f"running on {tb.describe_short()}")
            prev = latest.get(pc.config.cell_id())
            resume_attempt = None
            if prev and prev.status == "running":
                started_on = testbed_id((prev.provenance or {}).get("testbed"))
                resume_attempt = prev.attempt if started_on == here else None
            # the cell's wait for a quiet host, its receipt's included
            wait = HostWait(spec.host.quiet_wait_minutes * 60, saying(on_load))
            if proven is None or proven.age_s() > MAX_RECEIPT_AGE_S:
                proven = prove(shaped, tcp_s, c0.tcp_cc(), wait=wait)
            r = run_cell(
                pc.config,
                out,
                testbed=tb,
                link=proven,
                progress=on_load,
                resume_attempt=resume_attempt,
                traces=cell_traces(spec, pc.scenario),
                profile=spec.profile,
                host=spec.host,
                wait=wait,
            )
            if r.status == "failed" and r.link_failed:
                # one retry on a freshly applied link, as a new attempt
                shaped.reapply()
                wait = HostWait(spec.host.quiet_wait_minutes * 60, saying(on_load))
                proven = prove(shaped, tcp_s, c0.tcp_cc(), wait=wait)
                r = run_cell(
                    pc.config,
                    out,
                    testbed=tb,
                    link=proven,
                    progress=on_load,
                    traces=cell_traces(spec, pc.scenario),
                    profile=spec.profile,
                    host=spec.host,
                    wait=wait,
                )
                if r.link_failed:
                    proven = None  # the next cell starts from a fresh receipt
            if strict and r.status == "failed":
                gone = _gone(tb)
                link_failures = link_failures + 1 if r.link_failed else 0
                if gone:
                    raise TestbedLost(f"{gone} (cell {r.cell_id} attempt {r.attempt}: {r.problem})")
                if link_failures >= LINK_FAILURES_IN_A_ROW:
                    raise TestbedLost(
                        f"receipts failed on {link_failures} cells in a row (last: {r.problem})"
                    )
            else:
                link_failures = 0
            with lock:
                outcome.results.append(r)
                outcome.waited_s += r.waited_s
                if r.status == "done":
                    outcome.done += 1
                else:
                    outcome.failed += 1
            finished(pc)


def _stopping(
    out: Path,
    rest: list[PlannedCell],
    lock: threading.Lock,
    outcome: SweepOutcome,
    on_cell: Callable[[PlannedCell, str], None],
) -> bool:
    """True (the cells ``rest`` counted as stopped) if ``quicbed stop`` asked for it."""
    if not stop_requested(out):
        return False
    with lock:
        outcome.stopped += len(rest)
    for pc in rest:
        on_cell(pc, "not started: stop requested")
    return True


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
    held = read_sweep(out)
    check_software(
        held["software"],
        _software(tb),
        force=force,
        what=f"testbed {tb.describe_short()} runs other software than this sweep records",
        uses=sweep_software(held["spec"]),
    )
