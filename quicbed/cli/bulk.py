"""``quicbed bulk`` and ``quicbed compete``: the one-shot commands of quicbed.run.bulk.

Not registered by itself: quicbed/cli/main.py adds them with ``bulk_cli.register(app)``
(two top-level commands), so the CLI's owner decides where they appear.

Imports are at the top but for the machinery a command runs, imported where it is used
and tagged ``# lazy``: the runner and the statistics load scipy and the report
matplotlib (0.5 to 0.9 s), the transfer records (~14 ms) and the store sqlite3 (~8
ms); every start of ``quicbed``, ``--help`` included, would pay for them (measured on
top of what --help loads; python -X importtime -m quicbed --help shows what it loads).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from quicbed.cli.options import (
    LinkOptions,
    OffloadsOpt,
    ProfileOpt,
    TestbedOptions,
    TracesOpt,
    options,
)
from quicbed.errors import QuicbedError
from quicbed.model.link import RECEIPT_TCP_SECONDS, LinkCondition
from quicbed.profile import check_profile
from quicbed.run.console import print_json, print_transfer
from quicbed.shapers import help_text as shaper_help
from quicbed.spec.arms import parse_cli
from quicbed.spec.bulkobjects import object_path
from quicbed.spec.cellconfig import CellConfig, make_cell, parse_flows
from quicbed.testbed.lifecycle import Testbed
from quicbed.testbed.local import LocalTestbed
from quicbed.traces import check_level

if TYPE_CHECKING:  # the runner loads when a command runs, not when the CLI starts
    from quicbed.analysis.transfers import BulkSummary, CompeteSummary
    from quicbed.run.bulk import Progress

OutOpt = Annotated[
    Path,
    typer.Option(
        "--out",
        help="Results folder (a store, as a cell's); its report is built there (not with --json).",
    ),
]
ArmsOpt = Annotated[
    str,
    typer.Option(
        help="Arms, comma-separated, with settings as for cell --arms (h2:tcp_sack=false,h3)."
    ),
]
ForceOpt = Annotated[bool, typer.Option(help="Add to a folder measured with other software.")]
ShaperOpt = Annotated[
    str,
    typer.Option(help=f"Link shaper: {shaper_help()}"),
]
TcpSecondsOpt = Annotated[float, typer.Option(help="iperf3 TCP seconds of the receipt.")]
SizeOpt = Annotated[str, typer.Option(help="Bulk object size: 10MB, 100MB, 1GB (decimal).")]
CcOpt = Annotated[str, typer.Option(help="Congestion control of every arm.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the record as JSON.")]


#: the cell's fields as these commands spell them: an error names the option typed
_OPTIONS = {
    "runs": "--reps",
    "transfer.duration_s": "--duration",
    "transfer.stagger_s": "--stagger",
    "transfer.size": "--size",
    "transfer.flows": "--flows",
}


def _as_typed(e: QuicbedError) -> QuicbedError:
    """``cell: runs: runs must be >= 2 ...`` -> ``--reps: runs must be >= 2 ...``."""
    msg = str(e)
    for field_name, option in _OPTIONS.items():
        head = f"cell: {field_name}: "
        if msg.startswith(head):
            return QuicbedError(f"{option}: {msg[len(head) :]}")
    return e


def _progress(what: str, done: int, total: int) -> None:
    typer.echo(f"{what} ({done}/{total})" if total else what)  # no total: a sentence


def _report(out: Path) -> None:
    from quicbed.report import build as report  # lazy: matplotlib and scipy, ~0.9 s

    rep = report.build(out)
    typer.echo(f"report: {rep.out / 'index.html'} (numbers: {rep.out / 'transfers.csv'})")


# --- one transfer cell, measured as a sweep measures a cell (quicbed.run.sweep) -----------
def run_bulk(
    cond: LinkCondition,
    out: Path,
    *,
    arms: list[str] | None = None,
    reps: int = 5,
    size: str = "100MB",
    duration_s: float | None = None,
    cc: str = "cubic",
    testbed: Testbed | None = None,
    shaper: str = "auto",
    receipt_tcp_seconds: float = RECEIPT_TCP_SECONDS,
    progress: Progress | None = None,
    force: bool = False,
    profile: str = "none",
    offloads: str | dict[str, str] = "",
    traces: str = "none",
) -> BulkSummary:
    """One bulk cell measured into the results folder ``out`` (as ``quicbed cell`` measures
    a page cell: a new attempt, its receipt, the link checked around it), its record
    read back with its summary. ``arms`` as ``--arms`` spells them (``h2:tcp_sack=false``)."""
    from quicbed.analysis.transfers import BulkSummary  # lazy: scipy, ~0.5 s

    names, settings = parse_cli(",".join(arms or ("h2", "h3")))  # "h2:tcp_sack=false", ...
    cfg = make_cell(
        condition=cond,
        page=object_path(size),
        kind="bulk",
        runs=reps,
        warmup=0,
        arms=names,
        arm_settings=settings,
        cc=cc,
        shaper=shaper,
        offloads=offloads,
        transfer={"size": size, "duration_s": duration_s},
    )
    r = _measure(cfg, out, testbed, receipt_tcp_seconds, progress, force, profile, traces)
    assert isinstance(r, BulkSummary)
    return r


def run_compete(
    cond: LinkCondition,
    out: Path,
    *,
    groups: list[tuple[str, int]],
    reps: int = 2,
    duration_s: float = 30.0,
    stagger_s: float = 0.0,
    size: str = "100MB",
    cc: str = "cubic",
    testbed: Testbed | None = None,
    shaper: str = "auto",
    receipt_tcp_seconds: float = RECEIPT_TCP_SECONDS,
    progress: Progress | None = None,
    force: bool = False,
    profile: str = "none",
    offloads: str | dict[str, str] = "",
    traces: str = "none",
) -> CompeteSummary:
    """One compete cell (``groups``: (arm, flows), e.g. [("h3", 1), ("h2", 4)], ``reps``
    repetitions) measured into the results folder ``out``, its record read back."""
    from quicbed.analysis.transfers import CompeteSummary  # lazy: scipy, ~0.5 s

    cfg = make_cell(
        condition=cond,
        page=object_path(size),
        kind="compete",
        runs=reps,
        warmup=0,
        arms=tuple(a for a, _ in groups),
        cc=cc,
        shaper=shaper,
        offloads=offloads,
        transfer={
            "size": size,
            "duration_s": duration_s,
            "flows": tuple(groups),
            "stagger_s": stagger_s,
        },
    )
    r = _measure(cfg, out, testbed, receipt_tcp_seconds, progress, force, profile, traces)
    assert isinstance(r, CompeteSummary)
    return r


def _measure(
    cfg: CellConfig,
    out: Path,
    testbed: Testbed | None,
    receipt_tcp_seconds: float,
    progress: Progress | None,
    force: bool,
    profile: str = "none",
    traces: str = "none",
) -> BulkSummary | CompeteSummary:
    from quicbed.analysis.transfers import stored_transfer  # lazy: scipy, ~0.5 s
    from quicbed.results.store import Store  # lazy: sqlite3 and the store, ~8 ms
    from quicbed.run.sweep import run_cell_into  # lazy: scipy, ~0.65 s

    tb = testbed or LocalTestbed("qb")
    for _ in range(2):  # one retry on a freshly applied link, as a sweep gives a cell
        res = run_cell_into(
            cfg,
            out,
            testbed=tb,
            force=force,
            receipt_tcp_seconds=receipt_tcp_seconds,
            progress=progress,
            profile=profile,
            traces=traces,
        )
        if not res.link_failed:
            break
    if res.status != "done":
        raise QuicbedError(
            f"{cfg.kind} cell {res.cell_id} attempt {res.attempt} failed: {res.problem}"
        )
    store = Store.open_readonly(out)
    try:
        return stored_transfer(store, res.cell_id, res.attempt)
    finally:
        store.close()


@options("link", LinkOptions)
@options("tb", TestbedOptions)
def bulk(
    *,
    link: LinkOptions,
    tb: TestbedOptions,
    out: OutOpt,
    arms: ArmsOpt = "h2,h3",
    reps: Annotated[int, typer.Option(help="Downloads per arm.")] = 5,
    size: SizeOpt = "100MB",
    duration: Annotated[
        float | None, typer.Option(help="Seconds per download (the object repeated).")
    ] = None,
    cc: CcOpt = "cubic",
    shaper: ShaperOpt = "auto",
    offloads: OffloadsOpt = "",
    tcp_seconds: TcpSecondsOpt = RECEIPT_TCP_SECONDS,
    force: ForceOpt = False,
    profile: ProfileOpt = None,
    traces: TracesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure one bulk cell: goodput per arm, --reps downloads each, one flow at a time, on
    a link its receipt proves.

    The arms are interleaved, and each is compared with the TCP arm. The cell is stored
    in --out as a sweep's cells are, and the folder's report is built (not with --json).
    """
    bed = tb.open("quicbed bulk")
    try:
        r = run_bulk(
            link.condition(),
            out,
            arms=arms.split(","),
            reps=reps,
            size=size,
            duration_s=duration,
            cc=cc,
            testbed=bed,
            shaper=shaper,
            offloads=offloads,
            receipt_tcp_seconds=tcp_seconds,
            progress=_progress,
            force=force,
            profile=check_profile(profile or "none"),
            traces=check_level(traces or "none"),
        )
    except QuicbedError as e:
        raise _as_typed(e) from None
    finally:
        bed.close()
    if as_json:
        print_json(r.model_dump(mode="json"))
        return
    print_transfer(r)
    _report(out)


