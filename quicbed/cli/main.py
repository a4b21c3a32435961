"""The ``quicbed`` command line.

Errors a user can cause end as one line, ``quicbed: error: ...``, exit status 2;
Ctrl-C and SIGTERM unwind through the same ``finally`` blocks as errors, so a
shaped link, an emulator or a testbed made by the command is always removed.

The options several commands share are typed groups (quicbed.cli.options) whose
defaults are the models' (CellConfig, LinkCondition, SweepSpec); what a command
prints is quicbed.run.console's. docs/cli.md lists every flag (python -m
quicbed.cli.reference writes it).

A command's help is its docstring, paragraphs apart by a blank line; flowing() makes
each paragraph one line for every command, so that the terminal wraps the sentences.

Imports are at the top but for a command's heavy machinery, imported where it is used
and tagged ``# lazy``: the runner and the statistics load scipy and the report
matplotlib (0.3 to 0.9 s each), the results folder's readers sqlite3 and the store (8
to 25 ms each, about 45 ms together); every start of ``quicbed``, ``--help`` included,
would pay for them (measured on top of what --help loads; python -X importtime -m
quicbed --help shows what it loads).
"""

from __future__ import annotations

import inspect
import json
import re
import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.progress import Progress
from typer._click.exceptions import ClickException, NoArgsIsHelpError

from quicbed.backends import get_backend
from quicbed.cli import bulk as bulk_cli
from quicbed.cli import pages as pages_cli
from quicbed.cli import reproduce as reproduce_cli
from quicbed.cli import traces as traces_cli
from quicbed.cli.options import (
    CC,
    CELL_LINK,
    LIFECYCLE,
    MAX_HOURS,
    SHAPER,
    CellOptions,
    HostOptions,
    KeepOpt,
    LinkOptions,
    MaxHoursOpt,
    OffloadsOpt,
    ProfileOpt,
    ReceiptTcpSecondsOpt,
    ShaperOpt,
    SweepTestbedOptions,
    TestbedOptions,
    TracesOpt,
    YesOpt,
    need_root,
    options,
    owned,
    refuse_early,
)
from quicbed.cli.runspec import SweepRun, run_spec
from quicbed.errors import QuicbedError
from quicbed.link.hostpolicy import HostPolicy
from quicbed.link.session import shaped_link, take_down
from quicbed.model.link import RECEIPT_TCP_SECONDS, check_tcp_seconds
from quicbed.paths import check_folder_target
from quicbed.profile import check_profile
from quicbed.roles import offloads as nic
from quicbed.run.console import (
    note,
    out,
    print_cell,
    print_json,
    print_package,
    print_receipt,
    print_testbed_status,
    progress,
    warn,
)
from quicbed.spec.cellconfig import CellConfig, make_cell
from quicbed.spec.significance import METRICS
from quicbed.spec.sweepspec import PlannedCell, load_spec
from quicbed.testbed.sshlab import SshLab
from quicbed.traces import check_level

if TYPE_CHECKING:  # the runner loads when a cell runs, not when the CLI starts
    from quicbed.run.cell import CellResult

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="quicbed: testbed-as-code for QUIC vs TCP web performance research.",
)
testbed_app = typer.Typer(
    no_args_is_help=True, help="The testbed: network namespaces here, or three ssh hosts."
)
link_app = typer.Typer(no_args_is_help=True, help="Link emulation and its fidelity receipt.")
app.add_typer(testbed_app, name="testbed")
app.add_typer(link_app, name="link")
app.add_typer(pages_cli.app, name="pages")
app.add_typer(traces_cli.app, name="traces")


# --- testbed --------------------------------------------------------------------------
@testbed_app.command("up")
@options("tb", TestbedOptions, only=LIFECYCLE)
def testbed_up(
    *,
    sshd: Annotated[
        bool, typer.Option("--sshd", help="Also sshd in each namespace (an ssh lab).")
    ] = False,
    tb: TestbedOptions,
) -> None:
    """Create the server, bridge and client namespaces (idempotent), or reach the ssh hosts.

    With --testbed ssh: reach each host, make its work folder and stop what a crashed
    run left there.

    With --sshd the namespaces become three ssh hosts with a control network and an
    inventory file, to run the ssh testbed on this machine.
    """
    if sshd:
        if not get_backend(tb.kind).makes_namespaces:  # the lab is namespaces with sshd
            raise QuicbedError("--sshd makes a local ssh lab; it goes with --testbed local")
        need_root("quicbed testbed up --sshd")
        inv = SshLab(tb.prefix).up()
        out.print(f"testbed {tb.prefix}: up with sshd; hosts: {inv}")
        out.print(f"next: quicbed link check --testbed ssh --hosts {inv} --rate 10 --rtt 36")
        return
    bed = tb.open("quicbed testbed up")
    try:
        with bed.claim("quicbed testbed up"):
            made = bed.up()
    finally:
        bed.close()
    state = "created" if made else bed.found_ready
    out.print(f"testbed {tb.name()}: {state}")


