"""The ``quicbed`` command line.

Errors a user can cause end as one line, ``quicbed: error: ...``, exit status 2;
Ctrl-C and SIGTERM unwind through the same ``finally`` blocks as errors, so a
shaped link, an emulator or a testbed made by the command is always removed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from quicbed.errors import QuicbedError
from quicbed.link.model import JitterKind, LinkCondition, make_condition
from quicbed.progress import progress_bar
from quicbed.testbed.base import Testbed
from quicbed.testbed.local import LocalTestbed

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="quicbed: testbed-as-code for QUIC vs TCP web performance research.",
)
testbed_app = typer.Typer(no_args_is_help=True, help="The local testbed (network namespaces).")
link_app = typer.Typer(no_args_is_help=True, help="Link emulation and its fidelity receipt.")
app.add_typer(testbed_app, name="testbed")
app.add_typer(link_app, name="link")

out = Console()

PrefixOpt = Annotated[
    str, typer.Option("--prefix", help="Name prefix of the testbed's namespaces.")
]
TestbedOpt = Annotated[
    str, typer.Option("--testbed", help="local (namespaces here) or ssh (three hosts).")
]
HostsOpt = Annotated[
    str | None,
    typer.Option("--hosts", help="ssh testbed: an Ansible inventory or the portal's manifest."),
]
SshUserOpt = Annotated[str | None, typer.Option("--ssh-user", help="ssh testbed: login name.")]
SshKeyOpt = Annotated[str | None, typer.Option("--ssh-key", help="ssh testbed: private key.")]


RateOpt = Annotated[str, typer.Option(help="Rate in Mbit/s each way, or 'unlimited'.")]
RttOpt = Annotated[float | None, typer.Option(help="Base RTT in ms, split evenly.")]
DelayDownOpt = Annotated[float | None, typer.Option(help="Server->client delay, ms.")]
DelayUpOpt = Annotated[float | None, typer.Option(help="Client->server delay, ms.")]
LossOpt = Annotated[float, typer.Option(help="End-to-end loss in %, split evenly.")]
LossDownOpt = Annotated[float | None, typer.Option(help="Server->client loss, %.")]
LossUpOpt = Annotated[float | None, typer.Option(help="Client->server loss, %.")]
JitterOpt = Annotated[float, typer.Option(help="Jitter, +/- ms per direction.")]
JitterKindOpt = Annotated[str, typer.Option(help="reorder or smooth.")]
QueueOpt = Annotated[str, typer.Option(help="Queue limit: 2bdp, 100pkts, 450kB.")]
CountOpt = Annotated[str, typer.Option(help="Bytes that count: ethernet or ip.")]
SeedOpt = Annotated[int, typer.Option(help="RNG seed of loss and jitter.")]
YesOpt = Annotated[bool, typer.Option("--yes", help="Run even if longer than --max-hours.")]
MaxHoursOpt = Annotated[float, typer.Option(help="Ask for --yes above this estimate.")]


TracesOpt = Annotated[
    str | None,
    typer.Option("--traces", help="Transport traces per load: none, light (default) or full."),
]
KeepOpt = Annotated[
    bool,
    typer.Option("--keep-testbed", help="Leave the testbed up at the end (default: tear down)."),
]


@contextmanager
def owned(tb: Testbed, what: str, keep: bool) -> Iterator[None]:
    """``what`` owns ``tb`` throughout; at the end, also after an error or Ctrl-C, the
    testbed is torn down (unless ``keep``) and the user is told what was removed."""
    try:
        with tb.claim(what):
            if keep:
                tb.up()  # so the runner does not remove what it finds made
            try:
                yield
            finally:
                if not keep:
                    try:
                        removed = tb.teardown()
                    except QuicbedError as exc:
                        if tb.lost is None:
                            raise
                        print(f"quicbed: testbed {tb.describe_short()} (taken out: {tb.lost}) "
                              f"could not be torn down: {exc}", file=sys.stderr)  # fmt: skip
                        removed = None
                    if removed is not None:
                        print(f"quicbed: testbed {tb.describe_short()} torn down"
                              + (f" (removed {len(removed)}: {', '.join(removed)})" if removed
                                 else ""), file=sys.stderr)  # fmt: skip
    finally:
        tb.close()


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise QuicbedError(f"{what} needs root (network namespaces); run it with sudo")


def open_testbed(
    kind: str,
    prefix: str,
    hosts: str | None,
    ssh_user: str | None = None,
    ssh_key: str | None = None,
    *,
    what: str,
) -> Testbed:
    """The testbed the options name; every inconsistency is an error naming the option."""
    from pathlib import Path

    if kind == "local":
        if hosts or ssh_user or ssh_key:
            raise QuicbedError("--hosts, --ssh-user and --ssh-key go with --testbed ssh")
        _need_root(what)
        return LocalTestbed(prefix)
    if kind == "ssh":
        from quicbed.testbed.hosts import load

        if not hosts:
            raise QuicbedError("--testbed ssh needs --hosts (an inventory or a manifest)")
        return load(Path(hosts), user=ssh_user, key=Path(ssh_key).expanduser() if ssh_key
                    else None)  # fmt: skip
    raise QuicbedError(f"testbed: unknown {kind!r} (local or ssh)")


# --- testbed --------------------------------------------------------------------------
@testbed_app.command("up")
def testbed_up(
    prefix: PrefixOpt = "qb",
    sshd: Annotated[
        bool, typer.Option("--sshd", help="Also sshd in each namespace (an ssh lab).")
    ] = False,
    kind: TestbedOpt = "local",
    hosts: HostsOpt = None,
    ssh_user: SshUserOpt = None,
    ssh_key: SshKeyOpt = None,
) -> None:
    """Create the server, bridge and client namespaces (idempotent), or reach the ssh hosts.

    With --sshd the namespaces become three ssh hosts with a control network and
    an inventory file, to run the ssh testbed on this machine.
    """
    if sshd:
        if kind != "local":
            raise QuicbedError("--sshd makes a local ssh lab; it goes with --testbed local")
        from quicbed.testbed.sshlab import SshLab

        _need_root("quicbed testbed up --sshd")
        inv = SshLab(prefix).up()
        out.print(f"testbed {prefix}: up with sshd; hosts: {inv}")
        out.print(f"next: quicbed link check --testbed ssh --hosts {inv} --rate 10 --rtt 36")
        return
    tb = open_testbed(kind, prefix, hosts, ssh_user, ssh_key, what="quicbed testbed up")
    try:
        with tb.claim("quicbed testbed up"):
            made = tb.up()
    finally:
        tb.close()
    name = prefix if kind == "local" else str(hosts)
    state = "created" if made else "already up" if kind == "local" else "reachable"
    out.print(f"testbed {name}: {state}")


@testbed_app.command("down")
def testbed_down(
    prefix: PrefixOpt = "qb",
    kind: TestbedOpt = "local",
    hosts: HostsOpt = None,
    ssh_user: SshUserOpt = None,
    ssh_key: SshKeyOpt = None,
) -> None:
    """Remove everything of the testbed, also after a crash (idempotent)."""
    tb = open_testbed(kind, prefix, hosts, ssh_user, ssh_key, what="quicbed testbed down")
    try:
        with tb.claim("quicbed testbed down"):
            removed = tb.teardown()
    finally:
        tb.close()
    name = prefix if kind == "local" else str(hosts)
    out.print(f"testbed {name}: "
              + (f"removed {', '.join(removed)}" if removed else "nothing to remove"))  # fmt: skip


@testbed_app.command("status")
def testbed_status(
    prefix: PrefixOpt = "qb",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    kind: TestbedOpt = "local",
    hosts: HostsOpt = None,
    ssh_user: SshUserOpt = None,
    ssh_key: SshKeyOpt = None,
) -> None:
    """What exists now, read from the kernel (or from the ssh hosts)."""
    tb = open_testbed(kind, prefix, hosts, ssh_user, ssh_key, what="quicbed testbed status")
    try:
        info = tb.status()
        info["owner"] = tb.holder()
    finally:
        tb.close()
    if as_json:
        print(json.dumps(info, indent=2))
        return
    if info["owner"]:
        from quicbed.testbed.owner import describe

        out.print(f"in use by {describe(info['owner'])}")
    if kind == "ssh":
        out.print(f"ssh testbed {hosts}: {'reachable' if info['complete'] else 'NOT reachable'}")
        for role, r in info["roles"].items():
            state = (f"{r['system']}; pids {r['pids'] or '-'}" if r["reachable"]
                     else f"[red]{r['error']}[/]")  # fmt: skip
            out.print(f"  {role:7} {r['address']}: {state}")
        return
    state = "up" if info["complete"] else ("partial" if any(info["roles"].values()) else "down")
    out.print(f"testbed {prefix}: {state}")
    for role, r in info["roles"].items():
        if r:
            ifs = ", ".join(f"{n} {v['state']} {' '.join(v['addresses'])}".strip()
                            for n, v in r["interfaces"].items())  # fmt: skip
            out.print(f"  {role:7} {r['namespace']}: {ifs}; pids {r['pids'] or '-'}; "
                      f"qdiscs {', '.join(r['qdiscs']) or '-'}")  # fmt: skip


# --- link -----------------------------------------------------------------------------
def _refuse_early(tb: Testbed, check: Callable[[], object]) -> None:
    """Run ``check`` against the opened testbed before the command claims it (as
    ``link check`` asks its shaper before shaping); ``tb`` is closed if it refuses,
    so a refusal makes, claims and tears down nothing."""
    try:
        check()
    except BaseException:
        tb.close()
        raise


def _parse_rate(rate: str) -> float | None:
    if rate.strip().lower() in ("unlimited", "none", "inf"):
        return None
    try:
        return float(rate)
    except ValueError:
        raise QuicbedError(f"rate: not a number of Mbit/s or 'unlimited' (got {rate!r})") from None


def _condition(**kw: Any) -> LinkCondition:
    kw["rate_mbit"] = _parse_rate(kw.pop("rate"))
    try:
        kw["jitter_kind"] = JitterKind(kw["jitter_kind"])
    except ValueError:
        raise QuicbedError(
            f"jitter kind: unknown {kw['jitter_kind']!r} (one of none, reorder, smooth)"
        ) from None
    return make_condition(**{k: v for k, v in kw.items() if v is not None})


def _link_options(
    rate: str,
    rtt: float | None,
    delay_down: float | None,
    delay_up: float | None,
    loss: float,
    loss_down: float | None,
    loss_up: float | None,
    jitter: float,
    jitter_kind: str,
    queue: str,
    count: str,
    seed: int,
) -> LinkCondition:
    if count not in ("ethernet", "ip"):
        raise QuicbedError(f"count: unknown {count!r} (ethernet or ip)")
    return _condition(
        rate=rate, rtt_ms=rtt, delay_down_ms=delay_down, delay_up_ms=delay_up,
        loss_pct=loss, loss_down_pct=loss_down, loss_up_pct=loss_up, jitter_ms=jitter,
        jitter_kind=jitter_kind, queue=queue, count=count, seed=seed,
    )  # fmt: skip


ShaperOpt = Annotated[str, typer.Option("--shaper", help="auto, userspace, netem or dummynet.")]


@link_app.command("check", context_settings={"ignore_unknown_options": False})
def link_check(
    rate: RateOpt = "unlimited",
    rtt: RttOpt = None,
    delay_down: DelayDownOpt = None,
    delay_up: DelayUpOpt = None,
    loss: LossOpt = 0.0,
    loss_down: LossDownOpt = None,
    loss_up: LossUpOpt = None,
    jitter: JitterOpt = 0.0,
    jitter_kind: JitterKindOpt = "none",
    queue: QueueOpt = "2bdp",
    count: CountOpt = "ethernet",
    seed: SeedOpt = 1,
    shaper: ShaperOpt = "auto",
    prefix: PrefixOpt = "qb",
    kind: TestbedOpt = "local",
    hosts: HostsOpt = None,
    ssh_user: SshUserOpt = None,
    ssh_key: SshKeyOpt = None,
    tcp_seconds: Annotated[float, typer.Option(help="iperf3 TCP seconds per direction.")] = 10,
    cc: Annotated[str, typer.Option(help="TCP congestion control.")] = "cubic",
    as_json: Annotated[bool, typer.Option("--json", help="Print the receipt as JSON.")] = False,
    out_file: Annotated[
        str | None, typer.Option("--out", help="Also write the receipt here.")
    ] = None,
) -> None:
    """Apply a condition, measure what the link delivers, judge it (exit 1 if out of tolerance)."""
    from pathlib import Path

    from quicbed.link.model import check_tcp_seconds
    from quicbed.link.receipt import measure
    from quicbed.link.session import shaped_link

    cond = _link_options(rate, rtt, delay_down, delay_up, loss, loss_down, loss_up, jitter,
                         jitter_kind, queue, count, seed)  # fmt: skip
    check_tcp_seconds(tcp_seconds, "--tcp-seconds")
    if out_file:  # refused now, not after the measurement
        if Path(out_file).exists() or Path(out_file).is_symlink():
            raise QuicbedError(f"--out: {out_file} exists; the receipt is never written over")
        if not Path(out_file).parent.is_dir():
            raise QuicbedError(f"--out: folder {Path(out_file).parent} does not exist")
    tb = open_testbed(kind, prefix, hosts, ssh_user, ssh_key, what="quicbed link check")
    try:
        with shaped_link(tb, cond, shaper, cc=cc) as link:
            receipt = measure(tb, cond, link.shaper, link.tuning, tcp_seconds=tcp_seconds, cc=cc)
    finally:
        tb.close()
    data = receipt.model_dump(mode="json")
    if out_file:
        with open(out_file, "x") as f:
            json.dump(data, f, indent=2)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print_receipt(receipt)
    if not receipt.passed:
        raise typer.Exit(1)


def print_receipt(receipt: Any) -> None:
    t = Table(title=f"Fidelity receipt: {receipt.label} ({receipt.shaper['shaper']})")
    for col in ("check", "expected", "measured", "accepted", "verdict"):
        t.add_column(col, no_wrap=True)
    t.add_column("note", overflow="fold")

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    for c in receipt.checks:
        verdict = {True: "[green]pass[/]", False: "[red]FAIL[/]", None: "[yellow]n/j[/]"}[c.passed]
        acc = f"{f(c.low)}..{f(c.high)}" if c.low is not None or c.high is not None else "-"
        note = c.note if c.passed is not True else ""
        t.add_row(c.name, f"{f(c.expected)} {c.unit}", f"{f(c.measured)} {c.unit}", acc, verdict,
                  note)  # fmt: skip
    out.print(t)
    if receipt.emulator and "cpu_pct_during_tcp_max" in receipt.emulator:
        out.print(
            f"emulator CPU during TCP: {receipt.emulator['cpu_pct_during_tcp_max']:.0f} % of a core"
        )
    out.print("[green]within tolerance[/]" if receipt.passed else "[red]OUT OF TOLERANCE[/]")


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
    msg = exc.format_message().rstrip(".")
    errors = getattr(exc.__cause__, "errors", None)
    if callable(errors) and errors():
        msg = f"{msg} (got {errors()[0].get('input')!r})"
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        msg = f"{msg}; see '{ctx.command_path} --help'"
    return msg


def main() -> None:
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

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


# --- cell -----------------------------------------------------------------------------
@app.command("cell")
def cell_cmd(
    page: Annotated[str | None, typer.Option(help="Page name from workloads/pages.yaml.")] = None,
    out_dir: Annotated[
        str | None, typer.Option("--out", help="Results folder (created or added to).")
    ] = None,
    from_dir: Annotated[
        str | None, typer.Option("--from", help="Rerun a stored cell of this results folder.")
    ] = None,
    cell_id: Annotated[str | None, typer.Option("--cell", help="With --from: cell ID.")] = None,
    where: Annotated[
        str | None, typer.Option(help="With --from: e.g. rate=50,rtt=36,page=10kbx100.")
    ] = None,
    rate: RateOpt = "unlimited",
    rtt: RttOpt = None,
    loss: LossOpt = 0.0,
    jitter: JitterOpt = 0.0,
    jitter_kind: JitterKindOpt = "none",
    queue: QueueOpt = "2bdp",
    seed: SeedOpt = 1,
    runs: Annotated[int, typer.Option(help="Measured loads per arm.")] = 20,
    warmup: Annotated[int, typer.Option(help="Warm-up loads per arm (not in the stats).")] = 1,
    mode: Annotated[str, typer.Option(help="0rtt (one context) or 1rtt (fresh each).")] = "0rtt",
    arms: Annotated[
        str,
        typer.Option(
            help=(
                "Comma-separated arms: h2 (Apache), h3 (quic-go), h3-quiche (quiche), each with "
                "optional :KEY=VALUE settings (stack, cc, cubic_n, cubic_beta), e.g. "
                "h2,h3:cubic_n=2,h3-quiche:cc=bbr2, or a new arm h3-n2:stack=quic-go:cubic_n=2."
            )
        ),
    ] = "h2,h3",
    order: Annotated[str, typer.Option(help="alternate (ABBA), random or blocked.")] = "alternate",
    cc: Annotated[
        str,
        typer.Option(
            help=(
                "Congestion control of every arm that names none (TCP: the kernel's cubic, bbr, "
                "reno; each QUIC stack its own names)."
            )
        ),
    ] = "cubic",
    shaper: ShaperOpt = "auto",
    prefix: PrefixOpt = "qb",
    kind: TestbedOpt = "local",
    hosts: HostsOpt = None,
    ssh_user: SshUserOpt = None,
    ssh_key: SshKeyOpt = None,
    receipt_tcp_seconds: Annotated[float, typer.Option(help="Receipt iperf3 seconds.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    keep_testbed: KeepOpt = False,
    traces: TracesOpt = None,
    yes: YesOpt = False,
    max_hours: MaxHoursOpt = 1.0,
) -> None:
    """Measure one cell: the page over h2 and h3 under one condition, verified and stored.

    With --from DIR and --cell/--where: rerun a stored cell with its exact stored
    configuration, as a new attempt beside the old ones (reports use the latest).
    """
    from contextlib import ExitStack
    from pathlib import Path

    from quicbed.cell import run_cell, validate
    from quicbed.cellconfig import make_cell
    from quicbed.link.model import check_tcp_seconds
    from quicbed.paths import check_folder_target
    from quicbed.spec import PlannedCell
    from quicbed.store import DB_NAME, Store
    from quicbed.sweep import check_budget

    check_tcp_seconds(receipt_tcp_seconds, "--receipt-tcp-seconds")
    packaged = None
    with ExitStack() as refused:  # a rerun refused here leaves no extracted package
        if from_dir:
            from quicbed.rerun import is_package, rerun_workspace
            from quicbed.select import find_cell

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
                print(f"quicbed: --cell {cell_id} matched cell {cid}", file=sys.stderr)
            out_dir = out_dir or from_dir
        else:
            if cell_id or where:
                raise QuicbedError("--cell and --where need --from DIR")
            if not page or not out_dir:
                raise QuicbedError(
                    "give --page and --out (or --from DIR --cell ID to rerun a cell)"
                )
            cond = _link_options(rate, rtt, None, None, loss, None, None, jitter, jitter_kind,
                                 queue, "ethernet", seed)  # fmt: skip
            from quicbed.arms import parse_cli

            names, settings = parse_cli(arms)
            cfg = make_cell(condition=cond, page=page, runs=runs, warmup=warmup, mode=mode,
                            arms=names, arm_settings=settings, order=order, cc=cc,
                            shaper=shaper)  # fmt: skip
        check_folder_target(Path(out_dir), "--out")
        if (Path(out_dir) / DB_NAME).exists():  # a damaged store: refused before the testbed
            Store(Path(out_dir)).close()
        validate(cfg)
        check_budget([PlannedCell(scenario="cell", config=cfg)], receipt_tcp_seconds,
                     max_hours, yes)  # fmt: skip
    if traces is not None:
        from quicbed.traces import check_level

        check_level(traces)
    tb = open_testbed(kind, prefix, hosts, ssh_user, ssh_key, what="quicbed cell")
    _refuse_early(tb, lambda: validate(cfg, tb))  # e.g. its shaper cannot run on tb
    with (
        owned(tb, "quicbed cell", keep_testbed),
        progress_bar(Console(stderr=True), transient=True) as bar,
    ):
        task = bar.add_task(f"cell {cfg.cell_id()}: receipt, then loads", total=len(cfg.schedule()))

        def step(arm: str, done: int, total: int) -> None:
            bar.update(task, completed=done, description=f"cell {cfg.cell_id()}: {arm}")

        result = run_cell(cfg, Path(out_dir), testbed=tb, traces=traces or "light",
                          receipt_tcp_seconds=receipt_tcp_seconds, progress=step)  # fmt: skip
    if as_json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print_cell(result, cfg)
    if packaged is not None and not as_json:
        from quicbed.rerun import beside

        print("\n".join(beside(Path(out_dir), packaged, result.cell_id, result.attempt)))
    if result.status != "done":
        raise typer.Exit(1)


def print_cell(result: Any, cfg: Any) -> None:
    out.print(f"cell {result.cell_id} attempt {result.attempt}: {cfg.page}, "
              f"{cfg.condition.label()}, {cfg.mode}, results in {result.out}")  # fmt: skip
    out.print("arms: " + "; ".join(a.describe() for a in cfg.resolved_arms()))
    if result.status != "done":
        out.print(f"[red]failed:[/] {result.problem}")
        return

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    t = Table()
    for col in ("arm", "valid n", "mean ms", "sd ms", "median ms", "95 % CI"):
        t.add_column(col)
    shown: set[str] = set()
    for c in result.comparisons.values():
        for s in (c.tcp, c.quic):
            if s.arm not in shown:
                shown.add(s.arm)
                t.add_row(s.arm, str(s.n), f(s.mean), f(s.sd), f(s.median),
                          f"{f(s.ci95_low)}..{f(s.ci95_high)}")  # fmt: skip
    if shown:
        out.print(t)
    for name, c in result.comparisons.items():
        ref, cand = name.split("/")
        if not c.enough:
            out.print(f"[yellow]{name}: no comparison:[/] {c.problem}")
        else:
            sig = "significant" if c.significant else "not significant"
            faster = f"{cand} faster" if (c.pct_diff or 0) > 0 else f"{ref} faster"
            out.print(f"{name}: difference ({ref} - {cand}) / {cand} = {c.pct_diff:+.1f} % "
                      f"({faster}); Welch p = {c.welch_p:.3g}, {sig} at {c.alpha:g}")  # fmt: skip
        for w in c.warnings:
            out.print(f"[yellow]warning:[/] {w}")
    for arm, v in sorted(result.verified.items(), key=lambda kv: list(cfg.arms).index(kv[0])):
        out.print(f"{arm}: {v['valid']}/{v['measured']} loads verified, protocols "
                  f"{','.join(v['protocols']) or '-'}, 0-RTT used {v['used_0rtt']}, "
                  f"TLS resumed {v['tls_resumed']}, CC {','.join(v['cc']) or '-'}")  # fmt: skip
    for arm, reasons in result.invalid.items():
        out.print(f"[yellow]{len(reasons)} invalid {arm} load(s):[/] {reasons[0]}")


# --- sweeps ---------------------------------------------------------------------------
@app.command("run")
def run_cmd(
    spec_file: Annotated[str, typer.Argument(help="Sweep spec (YAML), e.g. sweeps/demo.yaml.")],
    out_dir: Annotated[str, typer.Option("--out", help="Results folder of this sweep.")],
    resume: Annotated[bool, typer.Option(help="Continue an interrupted sweep in --out.")] = False,
    force: Annotated[bool, typer.Option(help="Resume despite a changed spec or software.")] = False,
    yes: YesOpt = False,
    max_hours: MaxHoursOpt = 1.0,
    prefix: PrefixOpt = "qb",
    kind: Annotated[
        str | None,
        typer.Option("--testbed", help="local or ssh; default: the spec's (ssh with --hosts)."),
    ] = None,
    hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--hosts",
            help="ssh testbed: an inventory or the portal's manifest; "
            "give it once per testbed to spread the sweep over several.",
        ),
    ] = None,
    ssh_user: SshUserOpt = None,
    ssh_key: SshKeyOpt = None,
    keep_testbed: KeepOpt = False,
    traces: TracesOpt = None,
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
    the spec's ``testbed``; --hosts alone means ssh. The stored spec says which ran.
    Several --hosts: the cells are spread over those testbeds, one cell at a time on
    each; a testbed that fails is taken out and its cells go to the others.
    --shard i/K: only the i-th of K parts of the plan (the same split on any machine).
    """
    from pathlib import Path

    from quicbed.link.shapers import get_shaper
    from quicbed.shard import parse_shard, select
    from quicbed.spec import load_spec, plan
    from quicbed.sweep import check_budget, check_folder, run_sweep

    part = parse_shard(shard) if shard is not None else None
    spec = load_spec(Path(spec_file))
    hosts = hosts or []
    if len(set(hosts)) < len(hosts):
        raise QuicbedError(f"--hosts: a testbed is named twice ({', '.join(hosts)})")
    kind = kind or ("ssh" if hosts else None)
    if kind is not None and kind != spec.testbed:
        if kind not in ("local", "ssh"):
            raise QuicbedError(f"--testbed: unknown {kind!r} (local or ssh)")
        spec = spec.model_copy(update={"testbed": kind})
    if traces is not None:  # overrides the spec's level (not part of its digest)
        from quicbed.traces import check_level

        spec = spec.model_copy(update={"traces": check_level(traces)})
    cells = plan(spec)
    if part is not None:
        cells = select(cells, part)
    est = check_budget(cells, spec.receipt_tcp_seconds, max_hours, yes)
    check_folder(Path(out_dir), spec, resume=resume, force=force, shard=part)
    tbs: list[Testbed] = []
    try:  # every testbed opened and able to shape, or none kept open
        for h in hosts or [None]:
            tbs.append(open_testbed(spec.testbed, prefix, h, ssh_user, ssh_key,
                                    what="quicbed run"))  # fmt: skip
            get_shaper(spec.shaper, tbs[-1])
    except BaseException:
        for tb in tbs:
            tb.close()
        raise
    where = f" on {len(tbs)} testbeds" if len(tbs) > 1 else ""
    what = f"shard {part} of sweep" if part else "sweep"
    out.print(f"{what} {spec.name!r}: {len(cells)} cells, about {est / 60 / len(tbs):.0f} min"
              f"{where}; results in {out_dir}")  # fmt: skip
    with ExitStack() as owning, progress_bar(Console(stderr=True)) as bar:
        for tb in tbs:
            owning.enter_context(owned(tb, "quicbed run", keep_testbed))
        cells_task = bar.add_task("cells", total=len(cells))
        loads_task = bar.add_task("loads", total=1)

        seen: set[str] = set()

        def on_cell(i: int, n: int, pc: Any, what: str) -> None:
            c = pc.config
            seen.add(c.cell_id())  # several testbeds: cells start out of plan order
            done = i if len(tbs) == 1 else max(0, len(seen) - len(tbs))
            bar.update(cells_task, completed=done, description=f"{pc.scenario}: {c.page}, "
                       f"{c.condition.label()} ({what})")  # fmt: skip

        def on_load(arm: str, done: int, total: int) -> None:
            bar.update(loads_task, completed=done, total=total, description=f"loads ({arm})")

        def on_lost(tb: Testbed, why: str) -> None:
            out.print(f"[red]testbed {tb.describe_short()} taken out of the sweep:[/] {why}")

        result = run_sweep(spec, Path(out_dir), testbeds=tbs, resume=resume, force=force,
                           shard=part, on_cell=on_cell, on_load=on_load,
                           on_lost=on_lost)  # fmt: skip
        bar.update(cells_task, completed=len(cells))
    out.print(f"{what} {spec.name!r}: {result.done} cells measured, {result.skipped} kept from "
              f"before, {result.failed} failed; results in {out_dir}")  # fmt: skip
    for r in result.results:
        if r.status != "done":
            out.print(f"[red]cell {r.cell_id} failed:[/] {r.problem}")
    out.print(f"next: quicbed report {out_dir}")
    if result.failed:
        raise typer.Exit(1)


