"""Sweep specs: a declarative YAML file that expands into cells.

Named scenarios let one file hold the reference study's partial grids (baseline,
loss, latency, reordering), each a product of rates x RTTs x losses x jitters x
queues x pages x modes. Everything is validated before anything runs, and every
error names the key and the value.

The stacks, browsers and shapers (quicbed.servers, quicbed.client, quicbed.shapers)
are imported inside the functions that ask them: the results folder's readers and
``quicbed verify`` load this module and must not load the runner (tests/test_layering.py).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from quicbed.backends import DEFAULT_KIND, KindName
from quicbed.errors import QuicbedError, from_validation
from quicbed.link.hostpolicy import HostPolicy
from quicbed.model import capacity
from quicbed.model.link import (
    MAX_TCP_SECONDS,
    RECEIPT_TCP_SECONDS,
    LinkCondition,
    make_condition,
    parse_queue,
)
from quicbed.replay import archive
from quicbed.servers.webserver import Kind
from quicbed.spec import workloads
from quicbed.spec.arms import ArmSettings, own_pairs, pairs, parse_pairs
from quicbed.spec.bulkobjects import object_path, parse_size
from quicbed.spec.cellconfig import (
    CellConfig,
    Rate,
    cell_default,
    flows_text,
    make_cell,
    parse_flows,
    shaper_field,
)
from quicbed.spec.significance import (
    DEFAULT_ALPHA,
    DEFAULT_METRIC,
    METRICS,
    Correction,
    Test,
    min_valid,
    smallest_p,
)
from quicbed.yamlfile import read_yaml

SPEC_FORMAT = 1

#: arms as a list of names, or a mapping name -> settings (stack, cc, cubic_n, ...)
ArmsField = list[str] | dict[str, ArmSettings | None]


def _arms_field(v: object) -> object:
    """A list of names, or a mapping name -> settings; a bad setting named on one line
    (pydantic's union would blame the list branch)."""
    if v is None:  # a scenario without its own arms (as a stored spec writes it)
        return v
    if isinstance(v, dict):
        out = {}
        for name, settings in v.items():
            if settings is not None and not isinstance(settings, dict):
                raise ValueError(
                    f"arm {name}: settings are a mapping (stack, cc, cubic_n, "
                    f"cubic_beta), got {settings!r}"
                )
            try:
                out[str(name)] = ArmSettings(**(settings or {}))
            except ValidationError as exc:
                raise ValueError(str(from_validation(exc, f"arm {name}"))) from None
        return out
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return v
    raise ValueError(f"arms are a list of names or a mapping name -> settings, got {v!r}")


def split_arms(arms: ArmsField) -> tuple[tuple[str, ...], dict[str, ArmSettings]]:
    if isinstance(arms, list):
        return tuple(arms), {}
    return tuple(arms), {k: v for k, v in arms.items() if v is not None and v != ArmSettings()}


def _link_default(name: str) -> object:
    return LinkCondition.model_fields[name].get_default(call_default_factory=True)


class Defaults(BaseModel):
    """Cell settings shared by every scenario unless a scenario overrides them.

    Their defaults are CellConfig's and LinkCondition's (one home: the CLI's options
    take theirs from the same fields), so a spec and a ``quicbed cell`` agree.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    runs: int = cell_default("runs")
    warmup: int = cell_default("warmup")
    arms: ArmsField = list(cell_default("arms"))
    order: Literal["alternate", "random", "blocked"] = cell_default("order")
    order_seed: int = cell_default("order_seed")
    cc: str = cell_default("cc")
    seed: int = _link_default("seed")  # type: ignore[assignment]
    count: Literal["ethernet", "ip"] = _link_default("count")  # type: ignore[assignment]
    load_timeout_s: float = cell_default("load_timeout_s")
    #: the browser page cells load in (quicbed.client.browsers); unset: the stacks'
    #: choice, else chromium. An arm may name its own (arms: {h3-ff: {browser: firefox}})
    browser: str | None = None

    _arms = field_validator("arms", mode="before")(_arms_field)


class Statistics(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    test: Test = "welch"
    alpha: float = Field(default=DEFAULT_ALPHA, gt=0, lt=1)
    correction: Correction = "none"
    #: comparisons besides every arm against the reference, e.g. ["h3/h3-quiche"]
    pairs: list[str] = []
    #: transfer scenarios: each scenario's goodput per repetition against this one's for
    #: the same arm, link and object, binned as the TCP-options study's speed-ups
    #: (quicbed.report.transfers.speedups); unset: none
    speedup_against: str | None = None
    #: per-load figures the report compares and draws heatmaps of beside PLT, e.g.
    #: [lcp_ms, fcp_ms] (METRICS). The report's alone: left out of the digest, so a
    #: folder's spec may gain one after its runs
    metrics: list[str] = []

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if m not in METRICS]
        if bad:
            names = ", ".join(map(repr, bad))
            raise ValueError(f"{names}: no metric (one of {', '.join(METRICS)})")
        return list(dict.fromkeys(m for m in v if m != DEFAULT_METRIC))  # PLT is always drawn


class Scenario(BaseModel):
    """One partial grid: the product of its lists."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    #: Mbit/s or unlimited (null, or a word of quicbed.spec.cellconfig.UNLIMITED)
    #: required unless the link varies (trace or schedule), which sets the rate
    rate: list[Rate] | None = None
    #: base RTT, split evenly between the directions; or instead one-way delays per
    #: direction (ms, ``delay_down`` server -> client, ``delay_up``), each a grid axis
    #: (an unset one is 0): the TUM study delayed the downlink only
    rtt: list[float] | None = None
    delay_down: list[float] | None = None
    delay_up: list[float] | None = None
    loss: list[float] = [_link_default("loss_pct")]  # type: ignore[list-item]
    #: loss on the downlink (server -> client) in %, instead of ``loss`` (end to end,
    #: split evenly between the directions); the uplink is lossless unless ``loss_up``
    #: gives its own (each a grid axis: an unset one is 0)
    loss_down: list[float] | None = None
    loss_up: list[float] | None = None
    jitter: list[float] = [_link_default("jitter_ms")]  # type: ignore[list-item]
    #: reorder and smooth read ``jitter`` as +/- ms per direction, step (the reference
    #: study's) as the whole range: +/- half of it per direction (docs/link.md)
    jitter_kind: Literal["none", "reorder", "smooth", "step"] = "none"
    #: ms between smooth's knots or step's re-draws; unset: the link model's default
    jitter_interval: float | None = None
    queue: list[str] = [_link_default("queue")]  # type: ignore[list-item]
    #: ECN marking from this queue occupancy on (quicbed.model.link.LinkCondition);
    #: unset: the queue only drops, and the key is left out of the digest
    ecn_threshold: str | None = None
    #: page loads, or transfers (quicbed.run.bulk): ``bulk`` (each arm's flow alone) or
    #: ``compete`` (the ``flows`` at once on one bottleneck)
    kind: Kind = "page"
    pages: list[str] | None = None
    #: bulk and compete: object sizes (10MB, 1GB), seconds each flow runs (bulk: none
    #: fetches the object once), compete's flow mixes ("h3x1,h2x4") and start stagger
    objects: list[str] | None = None
    duration: list[float] | None = None
    #: each mix "h3x1,h2x4" (quoted in YAML: a bare comma inside [...] splits it) or
    #: {h3: 1, h2: 4}
    flows: list[str | dict[str, int]] | None = None
    stagger: float = 0.0
    modes: list[Literal["0rtt", "1rtt"]] = [cell_default("mode")]
    runs: int | None = None
    warmup: int | None = None
    #: this scenario's arms, congestion control and browser instead of the defaults'
    arms: ArmsField | None = None
    cc: str | None = None
    browser: str | None = None
    #: interface offloads, a grid axis: each a mapping ({gso: on, gro: on}) or
    #: "gso=on,gro=on" (quicbed.roles.offloads; on needs the spec's shaper none); unset:
    #: the testbed's, and the key is left out of the digest
    offloads: list[dict[str, Any] | str] | None = None
    #: the TLS key-exchange group of this scenario's cells (quicbed.settings.keyexchange);
    #: unset: the cell's default (x25519), and the key is left out of the digest
    key_exchange: str | None = None
    #: the TLS 1.3 cipher suite of this scenario's cells (quicbed.settings.sockopts: the
    #: arms' ``aead``); unset: each stack's own, and the key is left out of the digest
    aead: str | None = None
    #: background flows beside the loads, a grid axis: each entry one cell's flows in
    #: --background's spelling ("bulk:tcp:bbr", "none", or several comma-separated;
    #: quicbed.spec.background); unset: none, and the key is left out of the digest
    background: list[str] | None = None
    #: the certificate chain every arm's server sends, a grid axis: each entry KEY or
    #: KEY/N (quicbed.settings.certificate); unset: the default chain, and the key is
    #: left out of the digest
    certificate: list[str] | None = None
    #: a replayed page's origins at their own distances, a grid axis: each entry
    #: ``recorded`` (each origin's recorded RTT), an extra RTT in ms for every origin, or
    #: ``none`` (every origin at the link's RTT; quicbed.replay.serve.origin_setting);
    #: unset: none, and the key is left out of the digest
    origin_rtt: list[str | float] | None = None
    #: a replayed page's recorded server times, a grid axis: each entry ``recorded``
    #: (each response after its entry's ``wait_ms``) or ``none``; unset: none, and the
    #: key is left out of the digest
    server_time: list[str] | None = None
    #: every load's frames captured and scored (Speed Index, visually complete:
    #: quicbed.client.visual); a condition of the measurement (the capture costs the
    #: browser CPU), so in the cells' identity; unset: off, left out of the digest
    visual: bool | None = None
    #: a time-varying link, a grid axis instead of ``rate``: traces of the trace store by
    #: name (gen:MODEL:seed=N for a generated one) and schedules in --schedule's
    #: spelling (quicbed.model.capacity); unset: the constant rate, left out of the digest
    trace: list[str] | None = None
    schedule: list[str] | None = None
    #: ms into each trace or schedule where every load starts, a grid axis (unset: 0,
    #: left out of the digest)
    start_at: list[float] | None = None
    #: transport traces of this scenario's loads or flows (quicbed.traces) instead of the
    #: spec's level: an observation, not a condition, so in no cell's identity and not
    #: in the digest (a transfer scenario's way to ask for cwnd timelines of its flows)
    traces: Literal["none", "light", "full"] | None = None

    _arms = field_validator("arms", mode="before")(_arms_field)

    @field_validator(
        "rate",
        "rtt",
        "delay_down",
        "delay_up",
        "loss",
        "loss_down",
        "loss_up",
        "jitter",
        "queue",
        "pages",
        "modes",
        "objects",
        "duration",
        "flows",
        "offloads",
        "background",
        "certificate",
        "origin_rtt",
        "server_time",
        "trace",
        "schedule",
        "start_at",
    )
    @classmethod
    def _not_empty(cls, v: list[Any] | None) -> list[Any] | None:
        if v is not None and not v:
            raise ValueError("is empty: a grid needs at least one value")
        return v

    @model_validator(mode="after")
    def _rate_or_varying(self) -> Scenario:
        varying = [k for k in ("trace", "schedule") if getattr(self, k) is not None]
        if self.rate is None and not varying:
            raise ValueError("rate: a scenario needs its rate (or a trace or schedule)")
        if self.rate is not None and varying:
            raise ValueError(
                f"rate and {varying[0]}: a {varying[0]} sets the rate (leave rate out)"
            )
        return self

    def capacities(self) -> list[dict[str, Any]]:
        """The condition's varying-link keys of each trace and schedule of the grid
        ([{}]: a constant rate)."""
        out: list[dict[str, Any]] = [{"trace": t} for t in self.trace or []]
        out += [{"schedule": x} for x in self.schedule or []]
        if self.start_at is not None:
            out = [{**c, "start_ms": ms} for c in out or [{}] for ms in self.start_at]
        return out or [{}]

    @model_validator(mode="after")
    def _one_delay(self) -> Scenario:
        one_way = self.delay_down is not None or self.delay_up is not None
        if self.rtt is not None and one_way:
            raise ValueError(
                "give rtt (split evenly) or delay_down/delay_up (one way each), not both"
            )
        if self.rtt is None and not one_way:
            raise ValueError("rtt: a scenario needs its RTT (or delay_down/delay_up)")
        return self

    def delays(self) -> list[dict[str, float]]:
        """The condition's delay keys of each delay of the grid."""
        if self.rtt is not None:
            return [{"rtt_ms": x} for x in self.rtt]
        return [
            {"delay_down_ms": d, "delay_up_ms": u}
            for d in self.delay_down or [0.0]
            for u in self.delay_up or [0.0]
        ]

    @model_validator(mode="after")
    def _one_loss(self) -> Scenario:
        per_direction = self.loss_down is not None or self.loss_up is not None
        if per_direction and any(x != 0 for x in self.loss):
            raise ValueError(
                "give loss (end to end, split evenly) or loss_down/loss_up (each direction "
                "its own), not both"
            )
        return self

    @model_validator(mode="after")
    def _kind(self) -> Scenario:
        """Each kind's own keys, and none of another kind's. A key counts as given when
        it differs from its default: a stored spec (sweep.json) writes every key."""
        defaults = {
            k: f.get_default(call_default_factory=True) for k, f in type(self).model_fields.items()
        }
        given = {k for k in self.model_fields_set if getattr(self, k) != defaults[k]}
        if self.kind == "page":
            if self.pages is None:
                raise ValueError("pages: a page scenario needs its pages")
            extra = [k for k in ("objects", "duration", "flows", "stagger") if k in given]
            if extra:
                raise ValueError(f"{', '.join(extra)}: for kind bulk or compete, not page loads")
            return self
        pages_keys = [k for k in ("pages", "modes", "browser") if k in given]
        if pages_keys:
            raise ValueError(f"{', '.join(pages_keys)}: for page loads, not a {self.kind} scenario")
        if self.objects is None:
            raise ValueError(f"objects: a {self.kind} scenario needs its object sizes (10MB)")
        if self.kind == "bulk" and ("flows" in given or "stagger" in given):
            raise ValueError("flows, stagger: for compete, not bulk")
        if self.kind == "compete" and (self.flows is None or self.duration is None):
            raise ValueError("a compete scenario needs flows (e.g. h3x1,h2x1) and duration")
        for mix in self.flows or []:
            flows = _mix(mix)
            if sum(n for _, n in flows) < 2:
                raise ValueError(
                    f"flows: the mix {mix!r} is one flow; a mix is all the flows that share "
                    'the bottleneck, e.g. "h3x1,h2x4" (quote it in YAML: a bare comma '
                    "inside [...] separates list items) or {h3: 1, h2: 4}"
                )
        return self

    def losses(self) -> list[tuple[float, float | None, float | None]]:
        """(loss_pct, loss_down_pct, loss_up_pct) of each loss of the grid."""
        if self.loss_down is None and self.loss_up is None:
            return [(x, None, None) for x in self.loss]
        return [(0.0, d, u) for d in self.loss_down or [0.0] for u in self.loss_up or [0.0]]


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    format: int = SPEC_FORMAT
    name: str
    description: str = ""
    #: a backend's kind (quicbed.backends); ssh: the hosts come from `run --hosts`
    testbed: KindName = DEFAULT_KIND
    #: a shaper's name (quicbed.shapers.names), checked by _shaper
    shaper: str = cell_default("shaper")
    receipt_tcp_seconds: float = Field(default=RECEIPT_TCP_SECONDS, gt=0, le=MAX_TCP_SECONDS)
    #: transport traces per load or flow (quicbed.traces): observe the loads, not a
    #: condition of them, so not in the digest: a folder may be resumed at another level.
    #: Unset: a scenario's own ``traces``, else light for page cells and none for
    #: transfer cells (a long flow's qlog is large and costs the server CPU: asked for)
    traces: Literal["none", "light", "full"] | None = None
    #: CPU profiles over the measured loads and flows (quicbed.profile): like traces, an
    #: observation, not a condition: left out of the digest
    profile: Literal["none", "cpu"] = "none"
    #: how the run copes with a noisy host (quicbed.link.hostpolicy): how the emulator
    #: runs, how long a cell waits for a quiet host, which loads are replaced; not a
    #: condition of the cells, so left out of the digest like traces
    host: HostPolicy = HostPolicy()
    defaults: Defaults = Defaults()
    statistics: Statistics = Statistics()
    scenarios: dict[str, Scenario]

    _shaper = field_validator("shaper")(shaper_field)

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        if self.format != SPEC_FORMAT:
            raise ValueError(f"format {self.format} is not supported (this quicbed reads 1)")
        if not self.scenarios:
            raise ValueError("scenarios is empty")
        st = self.statistics
        ref = st.speedup_against
        if ref is not None and ref not in self.scenarios:
            raise ValueError(
                f"statistics.speedup_against: no scenario {ref!r} (the spec has "
                f"{', '.join(self.scenarios)})"
            )
        if ref is not None and self.scenarios[ref].kind != "bulk":
            raise ValueError(
                f"statistics.speedup_against: scenario {ref!r} is {self.scenarios[ref].kind}, "
                "not bulk (speed-ups are of transfers' goodput)"
            )
        for name, sc in self.scenarios.items():
            runs = self.defaults.runs if sc.runs is None else sc.runs
            # the fewest valid runs a cell may give a number from: can the test reach alpha?
            n = min_valid(runs)
            if runs >= 1 and smallest_p(st.test, n, n) >= st.alpha:
                raise ValueError(
                    f"scenario {name!r}: runs {runs} is too few for {st.test} at alpha "
                    f"{st.alpha:g}: with {n} valid runs per arm its smallest possible p is "
                    f"{smallest_p(st.test, n, n):.3g}, so no cell could ever be significant "
                    "(more runs, or test: welch)"
                )
        return self

    def digest(self) -> str:
        """Hash of the resolved spec: a results folder belongs to exactly one. Keys added
        since format 1 are left out while unset, so older folders keep their digest."""
        body = self.model_dump(mode="json", exclude={"traces", "profile", "host"})
        if not body["statistics"]["pairs"]:
            body["statistics"].pop("pairs")
        if body["statistics"]["speedup_against"] is None:
            body["statistics"].pop("speedup_against")
        body["statistics"].pop("metrics")  # the report's (see Statistics.metrics)
        if body["defaults"]["browser"] is None:
            body["defaults"].pop("browser")
        for sc in body["scenarios"].values():
            sc.pop("traces")  # an observation (see traces above)
            for key in (
                "rtt",
                "delay_down",
                "delay_up",
                "arms",
                "cc",
                "loss_down",
                "loss_up",
                "objects",
                "duration",
                "flows",
                "jitter_interval",
                "ecn_threshold",
                "browser",
                "offloads",
                "key_exchange",
                "aead",
                "background",
                "certificate",
                "origin_rtt",
                "server_time",
                "trace",
                "schedule",
                "start_at",
                "visual",
            ):
                if sc[key] is None:
                    sc.pop(key)
            if sc["kind"] == "page":
                sc.pop("kind")
            if sc["stagger"] == 0:
                sc.pop("stagger")
        blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cell_traces(spec: SweepSpec, scenario: str) -> str | None:
    """The trace level of a scenario's cells: the spec's (``--traces`` sets it), else the
    scenario's own, else None (run_cell's default for the cell's kind)."""
    sc = spec.scenarios.get(scenario)
    return spec.traces or (sc.traces if sc is not None else None)


class PlannedCell(BaseModel):
    scenario: str
    config: CellConfig
    #: the trace level its loads run at (:func:`cell_traces`; None: the kind's default),
    #: which the time estimate counts (level full reads every load's capture)
    traces: str | None = None


def _store_trace_files(data: dict[str, Any], base: Path) -> None:
    """A scenario's trace given as a Mahimahi file (relative to the spec's folder) is put
    into the trace store and named there (quicbed.model.capacity.from_file), so the
    spec a sweep keeps, and resumes from, names traces the store holds."""
    for name, sc in (data.get("scenarios") or {}).items():
        traces = sc.get("trace") if isinstance(sc, dict) else None
        if isinstance(traces, list):
            try:
                sc["trace"] = [
                    capacity.from_file(t, base) if isinstance(t, str) else t for t in traces
                ]
            except QuicbedError as exc:
                raise QuicbedError(f"scenarios.{name}.trace: {exc}") from None


def load_spec(path: Path) -> SweepSpec:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise QuicbedError(f"{path}: a sweep spec is a mapping (name, scenarios, ...)")
    _store_trace_files(data, Path(path).parent)
    try:
        spec = SweepSpec(**data)
    except ValidationError as exc:
        raise from_validation(exc, str(path)) from None
    plan(spec, source=str(path))  # every cell must be valid too
    return spec


def plan(spec: SweepSpec, source: str = "spec") -> list[PlannedCell]:
    """Expand every scenario into cells, in a stable order; errors name the scenario."""

    pageset = workloads.load()
    cells: list[PlannedCell] = []
    seen: set[str] = set()
    d = spec.defaults
    try:
        extra = parse_pairs(spec.statistics.pairs)
    except QuicbedError as exc:
        raise QuicbedError(f"{source}: statistics.pairs: {exc}") from None
    used: set[tuple[str, str]] = set()
    for name, sc in spec.scenarios.items():
        where = f"{source}: scenarios.{name}"
        for page in sc.pages or []:
            try:
                workloads.check_page(page, pageset)
            except QuicbedError as exc:
                raise QuicbedError(f"{where}.pages: {exc}") from None
        chains: list[str | None] = [*sc.certificate] if sc.certificate else [None]
        # what the servers serve beyond the page: the handshake's certificate, the
        # origins' distances and the server times, one axis of triples
        origins: list[str | float | None] = [*sc.origin_rtt] if sc.origin_rtt else [None]
        times: list[str | None] = [*sc.server_time] if sc.server_time else [None]
        serving = list(itertools.product(chains, origins, times))
        grid = itertools.product(
            sc.rate or [None],
            sc.capacities(),
            sc.delays(),
            sc.losses(),
            sc.jitter,
            sc.queue,
            _workloads(sc),
            sc.offloads or [{}],
            sc.background or ["none"],
            serving,
        )
        for rate, cap, delay, (loss, down, up), jitter, queue, work, offl, bg, served in grid:
            chain, orig, stime = served
            try:
                cond = make_condition(
                    rate_mbit=rate,
                    **cap,
                    **delay,
                    loss_pct=loss,
                    loss_down_pct=down,
                    loss_up_pct=up,
                    jitter_ms=jitter,
                    jitter_kind=sc.jitter_kind if jitter else "none",
                    **(
                        {"jitter_interval_ms": sc.jitter_interval}
                        if jitter and sc.jitter_interval is not None
                        else {}
                    ),
                    queue=queue,
                    ecn_threshold=sc.ecn_threshold,
                    seed=d.seed,
                    count=d.count,
                )
                names, settings = split_arms(d.arms if sc.arms is None else sc.arms)
                if sc.kind == "compete":  # the flows name the arms, in start order
                    names = tuple(a for a, _ in work["transfer"]["flows"])
                    settings = {k: v for k, v in settings.items() if k in names}
                # `is None`, never `or`: a scenario's 0 or "" is its own (and refused
                # by CellConfig by name), not a silent fall-back to the defaults
                warmup = d.warmup if sc.kind == "page" else 0
                cfg = make_cell(
                    condition=cond,
                    runs=d.runs if sc.runs is None else sc.runs,
                    warmup=warmup if sc.warmup is None else sc.warmup,
                    arms=names,
                    arm_settings=settings,
                    order=d.order,
                    order_seed=d.order_seed,
                    cc=d.cc if sc.cc is None else sc.cc,
                    # a transfer scenario loads no page (its own browser is refused)
                    browser=(d.browser if sc.browser is None else sc.browser)
                    if sc.kind == "page"
                    else None,
                    shaper=spec.shaper,
                    offloads=offl,
                    load_timeout_s=d.load_timeout_s,
                    **({"key_exchange": sc.key_exchange} if sc.key_exchange else {}),
                    **({"aead": sc.aead} if sc.aead else {}),
                    **({"background": bg} if bg != "none" else {}),
                    **({"certificate": chain} if chain is not None else {}),
                    origin_rtt=orig,  # none spelled "none" too (quicbed.replay.serve)
                    server_time=stime,
                    **({"visual": True} if sc.visual else {}),
                    **work,
                )
                spec.host.replaced_per_arm(cfg.runs)  # host.max_replaced within the runs
                mine = own_pairs(extra, cfg.arms)
                pairs(cfg.resolved_arms(), mine)
                used.update(mine)
            except QuicbedError as exc:
                raise QuicbedError(f"{where}: {exc}") from None
            if cfg.cell_id() in seen:
                continue  # scenarios may overlap; a cell is measured once
            seen.add(cfg.cell_id())
            cells.append(PlannedCell(scenario=name, config=cfg, traces=cell_traces(spec, name)))
    for a, b in extra:
        if (a, b) not in used:  # a pair is compared in the cells that have both arms
            raise QuicbedError(
                f"{source}: statistics.pairs: pair {a}/{b}: no cell has both "
                f"arms (each pair is compared where a cell has both)"
            )
    return cells


def _mix(mix: str | dict[str, int]) -> tuple[tuple[str, int], ...]:
    """A compete scenario's flow mix, written "h3x1,h2x4" or {h3: 1, h2: 4}."""

    return parse_flows(flows_text(tuple(mix.items())) if isinstance(mix, dict) else mix)


def _workloads(sc: Scenario) -> list[dict[str, Any]]:
    """The cell settings of a scenario's workloads: each mode x page, or each object x
    duration (x flow mix) of a transfer scenario."""

    if sc.kind == "page":
        return [{"mode": m, "page": p} for m in sc.modes for p in sc.pages or []]
    out = []
    durations: list[float | None] = [*sc.duration] if sc.duration else [None]
    mixes: list[str | dict[str, int] | None] = [*sc.flows] if sc.flows else [None]
    for size, dur, flows in itertools.product(sc.objects or [], durations, mixes):
        t: dict[str, Any] = {"size": size, "duration_s": dur}
        if flows is not None:
            t.update(flows=_mix(flows), stagger_s=sc.stagger)
        out.append({"kind": sc.kind, "page": object_path(size), "transfer": t})
    return out


#: a queue that holds fewer packets of PACKET_BYTES than this is flagged (issue 14, the
#: beta study's seed): its results say more about the small buffer than about the
#: transport, and below MIN_QUEUE_FRAMES frames the link holds more than was asked for
SMALL_QUEUE_PACKETS = 10
PACKET_BYTES = 1500


def stored_queue_warning(cond: dict[str, Any]) -> str:
    """``queue_warning`` of a stored condition (a cell's config), or "" (also for a
    condition this quicbed no longer reads: nothing to say about it)."""
    try:
        return queue_warning(make_condition(**cond)) or ""
    except QuicbedError:
        return ""


def queue_warning(cond: LinkCondition) -> str | None:
    """Why ``cond``'s queue is small, or None.

    Flagged: a queue (2 x BDP by default, or the spec's) of fewer than
    SMALL_QUEUE_PACKETS packets of 1500 B; and a BDP under that many packets, where the
    default 2 x BDP queue is a few dozen packets at most, so a sender's whole window is
    a handful of packets and one loss or one backoff step is a large share of it
    (the seed's example: 10 Mbit/s x 10 ms is a BDP of 8.3 packets).
    """
    if cond.rate_mbit is None:
        return None
    kind, value = parse_queue(cond.queue)
    bdp = cond.bdp_bytes() or 0
    asked = {"bytes": value, "packets": value * PACKET_BYTES, "bdp": value * bdp}[kind]
    small = SMALL_QUEUE_PACKETS * PACKET_BYTES
    what = f"{cond.rate_mbit:g} Mbit/s x {cond.rtt():g} ms"
    if asked < small:
        held, packets = cond.queue_limit()
        holds = f"{packets} packets" if held is None else f"{held} B"
        return (
            f"{what}: queue {cond.queue} is {asked / PACKET_BYTES:.1f} packets of "
            f"{PACKET_BYTES} B (BDP {bdp} B), below ~{SMALL_QUEUE_PACKETS}; the link "
            f"holds {holds}"
        )
    if bdp < small:
        return (
            f"{what}: the BDP is {bdp / PACKET_BYTES:.1f} packets of {PACKET_BYTES} B, "
            f"below ~{SMALL_QUEUE_PACKETS} (queue {cond.queue}: "
            f"{asked / PACKET_BYTES:.1f} packets): a window of a few packets"
        )
    return None


def plan_warnings(cells: list[PlannedCell]) -> list[str]:
    """One line per small queue of ``cells`` (rate, RTT and queue), naming its scenarios
    and how many link conditions (losses, jitters) have it, in plan order."""
    found: dict[str, tuple[list[str], set[str]]] = {}
    for pc in cells:
        cond = pc.config.condition
        w = queue_warning(cond)
        if w is None:
            continue
        scenarios, conds = found.setdefault(w, ([], set()))
        if pc.scenario not in scenarios:
            scenarios.append(pc.scenario)
        conds.add(json.dumps(cond.model_dump(mode="json"), sort_keys=True))
    return [
        f"small queue ({', '.join(sc)}; {len(conds)} link condition"
        f"{'s' if len(conds) > 1 else ''}): {w}"
        for w, (sc, conds) in found.items()
    ]


#: an opening or closing spot check of the link (quicbed.link.proof), with margin
SPOT_CHECK_S = 3.0


def estimate_seconds(cells: list[PlannedCell], receipt_s: float) -> float:
    """A deliberately pessimistic wall-time estimate: a receipt per link condition (cells
    of one condition share it), a spot and a closing check per cell, loads at 1.5x
    their bound on a clean link, 1.8x on an otherwise clean varying one and 3x on any
    other (:func:`_slack`), or on a lossy downlink at the loss bound
    (``loss_bound_mbit``), which sets the time there: the beta study's 3.3 MB page at
    200 ms and 2 % loss took 25 s a load here, not the 4 s that the rate and RTT alone
    predict. Checked against finished runs:
    quicbed.run.duration, tests/test_estimate.py."""

    pageset = workloads.load()
    total = receipt_s * len({pc.config.link_key() for pc in cells})
    for pc in cells:
        c = pc.config
        mean = c.condition.mean_rate_mbit()  # a varying link's: its mean
        rate = 1000.0 if mean is None else mean
        if c.transfer is not None:
            total += 2 * SPOT_CHECK_S + _transfer_seconds(c, rate)
            continue
        rtt_ms, held_ms = c.condition.rtt(), 0.0
        if c.replay is not None:
            # a replayed page: its bytes, and round trips per level of its dependency tree
            # (a guess: 8), each to the farthest origin and held as long as the longest
            # recorded server time where the cell serves them
            found = archive.find(c.page)
            page = archive.load(found, check_bodies=False) if found else None
            nbytes = page.total_bytes() if page else 0
            rtts = 8
            rtt_ms += max(c.condition.origin_rtts().values(), default=0.0)
            if c.server_time is not None and page is not None:
                held_ms = max((e.wait_ms or 0.0 for e in page.entries()), default=0.0)
        else:
            nbytes = pageset.pages[c.page].total_image_bytes(pageset.kb)
            rtts = 4
        load = rtts * (rtt_ms + held_ms) / 1000 + nbytes * 8 / (rate * 1e6) * 1.1
        bound = min(loss_bound_mbit(c.condition), jitter_bound_mbit(c.condition))
        lossy = nbytes * 8 / (bound * 1e6)
        load = min(max(_slack(c) * load, lossy), c.load_timeout_s)
        each = load + 0.5 + (FULL_TRACE_S if pc.traces == "full" else 0.0)
        each += VISUAL_S if c.visual else 0.0
        total += 2 * SPOT_CHECK_S + len(c.arms) * (c.runs + c.warmup) * each
    return total


#: what level-full traces add to a load: its capture and key log kept, then read with
#: tshark for its handshakes and its wire timeline (quicbed.traces.handshake, .wire).
#: benchmarks/durations/handshake-chains: 504 loads of 5 KB took about 0.9 s each beyond
#: their page load time, 0.4 s more than the 0.5 s every load is given; 0.6 s here, with
#: margin
FULL_TRACE_S = 0.6


#: what a visual cell's frame capture adds to a load: the capture stopped, a final
#: screenshot, the frames scored and kept. benchmarks/visual_progress.py (docs/benchmarks/
#: visual.md): 0.12-0.27 s a load in Chromium, 0.27-0.63 s in Firefox (its profiler's
#: data gathered from every process); with margin
VISUAL_S = 0.8


#: a load's time over its bound on a clean link (no loss, jitter, varying rate or
#: background flows: 1.3x measured for sweeps/demo.yaml's pages here) and with loss,
#: jitter or background flows (2.3x measured under the step jitter:
#: benchmarks/durations/), with margin
CLEAN_SLACK, DIRTY_SLACK = 1.5, 3.0
#: on a trace or schedule with no loss, jitter or background flow, against the bound at
#: the link's mean rate: the variable-links preset's loads took 1.21x it in sum (0.8x on
#: a Wi-Fi trace's 10 MB page, 3.2x on 100 KB meeting an outage); 1.8 puts every
#: one of its sixteen shards' estimates at 1.06-1.92x the shard's run, where 3.0 made
#: them 1.64-3.14x and 1.6 made one short (benchmarks/durations/variable-links-shard-*)
VARYING_SLACK = 1.8


def _slack(c: CellConfig) -> float:
    cond = c.condition
    if cond.loss_down() or cond.loss_up() or cond.jitter_ms or c.background:
        return DIRTY_SLACK
    return VARYING_SLACK if cond.trace or cond.schedule else CLEAN_SLACK


#: the window a CUBIC sender held under the study's step jitter: quic-go left slow start
#: at 108-110 kB without a loss (the jitter's RTT steps end it) and held 75-135 kB
#: over a 10 MB load, about 96 KiB on average (docs/benchmarks/envoy-mechanism.md)
JITTER_WINDOW_BYTES = 96 * 1024


def jitter_bound_mbit(cond: LinkCondition) -> float:
    """Under jitter a QUIC CUBIC sender leaves slow start early and its window grows
    slowly: its rate is about :data:`JITTER_WINDOW_BYTES` per RTT (7 Mbit/s at
    112 ms, where a 50 Mbit/s link's 10 MB loads took 9-18 s), capped at the link's."""
    mean = cond.mean_rate_mbit()
    rate = 1000.0 if mean is None else mean
    if not cond.jitter_ms:
        return rate
    return min(rate, JITTER_WINDOW_BYTES * 8 / (max(cond.rtt(), 1.0) / 1000) / 1e6)


def loss_bound_mbit(cond: LinkCondition) -> float:
    """Mathis et al.'s steady rate for random loss on the downlink, 1.22 MSS / (RTT
    sqrt(p)), capped at the link's rate: the pace of a download on a lossy long path.
    A lower bound in practice: CUBIC (N = 2 the more) beat it by 2-3x at 200 ms here
    (sweeps/beta.yaml's delay group), so an estimate built on it errs long."""
    mean = cond.mean_rate_mbit()
    rate = 1000.0 if mean is None else mean
    p, rtt_s = cond.loss_down(), max(cond.rtt(), 1.0) / 1000
    if p <= 0:
        return rate
    return min(rate, 1.22 * 1448 * 8 / (rtt_s * math.sqrt(p)) / 1e6)


def _transfer_seconds(c: CellConfig, rate_mbit: float) -> float:
    """A transfer cell's runs: each flow's duration, or its object at the link's rate
    (at most 1 Gbit/s) with a margin, plus the clients' start and linger."""

    t = c.transfer
    assert t is not None
    pace = min(rate_mbit, loss_bound_mbit(c.condition))
    each = t.duration_s or parse_size(t.size) * 8 / (pace * 1e6) * 1.5
    if c.kind == "compete":
        return c.runs * (each + t.stagger_s * sum(n for _, n in t.flows) + 5)
    return len(c.arms) * c.runs * (each + 3)