@options("link", LinkOptions)
@options("tb", TestbedOptions)
def compete(
    *,
    link: LinkOptions,
    tb: TestbedOptions,
    out: OutOpt,
    flows: Annotated[str, typer.Option(help="Flows per arm, e.g. h3x1,h2x4.")] = "h3x1,h2x1",
    reps: Annotated[int, typer.Option(help="Repetitions (all flows each time).")] = 3,
    duration: Annotated[float, typer.Option(help="Seconds each flow runs.")] = 30.0,
    stagger: Annotated[float, typer.Option(help="Seconds between flow starts.")] = 0.0,
    size: SizeOpt = "100MB",
    cc: CcOpt = "cubic",
    shaper: ShaperOpt = "auto",
    offloads: OffloadsOpt = "",
    tcp_seconds: TcpSecondsOpt = RECEIPT_TCP_SECONDS,
    force: ForceOpt = False,
    profile: ProfileOpt = None,
    traces: TracesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure one compete cell: K flows of one arm against M of another on one bottleneck.

    Each flow's throughput and share, Jain's fairness index and the bottleneck's queue,
    --reps times. The cell is stored in --out as a sweep's cells are, and the folder's
    report is built (not with --json).
    """
    bed = tb.open("quicbed compete")
    try:
        r = run_compete(
            link.condition(),
            out,
            groups=list(parse_flows(flows)),
            reps=reps,
            duration_s=duration,
            stagger_s=stagger,
            size=size,
            cc=cc,
            testbed=bed,
            shaper=shaper,
            offloads=offloads,
            receipt_tcp_seconds=tcp_seconds,
            progress=_progress,
            force=force,
            profile=check_profile(profile or "none"),
            traces=check_level(traces or "none"),
        )
    except QuicbedError as e:
        raise _as_typed(e) from None
    finally:
        bed.close()
    if as_json:
        print_json(r.model_dump(mode="json"))
        return
    print_transfer(r)
    _report(out)


def register(app: typer.Typer) -> None:
    """Add ``bulk`` and ``compete`` to the quicbed CLI."""
    app.command("bulk")(bulk)
    app.command("compete")(compete)
