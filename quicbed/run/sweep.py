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
from functools import partial
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.identity import testbed_id
from quicbed.link.hostpolicy import HostPolicy
from quicbed.link.proof import MAX_RECEIPT_AGE_S, ProvenLink, prove
from quicbed.link.quiet import HostWait
from quicbed.link.receipt import TCP_FIRST_S
from quicbed.link.session import ShapedLink, shaped_link
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
        s = _Sweep(out, spec, tbs, _latest_attempts(out), outcome, cells, on_cell, on_load)
        kept, work = _split_kept(cells, s.latest, retry_failed)
        _claim_folder(s, planned, measuring=bool(work), resume=resume, force=force, shard=shard)
        _count_kept(s, kept)
        try:
            _measure_work(s, work, on_lost)
        finally:
            clear_stop(out)
    return outcome


@dataclass
class _Sweep:
    """What every phase of one sweep run shares - its folder, spec, testbeds, the
    cells' latest attempts, the outcome the groups add to under one lock, the caller's
    callbacks - in one object, so the phases of a link group take it, not eleven
    parameters each."""

    out: Path
    spec: SweepSpec
    testbeds: list[Testbed]
    #: each cell's latest attempt before this run (what a resume keeps or continues)
    latest: dict[str, AttemptRow]
    outcome: SweepOutcome
    cells: list[PlannedCell]
    on_cell: Callable[[int, int, PlannedCell, str], None] | None
    on_load: Callable[[str, int, int], None] | None
    #: guards ``outcome``: the groups of a multi-testbed sweep add to it from threads
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        #: a cell's place in the plan, as the caller's ``on_cell`` names it
        self.index = {pc.config.cell_id(): i for i, pc in enumerate(self.cells)}

    @property
    def strict(self) -> bool:
        """Several testbeds: a failing one hands its cells on (_failures_in_a_row)."""
        return len(self.testbeds) > 1

    def say(self, pc: PlannedCell, what: str) -> None:
        """Tell the caller what became of ``pc`` (its place among the run's cells)."""
        if self.on_cell:
            self.on_cell(self.index[pc.config.cell_id()], len(self.cells), pc, what)

    def host_wait(self) -> HostWait:
        """A cell's wait for a quiet host, its receipt's included: a new one per cell
        and per retry, so each gets the whole limit."""
        return HostWait(self.spec.host.quiet_wait_minutes * 60, saying(self.on_load))


def _split_kept(
    cells: list[PlannedCell], latest: dict[str, AttemptRow], retry_failed: bool
) -> tuple[list[PlannedCell], list[list[PlannedCell]]]:
    """The cells a resume keeps, and the rest grouped by link condition: only groups
    with a cell to measure shape a link."""
    kept: list[PlannedCell] = []
    work: list[list[PlannedCell]] = []
    for group in by_link(cells):
        todo: list[PlannedCell] = []
        for pc in group:
            prev = latest.get(pc.config.cell_id())
            (kept if keeps(prev, retry_failed) else todo).append(pc)
        if todo:
            work.append(todo)
    return kept, work


def _claim_folder(
    s: _Sweep,
    planned: list[PlannedCell],
    *,
    measuring: bool,
    resume: bool,
    force: bool,
    shard: Shard | None,
) -> None:
    """Make the folder the sweep's before any cell runs: claimed or checked, an earlier
    run's stop request gone, every testbed's software the folder's, and the scenarios
    of the whole plan stored for the report."""
    out, tbs = s.out, s.testbeds
    prepare_folder(
        out,
        s.spec,
        resume=resume,
        force=force,
        testbed=tbs[0],
        shard=shard,
        measuring=measuring,
    )
    clear_stop(out, keep_for_pid=os.getpid())  # an earlier run's request is stale
    if measuring:
        for tb in tbs[1:]:
            _same_software(out, tb, force)
    store = Store(out, create=True)
    try:
        # the scenarios of every cell of the spec (also of other shards: merged
        # folders agree), for the report to group by; kept from earlier starts
        store.add_scenarios([(pc.config.cell_id(), pc.scenario) for pc in planned])
    finally:
        store.close()


def _count_kept(s: _Sweep, kept: list[PlannedCell]) -> None:
    """The kept cells in the outcome and told to the caller: a resumed sweep reports
    every planned cell, measured now or before."""
    s.outcome.skipped = len(kept)
    s.outcome.kept_failed = sum(s.latest[pc.config.cell_id()].status == "failed" for pc in kept)
    for pc in kept:
        s.say(pc, f"kept ({s.latest[pc.config.cell_id()].status})")


