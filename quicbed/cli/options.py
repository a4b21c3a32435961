"""The options several ``quicbed`` commands share, each group declared once.

A group is a frozen dataclass whose fields carry their typer option (name, help) and
their default; ``@options("tb", TestbedOptions)`` shows the fields to typer as the
command's options and hands the command one ``TestbedOptions`` object instead of five
loose parameters. Defaults come from the pydantic models (CellConfig, LinkCondition,
SweepSpec), so the CLI, a sweep spec and a stored cell cannot drift apart.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from quicbed.backends import DEFAULT_KIND, backends, get_backend, hosts_kind, kinds_help
from quicbed.client import browsers
from quicbed.client.browser import DEFAULT
from quicbed.errors import QuicbedError
from quicbed.link.hostpolicy import HostPolicy
from quicbed.model import capacity
from quicbed.model.link import (
    JITTER_MEANING,
    JitterKind,
    LinkCondition,
    make_condition,
)
from quicbed.roles.cpuaccounting import parse_placement
from quicbed.servers import stacks
from quicbed.shapers import help_text as shaper_help
from quicbed.spec.arms import parse_cli
from quicbed.spec.cellconfig import UNLIMITED, CellConfig, cell_default, make_cell, parse_rate
from quicbed.testbed.lifecycle import Testbed, testbed_class

F = TypeVar("F", bound=Callable[..., Any])


#: the defaults of a condition and of a cell: the models' fields, read once (every
#: value is immutable), so that no default is restated here
LINK = {n: f.default for n, f in LinkCondition.model_fields.items() if not f.is_required()}
CELL = {n: cell_default(n) for n, f in CellConfig.model_fields.items() if not f.is_required()}


def options(name: str, group: type, *, only: Collection[str] | None = None) -> Callable[[F], F]:
    """Give the decorated command the fields of ``group`` as options, in the place of
    its parameter ``name``, and one ``group`` object in that parameter; ``only`` picks
    some fields (the others keep their defaults). Typer reads a command's signature,
    so the wrapper shows it the command's parameters with the group's spliced in."""
    hints = get_type_hints(group, include_extras=True)
    keyword = inspect.Parameter.KEYWORD_ONLY  # typer passes every value by name
    params = [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=hints[f.name])
        for f in fields(group)
        if only is None or f.name in only
    ]

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        clash = set(sig.parameters) & {p.name for p in params}
        if name not in sig.parameters or clash:
            raise TypeError(
                f"{func.__name__}: needs a parameter {name!r} and no {', '.join(sorted(clash))}"
            )
        every: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            every += params if p.name == name else [p.replace(kind=keyword)]

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            kwargs[name] = group(**{p.name: kwargs.pop(p.name) for p in params})
            return func(*args, **kwargs)

        command.__signature__ = sig.replace(parameters=every)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in every}
        return command  # type: ignore[return-value]

    return decorate


# --- the testbed a command opens ------------------------------------------------------
PrefixOpt = Annotated[
    str, typer.Option("--prefix", help="Name prefix of the testbed's namespaces.")
]
TestbedOpt = Annotated[str, typer.Option("--testbed", help=kinds_help())]
HostsOpt = Annotated[
    str | None,
    typer.Option("--hosts", help="ssh testbed: an Ansible inventory or the portal's manifest."),
]
SshUserOpt = Annotated[str | None, typer.Option("--ssh-user", help="ssh testbed: login name.")]
SshKeyOpt = Annotated[str | None, typer.Option("--ssh-key", help="ssh testbed: private key.")]
PlacementOpt = Annotated[
    str,
    typer.Option(
        "--placement",
        help="Pin roles to CPUs: none, split (the link emulator on the first CPU, server "
        "and client on the others), or role=CPUs,... (bridge=0,server=1,client=1).",
    ),
]
#: the testbed options of commands that measure nothing (no placement)
LIFECYCLE = ("prefix", "kind", "hosts", "ssh_user", "ssh_key")


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise QuicbedError(f"{what} needs root (network namespaces); run it with sudo")


@dataclass(frozen=True)
class TestbedOptions:
    """Where a command runs: the local namespaces ``prefix``-*, or the ssh hosts."""

    __test__ = False  # not a pytest test class, despite its name

    prefix: PrefixOpt = "qb"
    kind: TestbedOpt = DEFAULT_KIND
    hosts: HostsOpt = None
    ssh_user: SshUserOpt = None
    ssh_key: SshKeyOpt = None
    placement: PlacementOpt = "none"

    def one_host(self) -> str | None:
        return self.hosts

    def name(self) -> str:
        """How the command's output names the testbed."""
        return str(self.hosts) if get_backend(self.kind).takes_hosts else self.prefix

    def open(self, what: str, *, kind: str | None = None, hosts: str | None = None) -> Testbed:
        """The testbed the options name (``kind`` and ``hosts`` override them, as a
        sweep's spec and each of its --hosts do); every inconsistency is an error
        naming the option."""
        parse_placement(self.placement)  # refused by name before any host is asked
        tb = self._open(what, kind or self.kind, hosts or self.one_host())
        if self.placement != "none":
            try:
                tb.cpu.place(self.placement)  # CPUs the hosts lack: refused by name
            except BaseException:
                tb.close()
                raise
        return tb

    def _open(self, what: str, kind: str, hosts: str | None) -> Testbed:
        """The kind's testbed class opens it (``Testbed.from_options``), once the options
        that go with another kind are refused and root is asked for where it is needed."""
        cls = testbed_class(kind)
        if not cls.takes_hosts and (hosts or self.ssh_user or self.ssh_key):
            raise QuicbedError(
                f"--hosts, --ssh-user and --ssh-key go with --testbed {hosts_kind()}"
            )
        if cls.makes_namespaces:
            need_root(what)
        return cls.from_options(
            prefix=self.prefix, hosts=hosts, user=self.ssh_user, key=self.ssh_key
        )