@testbed_app.command("down")
@options("tb", TestbedOptions, only=LIFECYCLE)
def testbed_down(tb: TestbedOptions) -> None:
    """Remove everything quicbed made on the testbed, also after a crash (idempotent).

    The link's shaping and any host-wide setting it held; locally the namespaces and
    their processes, on ssh hosts the daemons quicbed started and its work folders.
    """
    bed = tb.open("quicbed testbed down")
    try:
        with bed.claim("quicbed testbed down"):
            removed = []
            if get_backend(tb.kind).makes_namespaces:  # an ssh lab's hosts, cleared first
                removed += SshLab(tb.prefix).clear_hosts()
            removed += bed.teardown()
    finally:
        bed.close()
    out.print(
        f"testbed {tb.name()}: "
        + (f"removed {', '.join(removed)}" if removed else "nothing to remove")
    )


@testbed_app.command("status")
@options("tb", TestbedOptions, only=LIFECYCLE)
def testbed_status(
    *,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    tb: TestbedOptions,
) -> None:
    """What exists now, read from the kernel (or from the ssh hosts), and who is using it."""
    bed = tb.open("quicbed testbed status")
    try:
        info = bed.status()
        info["owner"] = bed.holder()
        from quicbed.link import kept  # lazy: scipy, ~0.5 s

        info["kept_link"] = kept.status(bed)
    finally:
        bed.close()
    if as_json:
        print_json(info)
    else:
        print_testbed_status(info, tb.kind, tb.name())


# --- link -----------------------------------------------------------------------------
@link_app.command("check", context_settings={"ignore_unknown_options": False})
@options("link", LinkOptions)
@options("tb", TestbedOptions)
def link_check(
    *,
    link: LinkOptions,
    shaper: ShaperOpt = SHAPER,
    tb: TestbedOptions,
    tcp_seconds: Annotated[
        float, typer.Option(help="iperf3 TCP seconds per direction.")
    ] = RECEIPT_TCP_SECONDS,
    cc: Annotated[str, typer.Option(help="TCP congestion control.")] = CC,
    offloads: OffloadsOpt = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the receipt as JSON.")] = False,
    out_file: Annotated[
        str | None, typer.Option("--out", help="Also write the receipt here.")
    ] = None,
) -> None:
    """Apply a condition, measure what the link delivers, judge it (exit 1 if out of tolerance).

    The receipt is printed (--json: as JSON) and, with --out, written to a new file.
    """
    from quicbed.link.receipt import measure  # lazy: scipy, ~0.5 s

    cond = link.condition()
    check_tcp_seconds(tcp_seconds, "--tcp-seconds")
    setting = nic.parse(offloads)
    nic.check_shaper(shaper, setting)
    if out_file:  # refused now, not after the measurement
        if Path(out_file).exists() or Path(out_file).is_symlink():
            raise QuicbedError(f"--out: {out_file} exists; the receipt is never written over")
        if not Path(out_file).parent.is_dir():
            raise QuicbedError(f"--out: folder {Path(out_file).parent} does not exist")
    bed = tb.open("quicbed link check")
    try:
        with shaped_link(bed, cond, shaper, cc=cc, offloads_set=setting) as shaped:
            receipt = measure(
                bed, cond, shaped.shaper, shaped.tuning, tcp_seconds=tcp_seconds, cc=cc
            )
    finally:
        bed.close()
    data = receipt.model_dump(mode="json")
    if out_file:
        with open(out_file, "x") as f:
            json.dump(data, f, indent=2)
    if as_json:
        print_json(data)
    else:
        print_receipt(receipt)
    if not receipt.passed:
        raise typer.Exit(1)