@app.command("merge")
def merge_cmd(
    folders: Annotated[list[str], typer.Argument(help="Results folders of one sweep's shards.")],
    out_dir: Annotated[str, typer.Option("--out", help="The merged folder (new).")],
    force: Annotated[
        bool, typer.Option(help="Merge other specs, software or cells measured twice anyway.")
    ] = False,
) -> None:
    """Merge the results folders of one sweep (its --shard parts, or runs on several
    machines) into one folder that reports, packages and verifies as a single sweep."""
    from pathlib import Path

    from quicbed.merge import merge

    result = merge([Path(f) for f in folders], Path(out_dir), force=force)
    for w in result.warnings:
        out.print(f"[yellow]warning:[/] {w}")
    out.print(f"merged {len(folders)} folders: {result.cells} cells, {result.attempts} "
              f"attempts in {out_dir}")  # fmt: skip
    out.print(f"next: quicbed report {out_dir}")


@app.command("report")
def report_cmd(
    results: Annotated[str, typer.Argument(help="Results folder (a sweep or cells).")],
) -> None:
    """Statistics, heatmaps (PNG, SVG), table.csv and report/index.html, from the store only."""
    from pathlib import Path

    from quicbed.report import build

    r = build(Path(results))
    out.print(f"{len(r.rows)} cells, {len(r.figures)} heatmaps; report: {r.out / 'index.html'}")


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
    """Why a load took its time: one load per arm on one time axis (PNG, SVG), where the
    PLT difference comes from (summary.txt, explain.json), the loads' samples as CSV."""
    from pathlib import Path

    from quicbed.explain import explain

    r = explain(Path(results), cell, where, rep, Path(dest) if dest else None)
    print(r.summary)  # plain: paths and tables must not be wrapped at the terminal width
    for f in r.files:
        print(f"wrote {f}")


