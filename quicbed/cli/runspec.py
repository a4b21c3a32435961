"""Running a sweep spec from the command line: ``quicbed run``'s and ``quicbed
reproduce``'s one way (:func:`run_spec`), in steps: plan, open the testbeds, measure,
print.

Its own module so that both commands import it (quicbed.cli.main imports
quicbed.cli.reproduce, which may not import main back). The runner and the cell checks
load scipy (about 0.65 s, python -X importtime -m quicbed --help): imported where they
are used, each tagged ``# lazy``, so that ``quicbed --help`` does not pay for them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import Progress, TaskID

from quicbed.backends import get_backend, hosts_kind
from quicbed.cli.options import SweepTestbedOptions, owned
from quicbed.errors import QuicbedError
from quicbed.profile import check_profile
from quicbed.run.console import out, print_sweep_result, progress
from quicbed.run.shard import Shard, parse_shard, select
from quicbed.shapers import get_shaper
from quicbed.spec.sweepspec import PlannedCell, SweepSpec, plan
from quicbed.testbed.lifecycle import Testbed
from quicbed.traces import check_level

if TYPE_CHECKING:  # the runner loads when a sweep runs, not when the CLI starts
    from quicbed.run.sweep import SweepOutcome

#: ``quicbed run``'s exit status when ``quicbed stop`` ended it between cells
STOPPED_EXIT = 3


@dataclass(frozen=True)
class SweepRun:
    """How a sweep is to run, as ``run`` and ``reproduce`` state it: their shared options
    travel as one value (each command declares its own, with its own help)."""

    again: str  # the command that continues the sweep after a stop
    tb: SweepTestbedOptions
    resume: bool
    retry_failed: bool
    force: bool
    yes: bool
    max_hours: float
    keep_testbed: bool
    traces: str | None
    shard: str | None
    profile: str | None = None  # reproduce has no --profile: the spec's


@dataclass(frozen=True)
class _Plan:
    """A sweep as it will run, decided before any testbed is opened: the spec with the
    options' overrides, the cells of this shard and those not kept from before."""

    spec: SweepSpec
    part: Shard | None
    hosts: list[str]
    cells: list[PlannedCell]
    todo: list[PlannedCell]
    est_s: float  # the pessimistic estimate of ``todo``, in seconds

    def what(self) -> str:
        """How the output names the run: ``sweep`` or ``shard 1/2 of sweep``."""
        return f"shard {self.part} of sweep" if self.part else "sweep"


def run_spec(spec: SweepSpec, out_dir: str, run: SweepRun) -> None:
    """Run a sweep spec into ``out_dir`` (``run``'s and ``reproduce``'s one way): what
    needs no testbed is checked before one is opened, and the exit status says how the
    sweep ended (STOPPED_EXIT, 1 if a cell failed)."""
    sweep = _plan(spec, Path(out_dir), run)
    beds = _open_testbeds(sweep, run.tb)
    _announce(sweep, len(beds), out_dir)
    result = _measure(sweep, out_dir, run, beds)
    _finish(result, sweep, out_dir, run.again)


def _plan(spec: SweepSpec, out: Path, run: SweepRun) -> _Plan:
    """The sweep's cells and its time estimate, every option checked and the results
    folder read (not touched): a typo or too long a sweep is refused in a moment."""
    from quicbed.run.sweep import check_budget, check_folder, kept_cells  # lazy: scipy, ~0.65 s

    if run.retry_failed and not run.resume:
        raise QuicbedError(
            "--retry-failed measures a sweep's failed cells again: it needs "
            "--resume (and the sweep's --out)"
        )
    part = parse_shard(run.shard) if run.shard is not None else None
    hosts = run.tb.host_list()
    spec = _with_overrides(spec, run, hosts)
    cells = plan(spec)
    if part is not None:
        cells = select(cells, part)
    held = check_folder(out, spec, resume=run.resume, force=run.force, shard=part)
    kept = kept_cells(out, retry_failed=run.retry_failed) if held is not None else set()
    todo = [pc for pc in cells if pc.config.cell_id() not in kept]
    est = check_budget(todo, spec.receipt_tcp_seconds, run.max_hours, run.yes, spec.host)
    return _Plan(spec=spec, part=part, hosts=hosts, cells=cells, todo=todo, est_s=est)


def _with_overrides(spec: SweepSpec, run: SweepRun, hosts: list[str]) -> SweepSpec:
    """``spec`` with what the options override: the testbed kind (--testbed, or ssh
    for --hosts), the traces and the profile (neither is part of the spec's digest)."""
    kind = run.tb.kind or (hosts_kind() if hosts else None)
    if kind is not None and kind != spec.testbed:
        get_backend(kind, "--testbed")  # refuses an unknown kind by name
        spec = spec.model_copy(update={"testbed": kind})
    if run.traces is not None:  # overrides the spec's level (not part of its digest)
        spec = spec.model_copy(update={"traces": check_level(run.traces)})
    if run.profile is not None:  # overrides the spec's (not part of its digest either)
        spec = spec.model_copy(update={"profile": check_profile(run.profile)})
    return spec