@link_app.command("up", context_settings={"ignore_unknown_options": False})
@options("link", LinkOptions)
@options("tb", TestbedOptions)
@options("host", HostOptions, only=("emulator_priority", "quiet_wait"))
def link_up(
    *,
    link: LinkOptions,
    shaper: ShaperOpt = SHAPER,
    tb: TestbedOptions,
    host: HostOptions,
    receipt_tcp_seconds: ReceiptTcpSecondsOpt = RECEIPT_TCP_SECONDS,
    cc: Annotated[str, typer.Option(help="TCP congestion control.")] = CC,
    offloads: OffloadsOpt = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print the receipt as JSON.")] = False,
) -> None:
    """Shape a link, prove it, and keep it for later commands (exit 1, nothing kept, if its
    receipt is out of tolerance).

    Every later cell, sweep or transfer on this testbed whose cells need this link uses it
    as it is, with this receipt for 30 min (a new one after that, kept too), each cell
    opening and closing with a spot check; one that needs another link is refused. The
    link stays until quicbed link down or quicbed testbed down. Idempotent: a link kept
    with these settings whose receipt still holds is left as it is.
    """
    from quicbed.link import kept  # lazy: scipy, ~0.5 s
    from quicbed.link.proof import MAX_RECEIPT_AGE_S, prove
    from quicbed.link.quiet import HostWait

    cond = link.condition()
    check_tcp_seconds(receipt_tcp_seconds, "--receipt-tcp-seconds")
    setting = nic.parse(offloads)
    nic.check_shaper(shaper, setting)
    policy = host.policy()
    bed = tb.open("quicbed link up")
    try:
        with bed.claim("quicbed link up"):
            found = kept.read(bed)
            with shaped_link(
                bed,
                cond,
                shaper,
                cc=cc,
                offloads_set=setting,
                emulator_priority=policy.emulator_priority,
                keep=True,
            ) as shaped:
                wait = HostWait(policy.quiet_wait_minutes * 60, None)
                proven = prove(shaped, receipt_tcp_seconds, cc, wait=wait)
    finally:
        bed.close()
    receipt = proven.receipt
    if as_json:
        print_json(receipt.model_dump(mode="json"))
    else:
        print_receipt(receipt)
    if not receipt.passed:
        out.print(f"testbed {tb.name()}: nothing kept (the receipt is out of tolerance)")
        raise typer.Exit(1)
    again = found is not None and proven.uses > 0
    state = "already kept; its receipt still holds" if again else "kept"
    minutes = MAX_RECEIPT_AGE_S / 60 - proven.age_s() / 60
    out.print(
        f"testbed {tb.name()}: link {state} (receipt of {receipt.created}, reused for "
        f"{minutes:.0f} min more); take it down with: quicbed link down" + kept.where(bed)
    )


@link_app.command("down")
@options("tb", TestbedOptions, only=LIFECYCLE)
def link_down(tb: TestbedOptions) -> None:
    """Take down the link quicbed link up kept: its shaping removed, the interfaces'
    offloads put back; the testbed stays up (idempotent)."""
    bed = tb.open("quicbed link down")
    try:
        found = take_down(bed)
    finally:
        bed.close()
    if found is None:
        out.print(f"testbed {tb.name()}: keeps no link")
    else:
        out.print(f"testbed {tb.name()}: kept link of {found.label()} taken down")


# --- cell -----------------------------------------------------------------------------
@dataclass(frozen=True)
class CellTarget:
    """The cell ``quicbed cell`` measures and the folder its attempt goes to, decided
    before any check: a new cell from the options, or a stored one (--from)."""

    cfg: CellConfig
    out: Path
    #: the replication package's runs when --from names a package (its cell is rerun
    #: beside them, to be compared), else None
    packaged: dict[str, Any] | None = None