@dataclass(frozen=True)
class SweepTestbedOptions(TestbedOptions):
    """``quicbed run``: the spec names the testbed unless --testbed does, and --hosts
    may name several (the sweep is spread over them)."""

    kind: Annotated[
        str | None,
        typer.Option(
            "--testbed",
            help=f"{' or '.join(backends())}; default: the spec's ({hosts_kind()} with --hosts).",
        ),
    ] = None  # type: ignore[assignment]
    hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--hosts",
            help="ssh testbed: an inventory or the portal's manifest; "
            "give it once per testbed to spread the sweep over several.",
        ),
    ] = None  # type: ignore[assignment]

    def one_host(self) -> str | None:
        return None  # each testbed is opened with its own: open(hosts=...)

    def host_list(self) -> list[str]:
        hosts = list(self.hosts or [])
        if len(set(hosts)) < len(hosts):
            raise QuicbedError(f"--hosts: a testbed is named twice ({', '.join(hosts)})")
        return hosts


@contextmanager
def owned(tb: Testbed, what: str, keep: bool) -> Iterator[None]:
    """``what`` owns ``tb`` throughout; at the end, also after an error or Ctrl-C, the
    testbed is torn down (unless ``keep``, or it keeps a link: ``quicbed link up``, which
    stays until ``quicbed link down``) and the user is told what was removed."""
    removed: list[str] | None
    try:
        with tb.claim(what):
            if keep:
                tb.up()  # so the runner does not remove what it finds made
            try:
                yield
            finally:
                if tb.kept_link_path().exists():
                    print(
                        f"quicbed: testbed {tb.describe_short()} keeps its link "
                        "(quicbed link up): left up",
                        file=sys.stderr,
                    )
                elif not keep:
                    try:
                        removed = tb.teardown()
                    except QuicbedError as exc:
                        if tb.lost is None:
                            raise
                        print(
                            f"quicbed: testbed {tb.describe_short()} (taken out: {tb.lost}) "
                            f"could not be torn down: {exc}",
                            file=sys.stderr,
                        )
                        removed = None
                    if removed is not None:
                        print(
                            f"quicbed: testbed {tb.describe_short()} torn down"
                            + (
                                f" (removed {len(removed)}: {', '.join(removed)})"
                                if removed
                                else ""
                            ),
                            file=sys.stderr,
                        )
    finally:
        tb.close()