def _measure_work(
    s: _Sweep, work: list[list[PlannedCell]], on_lost: Callable[[Testbed, str], None] | None
) -> None:
    """The link groups to measure, on the one testbed in turn or shared out by the pool
    (which records the testbeds it took out)."""
    tbs = s.testbeds
    if len(tbs) == 1 and work:
        tbs[0].up()  # once for the sweep; the caller tears it down (by default)
        for group in work:
            _run_group(s, tbs[0], group, lambda pc: None)
    elif work:
        s.outcome.lost = run_pool(tbs, work, partial(_run_group, s), on_lost=on_lost).lost


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
    s: _Sweep, tb: Testbed, group: list[PlannedCell], finished: Callable[[PlannedCell], None]
) -> None:
    """One link condition's cells on one testbed. ``s.strict`` (several testbeds): a
    failed cell on a testbed that is gone, or receipts failing on cells in a row, raise
    TestbedLost before the cell counts, so another testbed measures it."""
    c0 = group[0].config
    cc = c0.tcp_cc()
    here = tb.identity()
    link_failures = 0
    if _stopping(s, group):  # before shaping a link for nothing
        return
    with shaped_link(
        tb,
        c0.condition,
        c0.shaper,
        cc=cc,
        offloads_set=c0.offloads,
        emulator_priority=s.spec.host.emulator_priority,
    ) as shaped:
        proven: ProvenLink | None = None
        for i, pc in enumerate(group):
            if _stopping(s, group[i:]):
                return
            s.say(pc, "running" if not s.strict else f"running on {tb.describe_short()}")
            resume_attempt = _resume_attempt(s.latest.get(pc.config.cell_id()), here)
            r, proven = _measure(s, tb, shaped, pc, proven, resume_attempt, cc)
            link_failures = _failures_in_a_row(tb, r, link_failures) if s.strict else 0
            with s.lock:
                s.outcome.results.append(r)
                s.outcome.waited_s += r.waited_s
                if r.status == "done":
                    s.outcome.done += 1
                else:
                    s.outcome.failed += 1
            finished(pc)


def _resume_attempt(prev: AttemptRow | None, here: str) -> int | None:
    """The interrupted attempt a cell continues, only on the testbed it started on (its
    stored loads were measured there); None, a new attempt, elsewhere or otherwise."""
    if prev and prev.status == "running":
        started_on = testbed_id((prev.provenance or {}).get("testbed"))
        return prev.attempt if started_on == here else None
    return None


def _measure(
    s: _Sweep,
    tb: Testbed,
    shaped: ShapedLink,
    pc: PlannedCell,
    proven: ProvenLink | None,
    resume_attempt: int | None,
    cc: str,
) -> tuple[CellResult, ProvenLink | None]:
    """One cell on the group's link, and the receipt the next cell may reuse (None: it
    takes a fresh one). The receipt is taken anew when there is none or it is older
    than MAX_RECEIPT_AGE_S; a cell whose link failed says nothing about the protocols,
    so it is retried once on a freshly applied link, as a new attempt."""
    tcp_s = s.spec.receipt_tcp_seconds
    wait = s.host_wait()
    if proven is None or proven.age_s() > MAX_RECEIPT_AGE_S:
        proven = prove(shaped, tcp_s, cc, wait=wait)
    r = _run_one(s, tb, pc, proven, wait, resume_attempt)
    if r.status == "failed" and r.link_failed:
        # one retry on a freshly applied link, as a new attempt
        shaped.reapply()
        wait = s.host_wait()
        proven = prove(shaped, tcp_s, cc, wait=wait)
        r = _run_one(s, tb, pc, proven, wait, None)
        if r.link_failed:
            return r, None  # the next cell starts from a fresh receipt
    return r, proven


def _run_one(
    s: _Sweep,
    tb: Testbed,
    pc: PlannedCell,
    proven: ProvenLink,
    wait: HostWait,
    resume_attempt: int | None,
) -> CellResult:
    """run_cell as every cell of the sweep runs: on the proven link, with the spec's
    traces, profile and host policy."""
    return run_cell(
        pc.config,
        s.out,
        testbed=tb,
        link=proven,
        progress=s.on_load,
        resume_attempt=resume_attempt,
        traces=cell_traces(s.spec, pc.scenario),
        profile=s.spec.profile,
        host=s.spec.host,
        wait=wait,
    )


def _failures_in_a_row(tb: Testbed, r: CellResult, before: int) -> int:
    """The receipts failed on cells in a row after ``r`` (``before``: up to it); raises
    TestbedLost where a failed cell finds ``tb`` gone or receipts failing too often, so
    the pool gives its cells to another testbed instead of counting them failed."""
    if r.status != "failed":
        return 0
    gone = _gone(tb)
    failures = before + 1 if r.link_failed else 0
    if gone:
        raise TestbedLost(f"{gone} (cell {r.cell_id} attempt {r.attempt}: {r.problem})")
    if failures >= LINK_FAILURES_IN_A_ROW:
        raise TestbedLost(f"receipts failed on {failures} cells in a row (last: {r.problem})")
    return failures


def _stopping(s: _Sweep, rest: list[PlannedCell]) -> bool:
    """True (the cells ``rest`` counted as stopped) if ``quicbed stop`` asked for it."""
    if not stop_requested(s.out):
        return False
    with s.lock:
        s.outcome.stopped += len(rest)
    for pc in rest:
        s.say(pc, "not started: stop requested")
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
