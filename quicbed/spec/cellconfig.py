"""One cell: a network condition x one page x the protocol arms compared in it.

A cell's identity is a hash of its fully resolved configuration, so results can be
resumed, rerun and merged safely: the same configuration always gets the same ID.
Software versions are not in the hash; they are stored with every attempt and
checked before runs are pooled.

The stacks, browsers and shapers (quicbed.servers, quicbed.client, quicbed.shapers)
are imported inside the functions that ask them: the results folder's readers and
``quicbed verify`` load this module and must not load the runner (tests/test_layering.py).
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from quicbed.client import get_browser
from quicbed.errors import QuicbedError, from_validation
from quicbed.model.link import LinkCondition, origin_rtt_text
from quicbed.replay import archive, pagestore, serve
from quicbed.roles.offloads import check_shaper, parse
from quicbed.servers import get_stack, tcp_ccs
from quicbed.servers.webserver import Arm, Kind
from quicbed.settings import certificate as chains
from quicbed.settings import keyexchange, sockopts
from quicbed.shapers import check_condition, check_name
from quicbed.spec import workloads
from quicbed.spec.arms import ArmSettings, resolve
from quicbed.spec.background import BackgroundFlow, parse_background
from quicbed.spec.bulkobjects import object_path, parse_size

ARMS = ("h2", "h3")
#: fields added after stores existed: left out of the cell ID while at their default,
#: so every cell measured before keeps its ID
_NEW_FIELDS: dict[str, object] = {
    "arm_settings": {},
    "kind": "page",
    "transfer": None,
    "browser": None,
    "offloads": {},
    "replay": None,
    # cells stored before the setting ran each stack's own group (Store fills it in)
    "key_exchange": "stack",
    "background": [],
    "certificate": chains.DEFAULT,
    "aead": None,
    "origin_rtt": None,
    "server_time": None,
    "visual": False,
}
#: the same for the link condition's fields
_NEW_CONDITION_FIELDS: dict[str, object] = {
    "ecn_threshold": None,
    "trace": None,
    "trace_sha256": None,
    "trace_mean_mbit": None,
    "schedule": None,
    "start_ms": 0.0,
    "origin_rtt": None,
}
TEST_HOST = "quicbed.test"
#: resolved arms (frozen) by the settings they were resolved from: a cell resolves its
#: arms when it is made and whenever asked, and a plan makes thousands of cells from a
#: few settings (the catalog's check planned 12,460 cells, resolving 37,212 times); an
#: error is raised again each time, never kept
_RESOLVED: dict[tuple[Any, ...], tuple[Arm, ...]] = {}
_RESOLVED_MAX = 4096
#: Upper bounds that catch typos before the time estimate does (10 000 loads per arm
#: is days of measurement; more warm-ups than that are never needed).
MAX_RUNS = 10_000
MAX_WARMUP = 100
MAX_LOAD_TIMEOUT_S = 600.0
#: how a user writes "no rate limit" (a stored condition says ``rate_mbit: null``); the
#: first is the spelling quicbed prints, the others are accepted as they always were
UNLIMITED = ("unlimited", "none", "inf")


def parse_rate(value: object) -> float | None:
    """A rate in Mbit/s, or None for unlimited: the one reading of a rate that the CLI
    options, sweep specs and ``--where rate=...`` share, so ``unlimited`` means the same
    everywhere. Range checks stay with LinkCondition (its errors name the bound)."""
    if value is None:
        return None
    if isinstance(value, str):
        if value.strip().lower() in UNLIMITED:
            return None
        try:
            return float(value)
        except ValueError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise QuicbedError(f"rate: not a number of Mbit/s or 'unlimited' (got {value!r})")


def _rate_field(value: object) -> object:
    try:
        return parse_rate(value)
    except QuicbedError as exc:
        raise ValueError(str(exc).removeprefix("rate: ")) from None


#: a rate field of a model (e.g. a sweep spec's ``rate`` list), read by parse_rate
Rate = Annotated[float | None, BeforeValidator(_rate_field)]

#: a bound on typos: flows at once in a compete cell, seconds of one transfer
MAX_FLOWS = 32
MAX_TRANSFER_S = 3600.0


def parse_flows(text: str) -> tuple[tuple[str, int], ...]:
    """``h3x1,h2x4`` (or ``h3,h2``: one flow each) as ((arm, flows), ...): the one
    spelling of a compete cell's flows, in the CLI's ``--flows`` and a spec's ``flows``."""
    out = []
    for part in str(text).split(","):
        arm, _, n = part.strip().partition("x")
        try:
            count = int(n) if n else 1
        except ValueError:
            count = 0
        if not arm or count < 1:
            raise QuicbedError(f"flows: {part.strip()!r} is not ARMxN with N >= 1 (e.g. h3x1,h2x4)")
        out.append((arm, count))
    if len({a for a, _ in out}) != len(out):
        raise QuicbedError(f"flows: an arm is named twice in {text!r}")
    return tuple(out)