def _open_testbeds(sweep: _Plan, tb: SweepTestbedOptions) -> list[Testbed]:
    """Every testbed of the sweep opened and able to shape and load its cells, or none
    kept open: a sweep never starts on some of its testbeds only."""
    from quicbed.link import kept  # lazy: scipy, ~0.65 s
    from quicbed.run.cell import check_components

    beds: list[Testbed] = []
    try:
        for h in sweep.hosts or [None]:  # type: ignore[list-item]  # None: the local testbed
            beds.append(tb.open("quicbed run", kind=sweep.spec.testbed, hosts=h))
            get_shaper(sweep.spec.shaper, beds[-1])
            beds[-1].cpu.check()  # CPU per role (quicbed.roles.cpuaccounting)
            check_components([pc.config for pc in sweep.todo], beds[-1])
            kept.check_cells(beds[-1], [pc.config for pc in sweep.todo])
    except BaseException:
        for bed in beds:
            bed.close()
        raise
    return beds


def _announce(sweep: _Plan, n_beds: int, out_dir: str) -> None:
    """One line before the sweep starts: its cells, those kept, its time, its folder."""
    cells, todo = sweep.cells, sweep.todo
    where = f" on {n_beds} testbeds" if n_beds > 1 else ""
    before = f" ({len(cells) - len(todo)} kept from before)" if len(todo) < len(cells) else ""
    out.print(
        f"{sweep.what()} {sweep.spec.name!r}: {len(cells)} cells{before}, about "
        f"{sweep.est_s / 60 / n_beds:.0f} min{where}; results in {out_dir}"
    )


def _measure(sweep: _Plan, out_dir: str, run: SweepRun, beds: list[Testbed]) -> SweepOutcome:
    """The sweep measured on ``beds``, each owned (and torn down unless --keep-testbed)
    throughout, with a bar of its cells and one of the cell in progress's loads."""
    from quicbed.run.sweep import run_sweep  # lazy: scipy, ~0.65 s

    with ExitStack() as owning, progress() as bar:
        for bed in beds:
            owning.enter_context(owned(bed, "quicbed run", run.keep_testbed))
        on_cell, cells_task = _cell_bar(bar, len(sweep.cells), len(beds))
        result = run_sweep(
            sweep.spec,
            Path(out_dir),
            testbeds=beds,
            resume=run.resume,
            retry_failed=run.retry_failed,
            force=run.force,
            shard=sweep.part,
            on_cell=on_cell,
            on_load=_load_bar(bar),
            on_lost=_say_lost,
        )
        if not result.stopped:
            bar.update(cells_task, completed=len(sweep.cells))
    return result


def _cell_bar(
    bar: Progress, n_cells: int, n_beds: int
) -> tuple[Callable[[int, int, PlannedCell, str], None], TaskID]:
    """The bar of the sweep's cells and what moves it (run_sweep's ``on_cell``)."""
    cells_task = bar.add_task("cells", total=n_cells)
    seen: set[str] = set()

    def on_cell(i: int, n: int, pc: PlannedCell, what: str) -> None:
        c = pc.config
        seen.add(c.cell_id())  # several testbeds: cells start out of plan order
        done = i if n_beds == 1 else max(0, len(seen) - n_beds)
        bar.update(
            cells_task,
            completed=done,
            description=f"{pc.scenario}: {c.page}, {c.condition.label()} ({what})",
        )

    return on_cell, cells_task


def _load_bar(bar: Progress) -> Callable[[str, int, int], None]:
    """The bar of the loads of the cell in progress (run_sweep's ``on_load``)."""
    loads_task = bar.add_task("loads", total=1)

    def on_load(arm: str, done: int, total: int) -> None:
        if not total:  # a sentence, e.g. a wait for a quiet host (run.cell.Progress)
            bar.update(loads_task, description=arm)
            return
        bar.update(loads_task, completed=done, total=total, description=f"loads ({arm})")

    return on_load


def _say_lost(bed: Testbed, why: str) -> None:
    """A testbed taken out of a sweep over several, said when it happens."""
    out.print(f"[red]testbed {bed.describe_short()} taken out of the sweep:[/] {why}")


def _finish(result: SweepOutcome, sweep: _Plan, out_dir: str, again: str) -> None:
    """What the sweep did, and its exit status: 3 when stopped on request (with the
    command that continues it), 1 when a cell failed, kept ones included."""
    print_sweep_result(result, sweep.what(), sweep.spec.name, out_dir)
    if result.stopped:
        out.print(
            f"stopped on request with {result.stopped} cell(s) not started; continue: {again}"
        )
        raise typer.Exit(STOPPED_EXIT)
    if result.failed or result.kept_failed:  # every cell failed now, kept ones too
        raise typer.Exit(1)