@app.command("cell")
@options("link", LinkOptions, only=CELL_LINK)
@options("cell", CellOptions)
@options("tb", TestbedOptions)
@options("host", HostOptions)
def cell_cmd(
    *,
    page: Annotated[str | None, typer.Option(help="Page name from workloads/pages.yaml.")] = None,
    out_dir: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Results folder (created or added to); with --from, default: that folder "
            "(a package's: NAME-rerun beside it).",
        ),
    ] = None,
    from_dir: Annotated[
        str | None,
        typer.Option(
            "--from", help="Rerun a stored cell of this results folder or replication package."
        ),
    ] = None,
    cell_id: Annotated[str | None, typer.Option("--cell", help="With --from: cell ID.")] = None,
    where: Annotated[
        str | None,
        typer.Option(help="With --from: the cell's settings, e.g. rate=50,rtt=36,page=10kbx100."),
    ] = None,
    link: LinkOptions,
    cell: CellOptions,
    tb: TestbedOptions,
    host: HostOptions,
    receipt_tcp_seconds: ReceiptTcpSecondsOpt = RECEIPT_TCP_SECONDS,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    keep_testbed: KeepOpt = False,
    traces: TracesOpt = None,
    profile: ProfileOpt = None,
    yes: YesOpt = False,
    max_hours: MaxHoursOpt = MAX_HOURS,
    force: Annotated[
        bool, typer.Option(help="Add to a folder whose runs were made with other software.")
    ] = False,
) -> None:
    """Measure one cell: a page loaded over each arm (--arms) under one condition, on a link
    its receipt proves; stored as a new attempt.

    With --from DIR and --cell or --where: rerun a stored cell (a page, bulk or compete
    cell) with its exact stored configuration, as a new attempt beside the old ones
    (reports use the latest).

    Into a folder whose sweep or whose cell's latest attempt ran other software
    (Chromium, Apache, the servers, quicbed): refused unless --force. A replication
    package given to --from is the exception: it is extracted to --out (default: NAME-rerun
    beside the archive), the new attempt is there to be compared with the packaged one,
    and the comparison printed names what differs.
    """
    from quicbed.run.cell import validate  # lazy: scipy, ~0.65 s
    from quicbed.run.sweep import run_cell_into  # lazy: scipy, ~0.65 s

    check_tcp_seconds(receipt_tcp_seconds, "--receipt-tcp-seconds")
    policy = host.policy()
    with ExitStack() as refused:  # a rerun refused here leaves no extracted package
        if from_dir:
            target = _stored_cell(from_dir, out_dir, cell_id, where, refused)
        else:
            target = _new_cell(page, out_dir, cell_id, where, link, cell)
        _check_cell(target, policy, receipt_tcp_seconds, max_hours, yes)
    if traces is not None:
        check_level(traces)
    check_profile(profile or "none")
    bed = tb.open("quicbed cell")
    refuse_early(bed, lambda: validate(target.cfg, bed))  # e.g. its shaper cannot run on bed
    with owned(bed, "quicbed cell", keep_testbed), progress(transient=True) as bar:
        result = run_cell_into(
            target.cfg,
            target.out,
            testbed=bed,
            force=force or target.packaged is not None,
            traces=traces or "light",
            profile=profile or "none",
            receipt_tcp_seconds=receipt_tcp_seconds,
            progress=_cell_progress(bar, target.cfg),
            host=policy,
        )
    _print_cell(result, target, as_json)
    if result.status != "done":
        raise typer.Exit(1)


def _new_cell(
    page: str | None,
    out_dir: str | None,
    cell_id: str | None,
    where: str | None,
    link: LinkOptions,
    cell: CellOptions,
) -> CellTarget:
    """The cell the options state; --cell and --where name a stored cell, so without
    --from they are a mistake, said as one."""
    if cell_id or where:
        raise QuicbedError("--cell and --where need --from DIR")
    if not page or not out_dir:
        raise QuicbedError("give --page and --out (or --from DIR --cell ID to rerun a cell)")
    return CellTarget(cell.config(link.condition(), page), Path(out_dir))


def _stored_cell(
    from_dir: str, out_dir: str | None, cell_id: str | None, where: str | None, refused: ExitStack
) -> CellTarget:
    """The stored cell --from DIR and --cell or --where name, with its exact stored
    configuration, into --out (default: DIR). A replication package is extracted first
    (on ``refused``: removed again if a later check refuses the rerun)."""
    from quicbed.analysis.select import find_cell  # lazy: sqlite3 and the store, ~9 ms
    from quicbed.package.rerun import is_package, rerun_workspace  # lazy: scipy, ~0.5 s
    from quicbed.results.store import Store  # lazy: sqlite3 and the store, ~8 ms

    packaged = None
    if is_package(from_dir):  # a replication package: rerun beside its runs
        folder, packaged = refused.enter_context(
            rerun_workspace(Path(from_dir), Path(out_dir) if out_dir else None)
        )
        from_dir = out_dir = str(folder)
    store = Store(Path(from_dir))
    try:
        cid = find_cell(store, cell_id=cell_id, where=where)
        cfg = make_cell(**store.cell_config(cid))
    finally:
        store.close()
    if cell_id and cid != cell_id:
        note(f"--cell {cell_id} matched cell {cid}")
    return CellTarget(cfg, Path(out_dir or from_dir), packaged)