def flows_text(flows: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"{a}x{n}" for a, n in flows)


class Transfer(BaseModel):
    """A bulk or compete cell's transfer: the object, and how long each flow runs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    #: the object fetched (quicbed.spec.bulkobjects: 10MB, 1GB, ...)
    size: str = "100MB"
    #: seconds each flow runs, the object fetched again and again on its connection;
    #: None: the object once (bulk only)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_TRANSFER_S)
    #: compete: (arm, flows) in start order; empty for bulk
    flows: tuple[tuple[str, int], ...] = ()
    #: compete: seconds between one flow's start and the next's
    stagger_s: float = Field(default=0.0, ge=0, le=MAX_TRANSFER_S)

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:

        try:
            parse_size(v)
        except QuicbedError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("flows", mode="before")
    @classmethod
    def _flows(cls, v: object) -> object:
        if isinstance(v, str):
            try:
                return parse_flows(v)
            except QuicbedError as exc:
                raise ValueError(str(exc).removeprefix("flows: ")) from None
        return v


def _offloads(value: object) -> dict[str, str]:
    """A spec's mapping or the CLI's ``gso=on,gro=off`` (quicbed.roles.offloads.parse)."""

    try:
        return parse(value)
    except QuicbedError as exc:
        raise ValueError(str(exc).removeprefix("offloads: ")) from None


def _background(value: object) -> tuple[BackgroundFlow, ...]:
    """A spec's list or the CLI's ``bulk:tcp:cubic,...`` (quicbed.spec.background)."""

    try:
        return parse_background(value)
    except QuicbedError as exc:
        raise ValueError(str(exc).removeprefix("background: ")) from None


def _origin_setting(value: object) -> str | None:
    try:
        return serve.origin_setting(value)
    except QuicbedError as exc:
        raise ValueError(str(exc)) from None


def _server_time(value: object) -> str | None:
    try:
        return serve.server_time_setting(value)
    except QuicbedError as exc:
        raise ValueError(str(exc)) from None


def _with_origin_rtts(data: dict[str, Any]) -> dict[str, Any]:
    """A replay cell's ``origin_rtt`` resolved into its condition's per-address RTTs
    from the archive (a stored cell's condition has them already, and keeps them: the
    archive need not be in the store to read results)."""
    setting = _origin_setting(data.get("origin_rtt"))
    if setting is None:
        return data
    cond = data.get("condition")
    fields = cond.model_dump() if isinstance(cond, LinkCondition) else dict(cond or {})
    if fields.get("origin_rtt") is not None:
        return data
    if not data.get("replay"):
        raise ValueError(
            f"origin_rtt {setting!r} places a replayed page's origins; page "
            f"{data.get('page')!r} is one origin (import or build a page: quicbed pages)"
        )
    folder = archive.find(str(data.get("page")))
    if folder is None:
        raise ValueError(f"origin_rtt: no replay archive {data.get('page')!r} in {archive.store()}")
    rtts = serve.origin_rtts(archive.load(folder, check_bodies=False), setting)
    return {**data, "condition": {**fields, "origin_rtt": origin_rtt_text(rtts)}}


def shaper_field(v: str) -> str:
    """A shaper's name as a cell's or a spec's field takes it: known by name here
    (quicbed.shapers); whether it can run on a testbed is cell.validate's question."""

    try:
        return check_name(v)
    except QuicbedError as exc:
        raise ValueError(str(exc)) from None


class CellConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    condition: LinkCondition
    page: str
    runs: int = Field(default=20, description="measured loads per arm")
    warmup: int = Field(default=1, description="loads per arm before the measured ones")
    mode: Literal["0rtt", "1rtt"] = "0rtt"
    arms: tuple[str, ...] = ARMS
    order: Literal["alternate", "random", "blocked"] = "alternate"
    order_seed: int = 1
    #: every arm's congestion control unless the arm names its own (arm_settings);
    #: a stack names its CCs exactly (quicbed.servers), TCP's are the kernel's
    cc: str = "cubic"
    #: per-arm stack, CC and parameters (quicbed.spec.arms.ArmSettings), by arm name
    arm_settings: dict[str, ArmSettings] = {}
    shaper: str = "auto"
    #: interface offloads of every role's interface (quicbed.roles.offloads: gso, gro,
    #: tso, tx -> on/off), the testbed's own where unnamed; on only with shaper none
    offloads: Annotated[dict[str, str], BeforeValidator(_offloads)] = {}
    host: str = TEST_HOST
    load_timeout_s: float = Field(default=60.0, gt=0, le=MAX_LOAD_TIMEOUT_S)
    #: page loads, or a transfer (``transfer`` says which object, how long, which flows);
    #: a transfer cell's ``page`` names its object (quicbed.spec.bulkobjects.object_path)
    kind: Kind = "page"
    transfer: Transfer | None = None
    #: the browser every arm loads its pages in unless the arm names its own
    #: (quicbed.client.browsers: chromium, chromium72, firefox); None: the one the arms'
    #: stacks need (chromium72 for gQUIC), else chromium (quicbed.spec.arms.resolve)
    browser: str | None = None
    #: a replayed page (quicbed.replay): the digest of the archive ``page`` names in the
    #: page store, filled in when the cell is made (so the cell's identity is the
    #: archive's content, not its name); None: a page of workloads/pages.yaml
    replay: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    #: the TLS key-exchange group every arm whose stack can pin one runs unless the arm
    #: names its own (quicbed.settings.keyexchange: x25519, secp256r1, x25519mlkem768;
    #: ``stack``: each stack's own choice, as before the setting)
    key_exchange: str = keyexchange.DEFAULT
    #: the certificate chain every arm's server sends (quicbed.settings.certificate:
    #: KEY/N, a key type and a count; default the chain quicbed served before the setting)
    certificate: str = chains.DEFAULT
    #: the TLS 1.3 cipher suite (its AEAD: quicbed.settings.sockopts.AEADS) every arm
    #: whose server can pin one runs unless the arm names its own ``aead``; None: each
    #: stack's own choice (the client's preference among its suites)
    aead: str | None = None
    #: flows that share the bottleneck with every load of a page cell, started before
    #: the first and running through the last (quicbed.spec.background); () : none
    background: Annotated[tuple[BackgroundFlow, ...], BeforeValidator(_background)] = ()
    #: a replayed page's origins at their own distances (quicbed.replay.serve):
    #: ``recorded`` (each origin's RTT from its recording) or one extra RTT in ms for
    #: every origin, added by the emulator per origin address on top of the link's; the
    #: condition's ``origin_rtt`` holds what it resolved to. None: every origin at the
    #: link's RTT
    origin_rtt: Annotated[str | None, BeforeValidator(_origin_setting)] = None
    #: a replayed page's server time (quicbed.replay.serve.server_time_setting):
    #: ``recorded``, each response sent after its entry's recorded server time
    #: (``wait_ms``) by every arm's server, and judged per response by each server's own
    #: log (quicbed.replay.verify.served_reasons); None: every response at once
    server_time: Annotated[str | None, BeforeValidator(_server_time)] = None
    #: every load's frames captured as the browser showed them, scored into Speed Index
    #: and visually complete (quicbed.client.visual). In the identity: capturing costs
    #: the browser CPU (docs/benchmarks/visual.md), so loads with and without it are not
    #: one measurement
    visual: bool = False

    @field_validator("key_exchange", mode="before")
    @classmethod
    def _key_exchange(cls, v: object) -> str:
        return keyexchange.parse(v)

    @field_validator("aead")
    @classmethod
    def _aead(cls, v: str | None) -> str | None:
        return sockopts.aead_name(v)

    @field_validator("certificate", mode="before")
    @classmethod
    def _certificate(cls, v: object) -> str:
        try:
            return chains.parse(v)
        except ValueError as exc:
            raise ValueError(f"certificate {exc}") from None

    @field_validator("browser")
    @classmethod
    def _browser(cls, v: str | None) -> str | None:

        if v is not None:
            try:
                get_browser(v)
            except QuicbedError as exc:
                raise ValueError(str(exc)) from None
        return v

    @field_validator("runs")
    @classmethod
    def _runs(cls, v: int) -> int:
        if v < 2:
            raise ValueError(f"runs must be >= 2 for a variance (got {v})")
        if v > MAX_RUNS:
            raise ValueError(f"runs must be at most {MAX_RUNS} (got {v})")
        return v

    @field_validator("warmup")
    @classmethod
    def _warmup(cls, v: int) -> int:
        if not 0 <= v <= MAX_WARMUP:
            raise ValueError(f"warmup must be in [0, {MAX_WARMUP}] (got {v})")
        return v

    _shaper = field_validator("shaper")(shaper_field)

    @field_validator("arms")
    @classmethod
    def _arms(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("no arms (give at least one, e.g. h2,h3)")
        if len(set(v)) != len(v):
            raise ValueError(f"arm listed twice in {','.join(v)}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _replay_page(cls, data: Any) -> Any:
        """A page cell whose page names an archive of the page store, and not a page of
        workloads/pages.yaml, replays it: its digest is filled in."""
        if not isinstance(data, dict):
            return data
        if data.get("replay") or data.get("kind", "page") != "page":
            return _with_origin_rtts(data)
        page = data.get("page")
        if isinstance(page, str) and pagestore.ensure(page) is not None:
            if page in workloads.load().pages:
                raise ValueError(
                    f"page {page!r} is both a page of workloads/pages.yaml and a replay "
                    f"archive in {archive.store()}: rename the archive"
                )
            data = {**data, "replay": archive.digest_of(page)}
        return _with_origin_rtts(data)

    @model_validator(mode="after")
    def _resolve(self) -> CellConfig:
        """Every arm's stack, CC and parameters, and the condition against a named shaper,
        checked now: nothing starts otherwise."""

        try:
            arms = self.resolved_arms()
            check_condition(self.shaper, self.condition)  # e.g. shaper none with a rate
            check_shaper(self.shaper, self.offloads)  # offloads on need shaper none
        except QuicbedError as exc:
            raise ValueError(str(exc)) from None
        if self.offloads.get("gso") == "on":
            for a in arms:
                if a.params.get("gso") is not None:
                    raise ValueError(
                        f"arm {a.name}: its gso is verified by the server interface's "
                        "packets per UDP send, which an interface with offloads gso=on "
                        "counts per datagram: set one or the other"
                    )
        self._check_kind()
        self._check_background()
        if self.server_time is not None and self.replay is None:
            raise ValueError(
                f"server_time {self.server_time}: a replayed page's recorded server times; "
                f"page {self.page!r} is not one (import or build a page: quicbed pages)"
            )
        if self.condition.origin_rtt is not None and (self.replay is None or not self.origin_rtt):
            raise ValueError(
                f"a link with per-origin RTTs ({self.condition.origin_rtt}) is a replayed "
                "page's: set the cell's origin_rtt (recorded, or ms for every origin)"
            )
        self._check_modes(arms)
        if self.replay is not None:
            try:
                for a in arms:
                    get_stack(a.stack).check_replay(a.name)
            except QuicbedError as exc:
                raise ValueError(str(exc)) from None
        return self

    def _check_modes(self, arms: list[Arm]) -> None:
        """Every arm's browser can measure the cell's mode (0-RTT or 1-RTT) against the
        arm's server."""

        for a in arms:
            if a.browser is None:
                continue
            cls = get_browser(a.browser)
            if self.mode not in cls.modes:
                raise ValueError(
                    f"arm {a.name}: mode {self.mode} with browser {a.browser}: "
                    f"{cls.label} measures {', '.join(cls.modes)} only (docs/browsers.md)"
                )
            stack = get_stack(a.stack)
            ticketless = a.transport == "udp" and cls.needs_new_token and not stack.new_token
            if self.mode == "0rtt" and ticketless:
                raise ValueError(
                    f"arm {a.name}: mode 0rtt with browser {a.browser} and stack "
                    f"{stack.name}: {cls.label} keeps a session ticket only after a "
                    f"NEW_TOKEN frame, which {stack.name} never sends, so its loads "
                    f"cannot be 0-RTT (docs/browsers.md); use mode 1rtt or chromium"
                )

    def _check_background(self) -> None:
        """Background flows need a page cell to run beside and a bottleneck to share."""
        if not self.background:
            return
        if self.kind != "page":
            raise ValueError(
                f"background flows run beside page loads; a {self.kind} cell's own flows "
                "share its link (compete cells put flows against each other)"
            )
        if self.shaper == "none":
            raise ValueError(
                "background flows with shaper none: there is no bottleneck to share "
                "(the flows would only load the host)"
            )

    def _check_kind(self) -> None:
        """A transfer's settings belong to transfer cells only, and say everything a
        transfer needs; a page cell's warm-ups and modes mean nothing to a transfer."""
        t = self.transfer
        if self.kind == "page":
            if t is not None:
                raise ValueError("transfer settings are for bulk and compete cells (kind)")
            return
        if t is None:
            raise ValueError(f"a {self.kind} cell needs its transfer (size, duration, flows)")
        if self.certificate != chains.DEFAULT:
            raise ValueError(
                f"certificate {self.certificate} is for page cells: a {self.kind} cell "
                f"serves its flows the default chain ({chains.DEFAULT}), whose one "
                "handshake per flow is not what it measures"
            )
        if self.warmup != 0:
            raise ValueError(f"a {self.kind} cell has no warm-up loads (warmup {self.warmup})")
        if self.mode != "0rtt":
            raise ValueError(f"mode {self.mode} is for page loads, not a {self.kind} cell")
        if self.visual:
            raise ValueError(f"visual is for page loads: a {self.kind} cell shows no page")

        if self.page != object_path(t.size):
            raise ValueError(
                f"a {self.kind} cell's page is its object {object_path(t.size)!r} "
                f"(got {self.page!r})"
            )
        if self.kind == "bulk":
            if t.flows or t.stagger_s:
                raise ValueError("flows and stagger are for compete cells, not bulk")
            return
        if not t.flows:
            raise ValueError("a compete cell needs its flows (e.g. h3x1,h2x1)")
        if t.duration_s is None:
            raise ValueError("a compete cell needs a duration (seconds every flow runs)")
        named = [a for a, _ in t.flows]
        if tuple(named) != self.arms:
            raise ValueError(
                f"a compete cell's arms are its flows' arms in order "
                f"({','.join(named)}), got {','.join(self.arms)}"
            )
        total = sum(n for _, n in t.flows)
        if not 2 <= total <= MAX_FLOWS:
            raise ValueError(
                f"a compete cell runs 2 to {MAX_FLOWS} flows at once "
                f"(flows {flows_text(t.flows)}: {total})"
            )

    def resolved_arms(self) -> list[Arm]:
        key = (
            self.arms,
            tuple((k, v.model_dump_json()) for k, v in sorted(self.arm_settings.items())),
            self.cc,
            self.kind,
            self.browser,
            self.key_exchange,
            self.aead,
        )
        got = _RESOLVED.get(key)
        if got is None:
            if len(_RESOLVED) >= _RESOLVED_MAX:
                _RESOLVED.clear()
            got = _RESOLVED[key] = tuple(
                resolve(
                    self.arms,
                    self.arm_settings,
                    self.cc,
                    self.kind,
                    self.browser,
                    self.key_exchange,
                    self.aead,
                )
            )
        return list(got)

    def browsers(self) -> list[str]:
        """The browsers this cell's arms load their pages in, in arm order (none for a
        transfer cell)."""
        return list(dict.fromkeys(a.browser for a in self.resolved_arms() if a.browser))

    def tcp_cc(self) -> str:
        """The hosts' TCP congestion control: the TCP arm's, else the cell's CC where the
        kernel has it by that name, else cubic (a QUIC-only cell's iperf3 receipt)."""
        tcp = [a for a in self.resolved_arms() if a.transport == "tcp"]
        if tcp:
            return tcp[0].cc
        return self.cc if self.cc in tcp_ccs() else "cubic"

    def cell_id(self) -> str:
        """12 hex digits of SHA-256 over the canonical JSON of the resolved configuration."""
        dump = self.model_dump(mode="json")
        if dump.get("browser") is not None and dump["browser"] == self._automatic_browser():
            dump.pop("browser")  # naming the browser the cell would run in anyway
        for key, default in _NEW_FIELDS.items():
            if key in dump and dump.get(key) == default:
                dump.pop(key)
        for key, default in _NEW_CONDITION_FIELDS.items():
            if dump["condition"].get(key) == default:
                dump["condition"].pop(key)
        blob = json.dumps(dump, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def _automatic_browser(self) -> str | None:
        """The browser this cell's arms would share with no ``browser`` set (None: they
        would not share one)."""
        if self.kind != "page":
            return None
        try:
            found = {a.browser for a in resolve(self.arms, self.arm_settings, self.cc)}
        except QuicbedError:
            return None
        return found.pop() if len(found) == 1 else None

    def link_key(self) -> str:
        """What the link and the hosts' tuning depend on: cells with equal keys can share
        one shaped link and its receipt (quicbed.link.proof). The interface offloads
        are the link's too; unset, they leave the key as it always was."""
        key: list[Any] = [self.condition.model_dump(mode="json"), self.shaper, self.tcp_cc()]
        if self.offloads:
            key.append({"offloads": self.offloads})
        return json.dumps(key, sort_keys=True)

    def schedule(self) -> list[tuple[str, int]]:
        """(arm, rep) in execution order; reps 0..warmup-1 are warm-ups.

        ``alternate``: arms take turns and the order is reversed every second round
        (ABBA), so neither arm always goes first; ``random``: a seeded shuffle of the
        arms in each round; ``blocked``: all loads of one arm, then the next.
        Warm-ups of every arm come before any measured load.
        """
        total = self.warmup + self.runs
        if self.order == "blocked":
            out = [(a, r) for a in self.arms for r in range(self.warmup)]
            return out + [(a, r) for a in self.arms for r in range(self.warmup, total)]
        rng = random.Random(self.order_seed)
        out = []
        for r in range(total):
            arms = list(self.arms)
            if self.order == "alternate" and r % 2 == 1:
                arms.reverse()
            elif self.order == "random":
                rng.shuffle(arms)
            out += [(a, r) for a in arms]
        return out


def cell_default(name: str) -> Any:
    """A CellConfig field's default: the one home of runs, warmup, cc, order, ... that
    the CLI's options and a sweep spec's ``defaults`` take theirs from."""
    field = CellConfig.model_fields[name]
    return field.get_default(call_default_factory=True)


def make_cell(**kwargs: object) -> CellConfig:
    """Build a CellConfig; pydantic's report becomes one line naming the bad value."""
    try:
        return CellConfig(**kwargs)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise from_validation(exc, "cell") from None