@app.command("export")
def export_cmd(
    results: Annotated[str, typer.Argument(help="Results folder.")],
    fmt: Annotated[str, typer.Option("--format", help="csv or parquet.")] = "csv",
    dest: Annotated[
        str | None, typer.Option("-o", help="Output file (default DIR/runs.FMT).")
    ] = None,
    replace: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
) -> None:
    """One tidy row per load (every parameter, PLT, validity, timings)."""
    from pathlib import Path

    from quicbed.export import export

    path = export(Path(results), fmt, Path(dest) if dest else None, replace)
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
    """A replication package: runs, raw data, provenance, figures, report, README."""
    from pathlib import Path

    from quicbed.package import build_package

    r = build_package(Path(results), Path(dest) if dest else None, no_har=no_har,
                      traces=traces, keys=keys, replace=replace)  # fmt: skip
    c = r.counts
    more = (f", {c['traces']} trace files ({c['keys']} TLS key logs)"
            if "traces" in c else "")  # fmt: skip
    print(f"wrote {r.path}: {r.size / 1024:.0f} KiB, {r.files} files ({c['cells']} cells, "
          f"{c['runs']} loads, {c['hars']} HARs, {c['logs']} logs{more})")  # fmt: skip
    print(f"SHA-256 {r.sha256} (publish it with the paper)")
    for n in r.notes:
        print(f"note: {n}")
    print(f"next: quicbed verify {r.path}")


@app.command("verify")
def verify_cmd(
    archive: Annotated[str, typer.Argument(help="A replication package (.tar.gz).")],
) -> None:
    """Check a package's files, recompute its statistics and figures from its runs alone.

    Exit 0 if everything matches, 1 listing what differs. Needs no root, no browser.
    """
    from pathlib import Path

    from quicbed.verify import lines, verify

    res = verify(Path(archive))
    print("\n".join(lines(res)))
    if not res.ok:
        raise typer.Exit(1)