def _check_cell(
    target: CellTarget, policy: HostPolicy, receipt_tcp_seconds: float, max_hours: float, yes: bool
) -> None:
    """Everything about the cell that needs no testbed, refused before one is opened:
    its folder (a damaged store too), its configuration, its replacements, its time."""
    from quicbed.results.store import DB_NAME, Store  # lazy: sqlite3 and the store, ~8 ms
    from quicbed.run.cell import validate  # lazy: scipy, ~0.65 s
    from quicbed.run.sweep import check_budget  # lazy: scipy, ~0.65 s

    check_folder_target(target.out, "--out")
    if (target.out / DB_NAME).exists():  # a damaged store: refused before the testbed
        Store(target.out).close()
    validate(target.cfg)
    policy.replaced_per_arm(target.cfg.runs)
    check_budget(
        [PlannedCell(scenario="cell", config=target.cfg)],
        receipt_tcp_seconds,
        max_hours,
        yes,
        policy,
    )


def _cell_progress(bar: Progress, cfg: CellConfig) -> Callable[[str, int, int], None]:
    """The cell's bar, the receipt's then its loads', and what moves it (run_cell's
    ``progress``); a call without a total is a sentence, shown as it is."""
    task = bar.add_task(f"cell {cfg.cell_id()}: receipt, then loads", total=len(cfg.schedule()))

    def step(arm: str, done: int, total: int) -> None:
        if not total:  # a sentence, e.g. a wait for a quiet host (run.cell.Progress)
            bar.update(task, description=f"cell {cfg.cell_id()}: {arm}")
            return
        bar.update(task, completed=done, total=total, description=f"cell {cfg.cell_id()}: {arm}")

    return step


def _print_cell(result: CellResult, target: CellTarget, as_json: bool) -> None:
    """The measured cell (--json: as JSON); a rerun of a package's cell also beside its
    packaged attempt, so that what differs is seen at once."""
    if as_json:
        print_json(result.as_dict())
    else:
        print_cell(result, target.cfg)
    if target.packaged is not None and not as_json:
        from quicbed.package.rerun import beside  # lazy: scipy, ~0.5 s

        print("\n".join(beside(target.out, target.packaged, result.cell_id, result.attempt)))


# --- sweeps ---------------------------------------------------------------------------
@app.command("run")
@options("tb", SweepTestbedOptions)
@options("host", HostOptions)
def run_cmd(
    *,
    spec_file: Annotated[str, typer.Argument(help="Sweep spec (YAML), e.g. sweeps/demo.yaml.")],
    out_dir: Annotated[str, typer.Option("--out", help="Results folder of this sweep.")],
    resume: Annotated[bool, typer.Option(help="Continue an interrupted sweep in --out.")] = False,
    retry_failed: Annotated[
        bool,
        typer.Option("--retry-failed", help="With --resume: measure failed cells again."),
    ] = False,
    force: Annotated[bool, typer.Option(help="Resume despite a changed spec or software.")] = False,
    yes: YesOpt = False,
    max_hours: MaxHoursOpt = MAX_HOURS,
    tb: SweepTestbedOptions,
    host: HostOptions,
    keep_testbed: KeepOpt = False,
    traces: TracesOpt = None,
    profile: ProfileOpt = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help="Run only shard i of K (i/K), e.g. 1/2; merge the "
            "shards' folders with `quicbed merge`.",
        ),
    ] = None,
) -> None:
    """Run every cell of a sweep spec into one results folder; resumable after any stop.

    Where: the local testbed (namespaces here, as root), or the ssh testbed of the
    hosts --hosts names (an inventory, or the portal's manifest). --testbed overrides
    the spec's testbed; --hosts alone means ssh. The stored spec says which ran.

    Several --hosts: the cells are spread over those testbeds, one cell at a time on
    each; a testbed that fails is taken out and its cells go to the others.

    --shard i/K: only the i-th of K parts of the plan (the same split on any machine);
    quicbed merge makes the parts' folders one.

    quicbed stop DIR ends the sweep after its cell in progress (exit status 3).
    --resume continues it; with --retry-failed the failed cells are measured again, as
    new attempts.
    """
    spec = load_spec(Path(spec_file))
    spec = spec.model_copy(update={"host": host.policy(spec.host)})  # not in its digest
    run = SweepRun(
        again=f"quicbed run {spec_file} --out {out_dir} --resume",
        tb=tb,
        resume=resume,
        retry_failed=retry_failed,
        force=force,
        yes=yes,
        max_hours=max_hours,
        keep_testbed=keep_testbed,
        traces=traces,
        shard=shard,
        profile=profile,
    )
    run_spec(spec, out_dir, run)


