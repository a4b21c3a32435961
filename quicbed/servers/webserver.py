"""The one interface every server stack implements; a stack is one module of this package.

A server runs on the testbed's ``server`` role, serves one document tree with one
certificate, and keeps a log from which quicbed reads what happened per load (TLS
resumption for Apache, 0-RTT for QUIC, the congestion control in effect). The class
owns everything quicbed knows of its stack: the arm names that mean it (``arms``),
what an arm of it may ask for (``ccs`` and its own validated ``Params`` model), which
cell kinds and clients it serves (``kinds``, ``client``), what a valid load must show
(``evidence``), and how it is drawn (``colour``). Nothing outside this package names a
stack. Knobs a stack does not support are errors that name the stack, never silently
ignored.

This module sits below the spec (quicbed.spec.arms asks the stacks what an arm may be), so
it imports nothing of the spec: :class:`Arm`, the resolved arm every server is given,
is defined here.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.paths import Run, program_build
from quicbed.profile.components import own_map
from quicbed.replay.serve import ReplayServe
from quicbed.settings import keyexchange, sockopts, tparams
from quicbed.settings.tcpopts import OPTIONS as TCP_OPTIONS
from quicbed.testbed.lifecycle import Process, RPath, Testbed

#: what a cell measures: page loads in the browser, or transfers by quicbed-bulk
#: (quicbed.run.bulk): ``bulk`` one flow at a time per arm, ``compete`` flows of several
#: arms at once on one bottleneck (quicbed.spec.cellconfig.CellConfig.kind)
Kind = Literal["page", "bulk", "compete"]
KINDS: tuple[Kind, ...] = ("page", "bulk", "compete")


@dataclass(frozen=True)
class Arm:
    """One arm of one cell, resolved: every knob named, where it listens."""

    name: str
    stack: str
    protocol: str  # what the browser must see: h2 or h3
    transport: str  # tcp or udp
    cc: str
    params: dict[str, Any] = field(default_factory=dict)
    port: int = 443
    #: the browser a page cell loads this arm in (quicbed.client.browsers, resolved by
    #: quicbed.spec.arms.resolve); None in transfer cells, which load no page
    browser: str | None = None
    #: the TLS key-exchange group its server pins (quicbed.settings.keyexchange): the
    #: arm's own ``key_exchange`` or its cell's; None: the stack's own choice
    key_exchange: str | None = None

    def describe(self) -> str:
        extra = "".join(
            f", {k} {str(v).lower()}"
            if isinstance(v, bool)
            else f", {k} {v:g}"
            if isinstance(v, float)
            else f", {k} {v}"
            for k, v in self.params.items()
        )
        return f"{self.name} ({self.stack}, {self.cc}{extra})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stack": self.stack,
            "protocol": self.protocol,
            "transport": self.transport,
            "cc": self.cc,
            "params": self.params,
            "port": self.port,
            **({"browser": self.browser} if self.browser else {}),
            **({"key_exchange": self.key_exchange} if self.key_exchange else {}),
        }


class Params(BaseModel):
    """A stack's arm parameters: each stack subclasses this with its own fields, every
    one optional (unset: the stack's own default). A field's annotation is its type
    wherever the key is given (a spec, or ``--arms`` as text); its description is the
    one-line help."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def cubic_n_bound(v: int | None) -> int | None:
    """CUBIC's emulated connections: at least one (a stack's own upper limit is its own)."""
    if v is not None and v < 1:
        raise ValueError(f"cubic_n must be >= 1 (got {v})")
    return v


def cubic_beta_bound(v: float | None) -> float | None:
    """CUBIC's multiplicative decrease: a fraction, whichever stack runs it."""
    if v is not None and not 0 < v < 1:
        raise ValueError(f"cubic_beta must be in (0, 1) (got {v:g})")
    return v


def cold_origins(conns: Iterable[tuple[str, bool]]) -> dict[str, Any]:
    """A load's ``cold_origins`` (the origins, by server name, none of whose connections
    reused the previous load's state: 0-RTT for QUIC, TLS resumption for TCP) and
    ``cold_connections`` (how many connections did not), from (origin, reused) pairs,
    one per connection; none where no connection names its origin.

    Why per origin: a multi-origin page opens more than one connection to some origins
    (credentialed and anonymous requests, cross-site frames each have their own), while
    a browser keeps single-use TLS 1.3 tickets, one from each earlier connection, so a
    later connection to an origin may find none left. That is the browser's own policy,
    not state lost between loads; an origin with no reused connection at all is."""
    pairs = [(o, r) for o, r in conns if o]
    if not pairs:
        return {}
    warm = {o for o, r in pairs if r}
    return {
        "cold_origins": sorted({o for o, _ in pairs} - warm),
        "cold_connections": sum(not r for _, r in pairs),
    }


def reused_off_requests(facts: dict[str, Any], hosts: Mapping[str, str]) -> dict[str, Any]:
    """A TCP load's ``cold_origins`` less the origins a resumed handshake reached on a
    connection that carried no request, and those origins as ``reused_off_requests``;
    nothing where none did. ``hosts``: each origin's address (ReplayServe.host_map).

    Why: Chromium opens two connections to an origin that two requests of a page reach
    at once, sends the requests on the one whose handshake ends first and leaves the
    other idle, unread, so the ticket that connection was given is never stored: after
    the first warm load one ticket is left per origin, which the next load's first
    handshake to the origin takes (measured, docs/replay.md). When a host's
    hiccup lets the other connection end its handshake first, the requests go over its
    full handshake while the ticket went to the one left idle. A server's access log sees
    only the connections that carried requests and would call that origin cold, but its
    state was kept and used, as the client's capture of the hellos shows (each origin
    at an address of its own). An origin that no handshake resumed stays cold."""
    cold = facts.get("cold_origins")
    if not cold:
        return {}
    by_ip = {ip: host for host, ip in hosts.items()}
    warm = {
        by_ip.get(str(h.get("server_ip")))
        for h in facts.get("tls_hellos") or []
        if h.get("transport") == "tcp" and h.get("resumed")
    }
    moved = [o for o in cold if o in warm]
    if not moved:
        return {}
    return {"cold_origins": [o for o in cold if o not in warm], "reused_off_requests": moved}


def port_of(addr: str | None) -> int | None:
    """The port of ``host:port`` (a flow's address in a client's or a server's log)."""
    if not addr or ":" not in addr:
        return None
    try:
        return int(addr.rsplit(":", 1)[1])
    except ValueError:
        return None


@dataclass
class FlowFacts:
    """What a server's own log says of one transfer flow (quicbed.run.bulk): its connection's
    facts, and its loss counters in the stack's own terms (``source`` says which)."""

    server: dict[str, Any] = field(default_factory=dict)
    retransmissions: int | None = None
    retrans_bytes: int | None = None
    source: str = ""


@dataclass
class ServeSpec:
    """What every server of a cell serves, identically (paths on the server's machine)."""

    docroot: RPath
    cert: RPath
    key: RPath
    logdir: RPath
    #: where QUIC servers write one qlog file per connection, per arm (none: no qlog)
    qlog_dirs: dict[str, RPath] | None = None
    #: a replayed page (quicbed.replay.serve): every origin on its own address with its
    #: own certificate (on ``key``), served from the archive instead of ``docroot``
    replay: ReplayServe | None = None


class WebServer(ABC):
    #: the stack's registry name (quicbed.servers.get_stack), e.g. "quic-go"
    name: str
    protocol: str  # what a browser must see: h2 or h3
    transport: str  # tcp or udp: what "accepts connections" means
    log_name: str
    #: arm names that mean this stack when a spec names no stack (``h3`` is quic-go)
    arms: ClassVar[tuple[str, ...]] = ()
    #: congestion controls an arm of this stack may name, exactly as the stack names them
    ccs: tuple[str, ...] = ()
    #: the per-arm parameters the stack can apply, with their types and bounds
    Params: ClassVar[type[Params]] = Params
    #: what cells an arm of this stack can be measured in (page loads, transfers)
    kinds: ClassVar[tuple[Kind, ...]] = KINDS
    #: how figures name the transport of the stack's built-in arm, as the reference
    #: study did (``h2 (TCP)``); None: by stack and CC
    label: ClassVar[str | None] = None
    #: the arm's colour in figures (an arm of this stack that is not its built-in one
    #: takes the figures' cycle)
    colour: ClassVar[str | None] = None
    #: the QUIC transport parameters (quicbed.settings.tparams) the stack's server cannot
    #: advertise as asked, each with its reason; its ``Params`` takes them all
    #: (``TransportParams``), and ``check_arm`` refuses these by name
    transport_refusals: ClassVar[dict[str, str]] = {}
    #: the host and socket knobs (quicbed.settings.sockopts: UDP buffers, AEAD) the stack
    #: cannot apply, each with its reason, keyed by knob or ``knob=value``; a knob its
    #: ``Params`` lacks is refused with the reason here (or "cannot apply it")
    knob_refusals: ClassVar[dict[str, str]] = {}
    #: the key-exchange groups (quicbed.settings.keyexchange) a stack that can pin one
    #: (its ``Params`` has ``key_exchange``) cannot pin, each with its reason
    key_exchange_refusals: ClassVar[dict[str, str]] = {}
    #: why a stack whose ``Params`` has no ``key_exchange`` cannot pin a group: an arm
    #: asking for one is refused with it, and a cell's pin leaves its arms to their own
    #: choice, named in the cell's summary (quicbed.spec.arms.unpinned_arms)
    key_exchange_unpinned: ClassVar[str] = "cannot pin a key exchange"
    #: True: the server advertises one window for the three stream-data limits, so an
    #: arm gives all three, equal
    one_stream_window: ClassVar[bool] = False
    #: True: the server's qlog records every spurious loss (``recovery:spurious_loss``),
    #: so a load's traces can count them (quicbed.traces.facts)
    logs_spurious_losses: ClassVar[bool] = False
    #: True: the server writes a qlog per connection into ``qlog_dir`` (quic-go, quiche;
    #: Envoy's QUICHE and gQUIC's servers write none), the QUIC traces' only source
    writes_qlog: ClassVar[bool] = False
    #: False: the stack only runs on testbed nodes (its server is not built locally)
    local: bool = True
    #: True: the load's evidence includes the arm's browser NetLog where its browser
    #: writes one (quicbed.servers.gquiche, envoy): the runner gives the browser one and
    #: sets ``client_netlog`` before ``start``; whether a browser without one can load the
    #: arm is ``browser_refusal``'s to say
    wants_client_netlog: bool = False
    #: the browser an arm of this stack needs (quicbed.client.browsers; the default: any
    #: current browser that speaks its protocol); a cell whose arms name no browser then
    #: runs every arm in it, so the browser is not a confound (quicbed.spec.arms.resolve)
    client: str = "chromium"
    #: True: its QUIC server sends NEW_TOKEN frames (RFC 9000, 8.1.3) after the handshake
    #: (quic-go does, quiche never does): some browsers keep a session ticket, and so can
    #: resume and send 0-RTT, only after one (quicbed.client.browser.Browser.needs_new_token)
    new_token: ClassVar[bool] = True
    #: the TLS version a cell's TCP arm speaks beside an arm of this stack, unless the
    #: TCP arm sets ``tls`` itself (None: the TCP stack's own default)
    tcp_tls: str | None = None
    #: the software check's name of the stack's server program (quicbed.results.provenance
    #: records its build under it; None: the stack has none to probe), and where it is on
    #: the server: a file in quicbed's build/bin, or an absolute path (None: the name)
    software_name: ClassVar[str | None] = None
    program: ClassVar[str | None] = None
    #: the component that installs its server beyond the base (playbooks/group_vars:
    #: `make setup-NAME`), named when a cell needs it and it is missing; None: the base
    component: ClassVar[str | None] = None
    #: the repository's files that pin how its server is built (lock files, manifests),
    #: which a replication package carries (quicbed.package.build.repo_paths)
    source_files: ClassVar[tuple[str, ...]] = ()
    #: True: it serves a replay archive (ServeSpec.replay) by docs/replay.md's rules,
    #: every origin on its own address and certificate; a replay cell with an arm of a
    #: stack that cannot is refused when its arms are resolved
    replays: ClassVar[bool] = False
    #: its server's CPU map (quicbed.profile.components.own_map): a YAML file beside
    #: this stack's module, of the implementation study's categories and the patterns of
    #: its frames (None: the kernel's map alone)
    cpu_map_file: ClassVar[str | None] = None

    @classmethod
    def cpu_map(cls) -> dict[str, tuple[str, ...]]:
        """Which component each sampled frame of its server belongs to (``--profile``)."""
        return own_map(cls)

    @classmethod
    def software(cls, run: Run, bindir: RPath) -> dict[str, Any] | None:
        """The build of this stack's program on the server (``run`` asks there; ``bindir``
        is quicbed's build/bin there): its file's SHA-256 and, for a Go program, the
        module versions in it; None where it is not installed. A digest, because a
        rebuild from changed code keeps its version: attempts of two builds must not
        pool in one cell unnoticed (quicbed.results.folder.check_software)."""
        if cls.software_name is None:
            return None
        return program_build(run, str(bindir / (cls.program or cls.software_name)))

    def __init__(self, tb: Testbed, spec: ServeSpec, arm: Arm) -> None:
        self.tb = tb
        self.spec = spec
        self.arm = arm
        #: the arm's Chromium NetLog on the client, where ``wants_client_netlog``
        self.client_netlog: RPath | None = None
        #: the link condition of the cell this server serves, which ``evidence`` may judge
        #: a load's facts against (the cell runner sets it; None: not in a cell)
        self.condition: LinkCondition | None = None
        self.process: Process | None = None
        self._offset = 0

    @property
    def quic_version(self) -> str | None:
        """The QUIC version the browser must be forced to (gQUIC); None: the browser's own."""
        return None

    @classmethod
    def browser_refusal(cls, arm: Arm, browser: str, net_log: bool) -> str | None:
        """Why ``arm`` cannot load in ``browser`` (``net_log``: it writes a NetLog), as far
        as this stack's evidence is concerned; None: it can."""
        if cls.wants_client_netlog and not net_log:
            return (
                f"{cls.name}'s evidence is the browser's NetLog, which browser {browser} "
                "does not write (load it in chromium)"
            )
        return None

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        """Refuse, naming the value, what this stack cannot do for arm ``arm``; return the
        parameters typed and in the order the stack declares them."""
        if cc not in cls.ccs:
            raise QuicbedError(
                f"arm {arm}: congestion control {cc!r} is not offered by {cls.name} "
                f"(it has {', '.join(cls.ccs)}; give the arm its own, e.g. {arm}:cc={cls.ccs[0]})"
            )
        own = cls.Params.model_fields
        for key in params:
            if key in own:
                continue
            if key in TCP_OPTIONS and cls.transport != "tcp":
                raise QuicbedError(
                    f"arm {arm}: {key} is a TCP option, and {cls.name} runs QUIC "
                    f"over UDP (set it on the cell's TCP arm, e.g. "
                    f"h2:{key}=...)"
                )
            if key == "key_exchange":
                raise QuicbedError(
                    f"arm {arm}: key_exchange {params[key]}: {cls.name} {cls.key_exchange_unpinned}"
                )
            if sockopts.is_key(key):
                why = cls.knob_refusals.get(key, "cannot apply it")
                shown = sockopts.shown(params[key])
                raise QuicbedError(f"arm {arm}: {key} {shown}: {cls.name} {why}")
            if tparams.is_key(key) and cls.transport == "tcp":
                raise QuicbedError(
                    f"arm {arm}: {key} is a QUIC transport parameter, and {cls.name} "
                    "runs TCP (set it on a QUIC arm)"
                )
            has = f"it takes {', '.join(own)}" if own else "it takes none"
            raise QuicbedError(f"arm {arm}: {cls.name} has no parameter {key} ({has})")
        try:
            typed = cls.Params(**params)
        except ValidationError as exc:
            err = exc.errors()[0]
            if err["type"] == "value_error":
                msg = str(err["ctx"]["error"])
            else:
                where = ".".join(str(x) for x in err["loc"])
                msg = f"{where} {err['input']!r}: {err['msg']} ({cls.name})"
            raise QuicbedError(f"arm {arm}: {msg}") from None
        out = {k: v for k, v in typed.model_dump().items() if k in params and v is not None}
        refused = cls.key_exchange_refusals.get(str(out.get("key_exchange")))
        if refused:
            raise QuicbedError(
                f"arm {arm}: key_exchange {out['key_exchange']}: {cls.name} {refused}"
            )
        tparams.refuse(arm, cls.name, out, cls.transport_refusals)
        sockopts.refuse(arm, cls.name, out, cls.knob_refusals)
        if cls.one_stream_window:
            tparams.one_stream_window(arm, cls.name, out)
        tparams.check_server(arm, out)
        return out

    @classmethod
    def pins_key_exchange(cls) -> bool:
        """True: the stack's server can pin the TLS key-exchange group."""
        return "key_exchange" in cls.Params.model_fields

    @classmethod
    def check_kind(cls, arm: str, kind: Kind) -> None:
        """Refuse, before anything starts, a cell kind this stack cannot be measured in."""
        if kind not in cls.kinds:
            raise QuicbedError(
                f"arm {arm}: {cls.name} cannot be measured in a {kind} cell "
                f"(it serves {', '.join(cls.kinds)} cells)"
            )

    @classmethod
    def caption(cls, arm: Arm, component: dict[str, Any]) -> str:
        """The arm's server and protocol version for a figure's caption, from what the
        attempt recorded of it (``version()``): a heatmap says what software made it."""
        start = component.get("start") or {}
        server = str(start.get("server") or component.get("server") or arm.stack)
        return f"{server}, {cls.wire(arm)}"

    @classmethod
    def wire(cls, arm: Arm) -> str:
        """The protocol version on the wire, as a caption names it."""
        return "QUIC v1"

    @classmethod
    def against_study(cls, arm: Arm) -> str | None:
        """How this arm's QUIC differs from the reference study's (Google QUICHE's
        quic_server, CUBIC with N = 2), for the report under each heatmap: a preset that
        claims the study's settings must say where an arm does not run them. None: a
        TCP arm, or nothing to say."""
        return None

    @classmethod
    def check_testbed(cls, arm: Arm, tb: Testbed) -> None:
        """Refuse, before anything starts, an arm this testbed cannot run."""
        if not cls.local and tb.controller_is_host:  # its server is built on nodes only
            raise QuicbedError(
                f"arm {arm.name}: {cls.name} runs only on testbed nodes (--testbed ssh), "
                "not on the local testbed"
            )

    def _own(self, file: str) -> RPath:
        """A file of this arm in the log folder: the built-in arms (h2, h3) keep the
        names they always had; other arms' files start with the arm's name."""
        builtin = self.arm.name == self.arm.protocol
        return self.spec.logdir / (file if builtin else f"{self.arm.name}.{file}")

    @property
    def log(self) -> RPath:
        return self._own(self.log_name)

    @property
    def qlog_dir(self) -> RPath | None:
        return (self.spec.qlog_dirs or {}).get(self.arm.name)

    @abstractmethod
    def argv(self) -> list[str]: ...

    def env(self) -> dict[str, str] | None:
        """Variables to add to the server's environment."""
        return None

    def browser_options(self) -> dict[str, Any]:
        """Fields of this arm's BrowserSpec (quicbed.client.chromium) its browser must be
        started with: e.g. the QUIC connection options a server reads from its client."""
        return {}

    def page_protocol(self) -> str:
        """The protocol every response of a valid load has in the HAR (normalised)."""
        return self.protocol

    def url(self, host: str, page: str) -> str:
        """Where the browser loads ``page`` from this arm's server (a replayed page: its
        main document, whose origin the browser maps to the arm's server)."""
        if self.spec.replay is not None:
            return self.spec.replay.main
        port = "" if self.arm.port == 443 else f":{self.arm.port}"
        return f"https://{host}{port}/{page}/"

    def origin_addresses(self) -> tuple[tuple[str, str], ...]:
        """Where this arm's server answers each origin of a replayed page (the browser's
        host map): the origin's address, and the arm's port where it is not 443."""
        if self.spec.replay is None:
            return ()
        port = "" if self.arm.port == 443 else f":{self.arm.port}"
        return tuple((o.host, f"{o.ip}{port}") for o in self.spec.replay.origins)

    @classmethod
    def check_replay(cls, arm: str) -> None:
        """Refuse, before anything starts, a replay cell's arm whose stack cannot replay."""
        if not cls.replays:
            raise QuicbedError(
                f"arm {arm}: {cls.name} cannot serve a replayed page (docs/replay.md names "
                "the stacks that can)"
            )

    def ready(self) -> bool:
        """True once the server accepts connections."""
        return self.tb.listening("server", self.transport, self.arm.port)

    def hold(self, held: ExitStack) -> None:
        """Enter on ``held`` what must be in force while the server runs (a host-wide
        parameter under quicbed.hostparam's lock, sysctls, a capture): before it starts,
        let go when it stops or fails to start. Nothing by default."""
        return None

    def start(self, timeout: float = 20) -> None:
        self._held = ExitStack()
        try:
            self.hold(self._held)
            self._hellos = self._hello_capture(self._held)
            self._spawn(timeout)
        except BaseException:
            self._held.close()
            raise

    def _hello_capture(self, held: ExitStack) -> keyexchange.HelloCapture | None:
        """The capture that verifies a pinned key exchange per load, for the server's
        lifetime (quicbed.settings.keyexchange), and that sees a replayed page's
        handshakes to each origin, those of connections that carried no request too
        (reused_off_requests); None where the arm pins none and serves no archive."""
        if self.arm.key_exchange is None and self.spec.replay is None:
            return None
        cap = keyexchange.HelloCapture(self.tb, self.arm.port, self.transport, self.arm.name)
        cap.start()
        held.callback(cap.stop)
        return cap

    def _spawn(self, timeout: float) -> None:
        stderr = self._own(f"{self.name}.stderr")
        self.tb.mkdir("server", self.spec.logdir)
        self.process = self.tb.spawn("server", self.argv(), log=stderr, env=self.env())
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                err = self.tb.read_text("server", stderr)
                self.stop()
                tail = " | ".join(err.strip().splitlines()[-3:])
                raise QuicbedError(
                    f"{self.name} ({self.arm.name}) did not start: {tail or 'no output'}"
                )
            time.sleep(0.05)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        try:
            if self.process is not None:
                self.process.stop(timeout=10)
                self.process = None
        finally:
            held = getattr(self, "_held", None)
            if held is not None:
                held.close()

    def mark(self) -> None:
        """Remember where the log ends, so the next ``since_mark`` sees one load's lines
        (and where the hello capture's packets end)."""
        self._offset = self.tb.size("server", self.log)
        hellos = getattr(self, "_hellos", None)
        if hellos is not None:
            hellos.mark()

    def since_mark(self) -> list[str]:
        data = self.tb.read_bytes("server", self.log, self._offset)
        return data.decode(errors="replace").splitlines()

    @abstractmethod
    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        """What the server's own log says about one load (connections, resumption, 0-RTT,
        ``cc``: the sorted congestion controls its connections ran)."""

    def flow_closed(self, lines: list[str], port: int | None) -> bool:
        """True once ``lines`` (the log since a flow began) record the close of the flow's
        connection from client ``port``, so its counters are final. A stack whose log
        keeps no connections has nothing to wait for."""
        return True

    def flow_facts(self, lines: list[str], port: int | None) -> FlowFacts:
        """One transfer flow's facts from the log since it began (the flow's client port
        says which connection): a TCP stack's come from the kernel, not from here."""
        return FlowFacts(source="this stack's server logs no loss counters")

    def observe(self) -> dict[str, Any]:
        """Facts about the load just done from outside the server's log (the kernel; the
        hellos on the wire where the arm pins a key exchange). A stack that observes more
        adds its own to these."""
        hellos = getattr(self, "_hellos", None)
        return hellos.read() if hellos is not None else {}

    def evidence(self, facts: dict[str, Any]) -> list[str]:
        """Why a load's server-side facts do not show this arm's transport settings."""
        reasons = []
        seen = facts.get("cc")
        if seen is None:
            reasons.append(f"{self.name} reported no congestion control for this load")
        elif seen != [self.arm.cc]:
            reasons.append(
                f"the server's connections ran {','.join(seen) or 'nothing'}, not {self.arm.cc}"
            )
        return reasons + self.param_evidence(facts)

    @classmethod
    def record_line(cls, loads: list[dict[str, Any]], cond: LinkCondition | None) -> str | None:
        """One line on what an arm's loads ran under, from their server facts, for the
        report and a cell's summary (None: this stack keeps no such record)."""
        return None

    def param_evidence(self, facts: dict[str, Any]) -> list[str]:
        """The arm's parameters (cubic_n, ...) against the values the log read back; its
        transport parameters against what each side advertised (quicbed.settings.tparams)."""
        reasons = []
        for key, want in self.arm.params.items():
            if tparams.is_key(key) or sockopts.is_key(key) or key == "key_exchange":
                continue
            got = facts.get(key)
            if isinstance(want, str):
                if got != [want]:
                    reasons.append(f"the server's log shows {key} {got}, not {want}")
                continue
            if got is None or any(abs(float(v) - float(want)) > 1e-6 for v in got):
                reasons.append(f"the server's log shows {key} {got}, not {want:g}")
        return (
            reasons
            + tparams.evidence(tparams.server_sees(self.arm.params), facts)
            + sockopts.evidence(self.arm.params, facts)
            + keyexchange.evidence(self.arm.key_exchange, facts)
        )

    @abstractmethod
    def version(self) -> dict[str, Any]: ...