def refuse_early(tb: Testbed, check: Callable[[], object]) -> None:
    """Run ``check`` against the opened testbed before the command claims it (as
    ``link check`` asks its shaper before shaping); ``tb`` is closed if it refuses,
    so a refusal makes, claims and tears down nothing."""
    try:
        check()
    except BaseException:
        tb.close()
        raise


# --- the link condition ---------------------------------------------------------------
RateOpt = Annotated[str, typer.Option(help=f"Rate in Mbit/s each way, or '{UNLIMITED[0]}'.")]
RttOpt = Annotated[float | None, typer.Option(help="Base RTT in ms, split evenly.")]
DelayDownOpt = Annotated[float | None, typer.Option(help="Server->client delay, ms.")]
DelayUpOpt = Annotated[float | None, typer.Option(help="Client->server delay, ms.")]
LossOpt = Annotated[float, typer.Option(help="End-to-end loss in %, split evenly.")]
LossDownOpt = Annotated[float | None, typer.Option(help="Server->client loss, %.")]
LossUpOpt = Annotated[float | None, typer.Option(help="Client->server loss, %.")]
JitterOpt = Annotated[float, typer.Option(help=f"Jitter in ms ({JITTER_MEANING}).")]
JitterKindOpt = Annotated[
    str,
    typer.Option(
        help="none, reorder (per packet), smooth (order kept) or step (the reference "
        "study's: re-drawn every interval, decreases in two half-steps)."
    ),
]
JitterIntervalOpt = Annotated[
    float, typer.Option(help="ms between smooth's knots or step's re-draws.")
]
QueueOpt = Annotated[str, typer.Option(help="Queue limit: 2bdp, 100pkts, 450kB.")]
EcnOpt = Annotated[
    str | None,
    typer.Option(
        "--ecn-threshold",
        help="Mark ECN-capable packets CE from this queue occupancy on (30kB, 0.5bdp; "
        "userspace shaper only); default: never mark, only drop.",
    ),
]
TraceOpt = Annotated[
    str | None,
    typer.Option(
        "--trace",
        help="A time-varying link: a Mahimahi file (X.down takes X.up beside it), a trace "
        "of the trace store (quicbed traces list), or gen:MODEL:seed=N (quicbed traces "
        "models); it sets the rate both ways (userspace shaper only).",
    ),
]
ScheduleOpt = Annotated[
    str | None,
    typer.Option(
        "--schedule",
        help="A time-varying link: RATE[@RTTms]:DURATION,... repeated (50:2s,5@80ms:1s, "
        "0:200ms an outage); it sets the rate both ways (userspace shaper only).",
    ),
]
StartAtOpt = Annotated[
    float,
    typer.Option(
        "--start-at",
        help="With --trace or --schedule: ms into it where every load starts (default 0).",
    ),
]
CountOpt = Annotated[str, typer.Option(help="Bytes that count: ethernet or ip.")]
SeedOpt = Annotated[int, typer.Option(help="RNG seed of loss and jitter.")]