@app.command("stop")
def stop_cmd(
    results: Annotated[str, typer.Argument(help="Results folder of a running sweep.")],
) -> None:
    """Ask the sweep running into a results folder to stop once its cell in progress ends.

    Ctrl-C would lose that cell. The sweep exits with status 3; run --resume continues
    it. Refused where no sweep is running, e.g. in a folder a single cell or a merge is
    writing.
    """
    from quicbed.results.folder import request_stop  # lazy: sqlite3 and the store, ~14 ms

    pid = request_stop(Path(results))
    who = f" (PID {pid})" if pid else ""
    out.print(
        f"asked the sweep in {results}{who} to stop after its cell in progress; "
        "it exits when that cell ends"
    )


@app.command("merge")
def merge_cmd(
    folders: Annotated[list[str], typer.Argument(help="Results folders of one sweep's shards.")],
    out_dir: Annotated[str, typer.Option("--out", help="The merged folder (new).")],
    force: Annotated[
        bool, typer.Option(help="Merge other specs, software or cells measured twice anyway.")
    ] = False,
) -> None:
    """Merge the results folders of one sweep into one that reports, packages and verifies
    as a single sweep.

    The folders are its --shard parts or its runs on several machines. Folders of
    another spec or other software, or a cell measured in two folders, are refused
    unless --force; every attempt is kept.
    """
    from quicbed.results.merge import merge  # lazy: sqlite3 and the store, ~15 ms

    result = merge([Path(f) for f in folders], Path(out_dir), force=force)
    for w in result.warnings:
        warn(w)
    out.print(
        f"merged {len(folders)} folders: {result.cells} cells, {result.attempts} "
        f"attempts in {out_dir}"
    )
    out.print(f"next: quicbed report {out_dir}")


@app.command("report")
def report_cmd(
    results: Annotated[str, typer.Argument(help="Results folder (a sweep or cells).")],
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Then read the report in headless Chromium as a reader would: "
            "placeholder text, empty tables, images or links that do not resolve, a page "
            "wider than a laptop's window (exit status 1 if any).",
        ),
    ] = False,
    screenshot: Annotated[
        str | None,
        typer.Option("--screenshot", help="With --check: a PNG of the whole page here."),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="Also compare the arms on this per-load figure and draw its heatmaps "
            f"beside PLT's (once per metric: {', '.join(METRICS[1:])}); the spec's "
            "statistics.metrics are drawn too.",
        ),
    ] = None,
) -> None:
    """Build DIR/report from the store alone: statistics, table.csv, heatmaps, index.html.

    Per cell the latest attempt is reported. Page cells: table.csv and heatmaps (PNG,
    SVG), and with --metric (or the spec's statistics.metrics) each paint or timing
    figure's heatmaps and metrics.csv; bulk and compete cells: transfers.csv and their
    figures.
    """
    from quicbed.report.build import build  # lazy: matplotlib and scipy, ~0.9 s

    if screenshot is not None and not check:
        raise QuicbedError("--screenshot is --check's: give both")
    r = build(Path(results), metrics=metric or [])
    pages = len({row.cell_id for row in r.rows})
    transfers = len(r.transfers.cells)
    heatmaps = len(r.figures) - len(r.transfers.drawn)
    what = f"{pages} page cells, {heatmaps} heatmaps" + (
        f"; {transfers} transfer cells, {len(r.transfers.drawn)} figures" if transfers else ""
    )
    out.print(f"{what}; report: {r.out / 'index.html'}")
    if check:
        from quicbed.report.check import check_report  # lazy: the browsers' modules, ~90 ms

        seen = check_report(r.out, Path(screenshot) if screenshot else None)
        for problem in seen.problems:
            out.print(f"[red]report check:[/red] {escape(problem)}")
        if not seen.ok:
            raise typer.Exit(1)
        out.print("report check: reads as it should" + (f"; {screenshot}" if screenshot else ""))