@dataclass(frozen=True)
class LinkOptions:
    """A network condition as the options state it; ``condition()`` validates it."""

    rate: RateOpt = UNLIMITED[0]
    rtt: RttOpt = None
    delay_down: DelayDownOpt = None
    delay_up: DelayUpOpt = None
    loss: LossOpt = LINK["loss_pct"]
    loss_down: LossDownOpt = None
    loss_up: LossUpOpt = None
    jitter: JitterOpt = LINK["jitter_ms"]
    jitter_kind: JitterKindOpt = LINK["jitter_kind"].value
    jitter_interval: JitterIntervalOpt = LINK["jitter_interval_ms"]
    queue: QueueOpt = LINK["queue"]
    ecn_threshold: EcnOpt = None
    count: CountOpt = LINK["count"]
    seed: SeedOpt = LINK["seed"]
    trace: TraceOpt = None
    schedule: ScheduleOpt = None
    start_at: StartAtOpt = 0.0

    def condition(self) -> LinkCondition:
        """The LinkCondition; every bad value is one error naming it."""
        if self.count not in ("ethernet", "ip"):
            raise QuicbedError(f"count: unknown {self.count!r} (ethernet or ip)")
        rate = parse_rate(self.rate)
        try:
            jitter_kind = JitterKind(self.jitter_kind)
        except ValueError:
            raise QuicbedError(
                f"jitter kind: unknown {self.jitter_kind!r} "
                f"(one of {', '.join(k.value for k in JitterKind)})"
            ) from None
        kw = dict(
            rate_mbit=rate,
            rtt_ms=self.rtt,
            delay_down_ms=self.delay_down,
            delay_up_ms=self.delay_up,
            loss_pct=self.loss,
            loss_down_pct=self.loss_down,
            loss_up_pct=self.loss_up,
            jitter_ms=self.jitter,
            jitter_kind=jitter_kind,
            jitter_interval_ms=self.jitter_interval,
            queue=self.queue,
            ecn_threshold=self.ecn_threshold,
            count=self.count,
            seed=self.seed,
            trace=None if self.trace is None else capacity.from_file(self.trace, Path.cwd()),
            schedule=self.schedule,
            start_ms=self.start_at,
        )
        return make_condition(**{k: v for k, v in kw.items() if v is not None})


#: the link options ``quicbed cell`` offers (no per-direction values: a cell's
#: condition is stated as a paper states it)
CELL_LINK = (
    "rate",
    "rtt",
    "loss",
    "jitter",
    "jitter_kind",
    "jitter_interval",
    "queue",
    "ecn_threshold",
    "seed",
    "trace",
    "schedule",
    "start_at",
)


# --- a cell's own settings -----------------------------------------------------------
ShaperOpt = Annotated[
    str,
    typer.Option(
        "--shaper",
        help=shaper_help(),
    ),
]
SHAPER: str = CELL["shaper"]
ReceiptTcpSecondsOpt = Annotated[
    float, typer.Option(help="iperf3 TCP seconds per direction of the link's receipt.")
]
OffloadsOpt = Annotated[
    str,
    typer.Option(
        "--offloads",
        help="Interface offloads of every role's interface, e.g. gso=on,gro=on,tso=on,"
        "tx=on (ethtool -K; gso, gro, tso, tx; on needs --shaper none); default: the "
        "testbed's (local: all off).",
    ),
]
KeyExchangeOpt = Annotated[
    str,
    typer.Option(
        "--key-exchange",
        help="TLS key-exchange group every arm whose server can pin one runs, verified "
        "per load from its ServerHello: x25519, secp256r1 or x25519mlkem768 (h3 stacks "
        "only: Debian 12's OpenSSL has no ML-KEM), or stack (each server's own choice). "
        "An arm may name its own (h3-pq:stack=quic-go:key_exchange=x25519mlkem768).",
    ),
]
AeadOpt = Annotated[
    str | None,
    typer.Option(
        "--aead",
        help="TLS 1.3 cipher suite every arm whose server can pin one runs, verified per "
        "load from the server's record of every connection: aes-128-gcm, aes-256-gcm or "
        "chacha20-poly1305 (Apache pins all three; quic-go aes-128-gcm and "
        "chacha20-poly1305; quiche, Envoy and gQUIC none, named). An arm may name its own "
        "(h3:aead=chacha20-poly1305). Default: each stack's own choice.",
    ),
]
CertificateOpt = Annotated[
    str,
    typer.Option(
        "--certificate",
        help="The certificate chain every arm's server sends, KEY or KEY/N: KEY "
        "ecdsa-p256, rsa-2048 or rsa-4096 (every certificate of the chain), N the "
        "certificates sent: 1 (the leaf), 2 (the leaf and the root; the default) or 3 "
        "(the leaf, an intermediate and the root). Each chain has its own keys and its "
        "client trusts that chain alone; at --traces full every connection's chain is "
        "counted from the wire.",
    ),
]
OriginRttOpt = Annotated[
    str | None,
    typer.Option(
        "--origin-rtt",
        help="A replayed page's origins at their own distances: 'recorded' (each origin's "
        "RTT from its recording) or an extra RTT in ms for every origin, added by the "
        "userspace emulator per origin address on top of --rtt and checked per origin in "
        "the receipt. Default: every origin at the link's RTT.",
    ),
]
ServerTimeOpt = Annotated[
    str | None,
    typer.Option(
        "--server-time",
        help="A replayed page's server time: 'recorded' (every arm's server sends each "
        "response after its entry's recorded server time, judged per response by each "
        "server's own log) or 'none'. Default: none (every response at once).",
    ),
]
VisualOpt = Annotated[
    bool,
    typer.Option(
        "--visual/--no-visual",
        help="Capture every load's frames as the browser showed them and score its Speed "
        "Index and visually complete (part of the cell's identity: capturing costs the "
        "browser CPU). Default: off.",
    ),
]
BackgroundOpt = Annotated[
    str,
    typer.Option(
        "--background",
        help="Flows that share the bottleneck with every load, started before the first "
        "and running through the last, each one's goodput and share stored per load: "
        "comma-separated KIND:TRANSPORT:CC[:size=SIZE][:every=SECONDS][:direction=up], "
        "KIND bulk (one object back to back; size default 10MB) or chunks (size every "
        "SECONDS, as a video player), TRANSPORT tcp (kernel cubic, bbr, reno on the flow's "
        "own socket) or quic (quic-go cubic, reno); a download unless direction=up. E.g. "
        "bulk:tcp:bbr or chunks:quic:cubic:size=1MB:every=2. Default: none.",
    ),
]
CC: str = CELL["cc"]
ARMS = ",".join(CELL["arms"])
RunsOpt = Annotated[int, typer.Option(help="Measured loads per arm.")]
WarmupOpt = Annotated[int, typer.Option(help="Warm-up loads per arm (not in the stats).")]
ModeOpt = Annotated[
    str, typer.Option(help="0rtt (one browser context per arm) or 1rtt (a fresh one per load).")
]


def _arms_known() -> str:
    """The built-in arms by their stacks (``h2 (apache)``), from the stacks' registry."""
    return ", ".join(f"{arm} ({name})" for name, cls in stacks().items() for arm in cls.arms)


def _browser_help() -> str:
    """``--browser``'s help, from the browsers' and the stacks' registries."""
    names = list(browsers())
    needs = [f"{cls.client} for {', '.join(cls.arms)}" for cls in stacks().values()]
    own = [n for n in needs if not n.startswith(f"{DEFAULT} ")]
    return (
        f"Browser of every arm that names none: {', '.join(names[:-1])} or {names[-1]} "
        f"(default: the one the arms' stacks need{', ' if own else ''}{', '.join(own)}, "
        f"else {DEFAULT})."
    )


ArmsOpt = Annotated[
    str,
    typer.Option(
        help=(
            f"Comma-separated arms: {_arms_known()}, "
            "each with optional :KEY=VALUE settings (stack, cc, browser, cubic_n, cubic_beta, "
            "quic_version, tls; on a TCP arm tcp_sack, tcp_ecn, tcp_window_scaling, "
            "tcp_fastopen, initcwnd, rmem), e.g. h2:tcp_sack=false,h3:cubic_n=2,"
            "h3-quiche:cc=bbr2, or a new arm h3-n2:stack=quic-go:cubic_n=2."
        )
    ),
]
OrderOpt = Annotated[str, typer.Option(help="alternate (ABBA), random or blocked.")]
BrowserOpt = Annotated[
    str | None,
    typer.Option(help=_browser_help()),
]
CellCcOpt = Annotated[
    str,
    typer.Option(
        help=(
            "Congestion control of every arm that names none (TCP: the kernel's cubic, bbr, "
            "reno; each QUIC stack its own names)."
        )
    ),
]