@app.command("explain")
def explain_cmd(
    results: Annotated[str, typer.Argument(help="Results folder.")],
    cell: Annotated[str | None, typer.Option("--cell", help="Cell ID (or a prefix).")] = None,
    where: Annotated[
        str | None, typer.Option("--where", help="Or a filter: rate=10,rtt=36,page=1mb.")
    ] = None,
    rep: Annotated[
        int | None, typer.Option("--rep", help="Explain load N of each arm (default: median).")
    ] = None,
    dest: Annotated[
        str | None, typer.Option("--out", help="Folder (default DIR/report/explain/CELL).")
    ] = None,
) -> None:
    """Why a load took its time: one load per arm of a traced cell, on one time axis.

    Of the cell's latest finished attempt, the load closest to its arm's median PLT (or
    --rep N): a figure (PNG, SVG), where the PLT difference comes from (summary.txt,
    explain.json) and the loads' transport samples (transport.csv).
    """
    from quicbed.analysis.explain import explain  # lazy: matplotlib, ~0.3 s

    r = explain(Path(results), cell, where, rep, Path(dest) if dest else None)
    print(r.summary)  # plain: paths and tables must not be wrapped at the terminal width
    for f in r.files:
        print(f"wrote {f}")


@app.command("export")
def export_cmd(
    results: Annotated[str, typer.Argument(help="Results folder.")],
    fmt: Annotated[str, typer.Option("--format", help="csv or parquet.")] = "csv",
    dest: Annotated[
        str | None, typer.Option("-o", help="Output file (default DIR/TABLE.FMT).")
    ] = None,
    replace: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    table: Annotated[
        str,
        typer.Option(
            "--table",
            help="runs (a row per page load), transport-params (a row per QUIC "
            "connection and side: what each end advertised) or handshakes (a row per "
            "connection of every load: its TLS hellos, and its whole handshake at "
            "--traces full).",
        ),
    ] = "runs",
) -> None:
    """One tidy row per page load: its cell's condition and settings, validity, PLT, timings.

    Every attempt's loads, warm-ups included (the columns attempt_status, latest_attempt
    and warmup say which). Bulk and compete cells have no page loads: their numbers are
    in the report's transfers.csv. ``--table transport-params``: the QUIC transport
    parameters both ends advertised, per connection of every load and flow (the client's
    are what the browser, or the bulk client, sent). ``--table handshakes``: each
    connection's key-exchange group, retry, cipher and resumption from its hellos, and at
    ``--traces full`` its certificate chain, flight bytes and round trips
    (docs/handshake.md).
    """
    from quicbed.results.export import export  # lazy: sqlite3 and the store, ~10 ms

    path = export(Path(results), fmt, Path(dest) if dest else None, replace, table=table)
    out.print(f"wrote {path}")


# --- replication packages -------------------------------------------------------------
@app.command("package")
def package_cmd(
    results: Annotated[str, typer.Argument(help="Results folder of a finished sweep.")],
    dest: Annotated[
        str | None, typer.Option("-o", "--output", help="Archive (default DIR.tar.gz).")
    ] = None,
    no_har: Annotated[
        bool, typer.Option("--no-har", help="Leave out the HARs (statistics still verify).")
    ] = False,
    traces: Annotated[
        bool,
        typer.Option(
            "--traces",
            help="Include DIR/traces (captures, qlog, NetLogs), never the TLS key logs "
            "unless --keys.",
        ),
    ] = False,
    keys: Annotated[
        bool,
        typer.Option(
            "--keys",
            help="With --traces: include the TLS key logs too (secrets: they decrypt the "
            "captures).",
        ),
    ] = False,
    replace: Annotated[bool, typer.Option(help="Overwrite an existing archive.")] = False,
) -> None:
    """Make a replication package: runs, raw data, provenance, figures, report, README.

    One .tar.gz with checksums, which quicbed verify checks on any machine.
    """
    from quicbed.package.build import build_package  # lazy: sqlite3, tarfile and the store, ~22 ms

    r = build_package(
        Path(results),
        Path(dest) if dest else None,
        no_har=no_har,
        traces=traces,
        keys=keys,
        replace=replace,
    )
    print_package(r)