@dataclass(frozen=True)
class CellOptions:
    """What ``quicbed cell`` measures besides the link: CellConfig's fields, with its
    defaults; ``config()`` validates them as a stored cell is validated."""

    runs: RunsOpt = CELL["runs"]
    warmup: WarmupOpt = CELL["warmup"]
    mode: ModeOpt = CELL["mode"]
    arms: ArmsOpt = ARMS
    order: OrderOpt = CELL["order"]
    cc: CellCcOpt = CC
    shaper: ShaperOpt = SHAPER
    offloads: OffloadsOpt = ""
    browser: BrowserOpt = CELL["browser"]
    key_exchange: KeyExchangeOpt = CELL["key_exchange"]
    certificate: CertificateOpt = CELL["certificate"]
    aead: AeadOpt = CELL["aead"]
    background: BackgroundOpt = ""
    origin_rtt: OriginRttOpt = None
    server_time: ServerTimeOpt = None
    visual: VisualOpt = False

    def config(self, condition: LinkCondition, page: str) -> CellConfig:
        names, settings = parse_cli(self.arms)
        return make_cell(
            condition=condition,
            page=page,
            runs=self.runs,
            warmup=self.warmup,
            mode=self.mode,
            arms=names,
            arm_settings=settings,
            order=self.order,
            cc=self.cc,
            shaper=self.shaper,
            offloads=self.offloads,
            browser=self.browser,
            key_exchange=self.key_exchange,
            certificate=self.certificate,
            aead=self.aead,
            background=self.background,
            origin_rtt=self.origin_rtt,
            server_time=self.server_time,
            visual=self.visual,
        )


# --- how a run copes with a noisy host (quicbed.link.hostpolicy) ----------------------
EmulatorPriorityOpt = Annotated[
    str | None,
    typer.Option(
        "--emulator-priority",
        help="How the userspace link emulator is scheduled: normal (the default) or rt "
        "(SCHED_FIFO; run: the spec's host.emulator_priority).",
    ),
]
QuietWaitOpt = Annotated[
    float | None,
    typer.Option(
        "--quiet-wait",
        help="Minutes a cell may wait for a quiet host when the host spoils a receipt, a "
        "check or a load (default 10; 0: fail at once; run: the spec's).",
    ),
]
LateToleranceOpt = Annotated[
    float | None,
    typer.Option(
        "--late-tolerance",
        help="Milliseconds a load's latest frame may leave the link emulator late before the "
        "load is replaced (default: 15 ms, or 10 % of the RTT if more; run: the spec's).",
    ),
]
MaxReplacedOpt = Annotated[
    int | None,
    typer.Option(
        "--max-replaced",
        help="Most loads per arm that a cell measures again in place of loads the link or "
        "host spoiled (default: half the runs; run: the spec's).",
    ),
]


@dataclass(frozen=True)
class HostOptions:
    """How a cell or sweep copes with a noisy host; unset: the spec's, else the defaults."""

    emulator_priority: EmulatorPriorityOpt = None
    quiet_wait: QuietWaitOpt = None
    late_tolerance: LateToleranceOpt = None
    max_replaced: MaxReplacedOpt = None

    def policy(self, base: HostPolicy | None = None) -> HostPolicy:
        """``base`` (a spec's; default: the defaults) with what the options set."""
        b = base or HostPolicy()
        return HostPolicy.from_options(
            self.emulator_priority or b.emulator_priority,
            b.quiet_wait_minutes if self.quiet_wait is None else self.quiet_wait,
            b.late_tolerance_ms if self.late_tolerance is None else self.late_tolerance,
            b.max_replaced if self.max_replaced is None else self.max_replaced,
        )


# --- options more than one command has ------------------------------------------------
#: the time budget above which a cell or a sweep asks for --yes
MAX_HOURS = 1.0
#: iperf3 TCP seconds per direction of a receipt (a sweep spec's default)
YesOpt = Annotated[bool, typer.Option("--yes", help="Run even if longer than --max-hours.")]
MaxHoursOpt = Annotated[
    float, typer.Option(help="Ask for --yes if the time estimate exceeds this many hours.")
]
TracesOpt = Annotated[
    str | None,
    typer.Option(
        "--traces",
        help="Transport traces per load or flow: none, light or full (default: light for "
        "page loads, none for bulk and compete flows; run: the spec's).",
    ),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="CPU profiles: none, or cpu (perf cpu-clock on each arm's server and client "
        "over the measured loads or flows: flame graphs and component shares; default: "
        "none; run: the spec's).",
    ),
]
KeepOpt = Annotated[
    bool,
    typer.Option("--keep-testbed", help="Leave the testbed up at the end (default: tear down)."),
]