@app.command("verify")
def verify_cmd(
    archive: Annotated[str, typer.Argument(help="A replication package (.tar.gz).")],
) -> None:
    """Check a package's files, recompute its statistics and figures from its runs alone.

    Exit status 0 if everything matches, 1 listing what differs. Needs no root, no browser.
    """
    from quicbed.package.verify import lines, verify  # lazy: sqlite3, tarfile and the store, ~25 ms

    res = verify(Path(archive))
    print("\n".join(lines(res)))
    if not res.ok:
        raise typer.Exit(1)


# --- main ---------------------------------------------------------------------------
def _on_signal(signum: int, frame: object) -> None:
    """The first Ctrl-C or SIGTERM unwinds the command through its clean-ups; any later
    one only says so, so it cannot cut a clean-up short between its shielded steps."""
    global _interrupted
    _interrupted = True
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _while_cleaning)
    raise KeyboardInterrupt


_interrupted = False


def _while_cleaning(signum: int, frame: object) -> None:
    print("quicbed: cleaning up what this command set up; please wait", file=sys.stderr)


def _error(text: str) -> NoReturn:
    """The one way a user's error ends: one line on stderr, exit status 2."""
    print(f"quicbed: error: {' '.join(text.split())}", file=sys.stderr)
    sys.exit(2)


def usage_error_line(exc: Any) -> str:
    """A click/typer usage error as one line naming the option and the value given.

    typer (0.2x) raises its own vendored copy of click's exceptions, so ``click``'s
    classes do not catch them. Their message names the option ("Invalid value for
    '--rtt': ..."); typer's pydantic coercion keeps the rejected value in the cause.
    No "Usage:" block: the line says where to look instead.
    """
    msg: str = exc.format_message().rstrip(".")
    errors = getattr(exc.__cause__, "errors", None)
    if callable(errors) and errors():
        msg = f"{msg} (got {errors()[0].get('input')!r})"
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        msg = f"{msg}; see '{ctx.command_path} --help'"
    return msg


# --- bulk transfers and flows sharing a bottleneck (quicbed.run.bulk; one-shot for now) -----
bulk_cli.register(app)
# --- the studies' figures and tables by name (quicbed.spec.catalog) ----------------------
reproduce_cli.register(app)


# --- help -----------------------------------------------------------------------------
def flowing(text: str) -> str:
    """``text`` as the terminal should wrap it: each paragraph on one line, paragraphs
    apart by a blank line. typer's rich help keeps the newlines inside a paragraph (all
    but the first paragraph's, and those too in a group's command list), so a docstring
    wrapped at the source's width would break sentences in mid-line."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text))
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def _flow_help(group: typer.Typer) -> None:
    """Every command's help in ``group`` and its sub-groups (its docstring, or its
    help=) through :func:`flowing`: docstrings stay wrapped for the source's reader."""
    for info in group.registered_commands:
        text = info.help or inspect.getdoc(info.callback)
        if text:
            info.help = flowing(text)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _flow_help(sub.typer_instance)


_flow_help(app)  # after the last command is registered


def main() -> None:
    """The ``quicbed`` entry point: every way a command ends becomes an exit status
    (0, 1 for a measured failure, 2 for a user's error, 130 when interrupted)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    try:
        rc = app(prog_name="quicbed", standalone_mode=False)
    except QuicbedError as exc:
        _error(str(exc))
    except (KeyboardInterrupt, typer.Abort):  # click turns Ctrl-C into Abort
        print("quicbed: interrupted; what this command set up was removed", file=sys.stderr)
        sys.exit(130)
    except NoArgsIsHelpError as exc:  # `quicbed` alone: the help, not an error line
        exc.show()
        sys.exit(2)
    except ClickException as exc:  # usage errors: unknown option or command, bad value
        _error(usage_error_line(exc))
    if _interrupted:  # typer turns the KeyboardInterrupt into a return code of 130
        # cleaned up: a late Ctrl-C must not kill the exit itself (CPython restores the
        # default SIGINT action while it shuts down, unless the signal is ignored)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        print("quicbed: interrupted; what this command set up was removed", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)
