"""Run one cell: shape the link, prove it, load the page per arm, verify and store every load.

The order of work is the method of the reference study with its pitfalls removed:
- the link is checked first (a fidelity receipt); a link out of tolerance is never
  measured on: the attempt is recorded as failed with its receipt;
- both servers serve the same generated tree with the same certificate;
- the arms are interleaved (ABBA by default) so drift hits both;
- warm-up loads are stored, flagged, and never enter the statistics;
- every load is verified (status, protocol per entry, objects, bytes, and for QUIC
  0-RTT mode the server's own log) and an invalid load is stored with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quicbed import timelog
from quicbed.analysis.cells import compare_cell
from quicbed.analysis.stats import Comparison
from quicbed.analysis.transfers import stored_transfer
from quicbed.client import get_browser, har, visual
from quicbed.client.browser import DEFAULT as DEFAULT_BROWSER
from quicbed.client.browser import BrowserSpec
from quicbed.errors import QuicbedError
from quicbed.link import hostcpu, kept, varying
from quicbed.link.hostpolicy import HostPolicy
from quicbed.link.loadproof import LoadWatch, Verdict
from quicbed.link.proof import LinkFailure, ProvenLink, SpotCheck, opening_check, prove, spot_check
from quicbed.link.quiet import HostWait, Settled
from quicbed.link.receipt import Receipt
from quicbed.link.session import shaped_link
from quicbed.model.link import RECEIPT_TCP_SECONDS
from quicbed.paths import setup_command
from quicbed.profile import check_profile
from quicbed.profile.session import CpuProfile, unavailable
from quicbed.replay import serve as replay_serve
from quicbed.replay import verify as replay_verify
from quicbed.results import provenance
from quicbed.results.cpuuse import CpuUse
from quicbed.results.folder import FailureReason
from quicbed.results.handshakes import load_groups
from quicbed.results.linkload import background_share, is_replacement, load_proof, spoiled_only
from quicbed.results.netcounters import RoleCounters
from quicbed.results.rows import RunRow
from quicbed.results.store import Store, now
from quicbed.results.transfers import BulkResult
from quicbed.run import background
from quicbed.run.bulk import FlowJudge, run_transfer
from quicbed.run.chainstage import StagedChain, stage_chain
from quicbed.run.loadcpu import CpuMeter, joining, own_cpu_ms
from quicbed.run.netcounters import NetMeter
from quicbed.servers import get_stack
from quicbed.servers.webserver import Arm, ServeSpec, WebServer, reused_off_requests
from quicbed.settings import certificate
from quicbed.shapers import get_shaper
from quicbed.spec import workloads
from quicbed.spec.cellconfig import CellConfig
from quicbed.testbed.lifecycle import RPath, Testbed
from quicbed.testbed.local import LocalTestbed
from quicbed.testbed.owner import shielded
from quicbed.traces import TraceContext, TraceSet, check_level, handshake, instruments, wire
from quicbed.traces.capture import complete_netlog
from quicbed.traces.facts import derive
from quicbed.traces.tcp import TRANSFER_BUFFER_KB
from quicbed.traces.tracer import LoadTrace, write_gz, write_samples

if TYPE_CHECKING:
    from quicbed.client.browser import Browser
    from quicbed.profile.session import CpuProfile

#: (what, done, total): a load done of the cell's total; with total 0 a sentence to show
#: in place of the load's name (a wait for a quiet host)
Progress = Callable[[str, int, int], None]
#: how often an attempt takes a spot check again after waiting for a quiet host
SPOT_RETRIES = 3


@dataclass
class CellResult:
    cell_id: str
    attempt: int
    status: str  # done | failed
    problem: str
    receipt: Receipt | None
    #: by pair ``reference/candidate`` (compare_cell); empty unless the cell is done
    comparisons: dict[str, Comparison]
    invalid: dict[str, list[str]]
    out: Path
    verified: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: why the attempt failed (None: it did not); the runner decides on this, never on
    #: the text of ``problem``
    reason: FailureReason | None = None
    #: each arm's browser build, as its driver named it (page cells)
    browsers: dict[str, str] = field(default_factory=dict)
    #: seconds the attempt waited for a quiet host (quicbed.link.quiet)
    waited_s: float = 0.0
    #: by arm, the loads the link or the host spoiled and nothing else (kept, invalid,
    #: replaced: quicbed.link.loadproof); ``invalid`` has the loads that failed their
    #: own checks (protocol, bytes, 0-RTT, ...)
    spoiled: dict[str, list[str]] = field(default_factory=dict)

    @property
    def link_failed(self) -> bool:
        """The failure was the link's (out of tolerance, or changed): worth one retry."""
        return self.reason is not None and self.reason.link

    def as_dict(self) -> dict[str, Any]:
        return {
            "cell_id": self.cell_id,
            "attempt": self.attempt,
            "status": self.status,
            "problem": self.problem,
            "out": str(self.out),
            "receipt_passed": None if self.receipt is None else self.receipt.passed,
            "comparisons": {k: c.model_dump() for k, c in self.comparisons.items()},
            "invalid": self.invalid,
            "verified": self.verified,
            "link_failed": self.link_failed,
            "reason": self.reason.value if self.reason else None,
            "browsers": self.browsers,
            "waited_s": round(self.waited_s, 1),
            "spoiled": self.spoiled,
        }


def servers_for(cfg: CellConfig, tb: Testbed, spec: ServeSpec) -> dict[str, WebServer]:
    """One server per arm, of the arm's stack (quicbed.servers)."""

    servers = {a.name: get_stack(a.stack)(tb, spec, a) for a in cfg.resolved_arms()}
    for srv in servers.values():
        srv.condition = cfg.condition  # what a load's server-side facts are judged against
    return servers


def _judge(
    cfg: CellConfig,
    srv: WebServer,
    warmup: bool,
    result: dict[str, Any],
    m: dict[str, Any],
    facts: dict[str, Any],
    page: dict[str, Any],
) -> list[str]:
    """Every reason this load must not enter the statistics."""
    arm = srv.arm
    if not result.get("ok"):
        reasons = [f"load failed: {result.get('error')}"]
    elif page.get("archive") is not None:  # a replayed page: per request, by the archive
        reasons = replay_verify.reasons(m["entries"], page["archive"], srv.page_protocol())
        reasons += replay_verify.served_reasons(
            facts.get("replay_served"), page["archive"], cfg.server_time is not None
        )
    else:
        reasons = har.verify(
            m,
            arm=srv.page_protocol(),
            host=cfg.host,
            expected_objects=page["objects"],
            expected_bytes=page["bytes"],
        )
    if not srv.running():
        reasons.append(f"the {arm.name} server ({srv.name}) was not running")
    if facts.get("connections", 0) == 0:
        reasons.append("the server logged no connection for this load")
        return reasons
    reuse = "0-RTT" if arm.transport == "udp" else "TLS resumption"
    if (
        cfg.mode == "0rtt"
        and not warmup
        and page.get("archive") is not None
        and "cold_origins" in facts
    ):
        # a replayed page: every origin reused on at least one of its connections
        # (quicbed.servers.webserver.cold_origins says why not every connection)
        if facts["cold_origins"]:
            reasons.append(
                f"the {srv.name} log shows no {reuse} to {', '.join(facts['cold_origins'])} "
                "on this load"
            )
    elif cfg.mode == "0rtt" and not warmup:
        if arm.transport == "udp" and not facts.get("used_0rtt"):
            reasons.append("the QUIC server's log shows no 0-RTT on this load")
        if arm.transport == "tcp" and not facts.get("tls_resumed"):
            reasons.append(f"the {srv.name} log shows no TLS resumption on this load")
    elif cfg.mode == "1rtt" and arm.transport == "udp" and facts.get("used_0rtt"):
        reasons.append("0-RTT was used in 1-RTT mode (state leaked between contexts)")
    return reasons + srv.evidence(facts)


def validate(cfg: CellConfig, testbed: Testbed | None = None) -> Any:
    """Everything that can be checked before touching the machine; returns the page set.

    With ``testbed``, also whether the cell's shaper can run there (as ``link check``
    asks before it shapes), and whether its endpoints can account CPU per role
    (quicbed.roles.cpuaccounting): a testbed that cannot is refused before a store or an
    attempt exists, instead of becoming a failed attempt.
    """

    pageset = workloads.load()
    if cfg.kind == "page" and cfg.replay is not None:
        replay_serve.checked(cfg.page, cfg.replay)
    elif cfg.kind == "page":  # a transfer cell's object was checked with its config
        workloads.check_page(cfg.page, pageset)
    arms = cfg.resolved_arms()  # each arm's stack, CC, parameters and browser
    if testbed is not None:
        get_shaper(cfg.shaper, testbed, cfg.condition).check(cfg.condition)
        testbed.cpu.check()  # CPU per role needs its hosts' control groups
        for a in arms:
            get_stack(a.stack).check_testbed(a, testbed)
        check_components([cfg], testbed)
        kept.check_cells(testbed, [cfg])  # the link the testbed keeps, if any, fits
    return pageset


def check_components(cells: Iterable[CellConfig], tb: Testbed) -> None:
    """Refuse, before anything starts, cells whose servers or browsers ``tb`` lacks,
    naming the one command that installs each: a cell before its testbed is shaped, a
    sweep before its first cell."""
    cells = list(cells)
    check_installed(cells, tb)
    check_browsers(cells, tb)


def check_installed(cells: Iterable[CellConfig], tb: Testbed) -> None:
    """Refuse, before anything starts, cells whose stacks' servers the testbed's server
    lacks (their software probe finds nothing), naming the one command that installs
    each: a cell before its testbed is shaped, a sweep before its first cell."""
    for name in dict.fromkeys(a.stack for cfg in cells for a in cfg.resolved_arms()):
        cls = get_stack(name)
        if not provenance.stack_installed(tb, cls):
            raise QuicbedError(
                f"stack {name}: its server ({cls.program or cls.software_name}) is not "
                f"installed on {tb.name('server')}; install it: {setup_command(cls.component)}"
            )


def check_browsers(cells: Iterable[CellConfig], tb: Testbed) -> None:
    """Refuse, before anything starts, page cells whose browsers the testbed's client
    lacks (their software probe, as provenance records them, finds nothing): a cell
    before its testbed is shaped, a sweep before its first cell."""

    run = provenance.ask(tb, "client")
    for name in dict.fromkeys(b for cfg in cells for b in cfg.browsers()):
        get_browser(name).check_testbed(run, tb.name("client"))


def run_cell(
    cfg: CellConfig,
    out: Path,
    *,
    prefix: str = "qb",
    testbed: Testbed | None = None,
    receipt_tcp_seconds: float = RECEIPT_TCP_SECONDS,
    progress: Progress | None = None,
    fault: Callable[[str, int, dict[str, WebServer]], None] | None = None,
    resume_attempt: int | None = None,
    link: ProvenLink | None = None,
    traces: str | None = None,
    profile: str = "none",
    host: HostPolicy | None = None,
    wait: HostWait | None = None,
) -> CellResult:
    """Measure one cell into the results folder ``out`` as a new attempt.

    On ``testbed`` (default: the local testbed ``prefix``), which this process owns
    for the duration. ``link``: a link already shaped for this cell's condition with
    its receipt, shared with earlier cells (a sweep); the cell then opens with a spot
    check instead of a full receipt. Without it the cell shapes and measures its own.
    ``resume_attempt`` continues an interrupted attempt instead: the loads already
    stored are kept and skipped. ``fault`` is called before each load (arm, rep,
    servers): tests use it to break something on purpose. ``traces``: the capture
    level (none, light, full; quicbed.traces; None: light for page cells, none for
    transfer cells, whose flows are traced when asked), recorded in the attempt's provenance;
    ``profile``: none, or cpu (perf on each arm's server and client over the measured
    loads or flows: quicbed.profile), recorded there too. ``host``: how the cell copes with a noisy
    host (quicbed.link.hostpolicy: the emulator's scheduling, the wait for a quiet host,
    the lateness a load may see, how many spoiled loads an arm replaces); ``wait``: the
    cell's budget of waiting, where a sweep's receipt already drew on it (default: a
    fresh one of ``host``'s limit).
    """
    traces = check_level(traces or ("light" if cfg.kind == "page" else "none"))
    check_profile(profile)
    host = host or HostPolicy()
    max_replaced = host.replaced_per_arm(cfg.runs)  # a bound over the runs: refused now
    out = out.resolve()  # servers get paths from it and run with other working dirs
    tb = testbed or LocalTestbed(prefix)
    pageset = validate(cfg, tb)
    if profile == "cpu":
        why_not = unavailable(tb)
        if why_not:
            raise QuicbedError(f"--profile cpu: {why_not}")
    with tb.claim("quicbed cell"):
        store = Store(out, create=True)
        cell_id, attempt = _open_attempt(store, cfg, tb, resume_attempt)
        job = _Job(cfg, tb, store, cell_id, attempt, pageset, progress, fault, traces, profile)
        job.wait = wait or HostWait(host.quiet_wait_minutes * 60, saying(progress))
        job.late_tolerance_ms = host.late_tolerance_ms
        job.max_replaced = max_replaced
        outcome = job.measure(link, host, receipt_tcp_seconds)
        job.tally(outcome)
    return outcome.result(job, out)


def _open_attempt(
    store: Store, cfg: CellConfig, tb: Testbed, resume_attempt: int | None
) -> tuple[str, int]:
    """The cell recorded in the store and the attempt this run writes: a new one with the
    testbed's provenance, or ``resume_attempt`` reopened so its stored loads are kept."""
    cell_id = cfg.cell_id()
    store.add_cell(cell_id, cfg.model_dump(mode="json"))
    if resume_attempt is None:
        return cell_id, store.new_attempt(cell_id, provenance.collect(tb))
    store.reopen_attempt(cell_id, resume_attempt)
    return cell_id, resume_attempt


def saying(progress: Progress | None) -> Callable[[str], None] | None:
    """A progress callback's way to say a sentence (a wait for a quiet host): total 0."""
    if progress is None:
        return None
    return lambda text: progress(text, 0, 0)


def transfer_spoiled(store: Store, cell_id: str, attempt: int) -> dict[str, list[str]]:
    """A transfer attempt's flows (bulk: by arm) or repetitions (compete: under all its
    arms, comma-joined) that the link or the host spoiled and nothing else."""

    if store.transfer(cell_id, attempt) is None:
        return {}
    result = stored_transfer(store, cell_id, attempt)
    out: dict[str, list[str]] = {}
    if isinstance(result, BulkResult):
        for x in result.runs:
            if spoiled_only(x.link):
                out.setdefault(x.arm, []).append(f"#{x.rep}: {'; '.join(x.link['reasons'])}")
        return out
    key = ",".join(a for a, _ in result.groups)
    for run in result.runs:
        if spoiled_only(run.link):
            out.setdefault(key, []).append(f"#{run.rep}: {'; '.join(run.link['reasons'])}")
    return out


def arms_without_valid_runs(
    store: Store, cell_id: str, attempt: int, cfg: CellConfig
) -> dict[str, list[str]]:
    """The cell's arms that no valid measured run of this attempt speaks for, each with
    its runs' distinct reasons: such an attempt has measured nothing it can compare, so
    it is failed, never done, and says why where it is read (a CI log, a terminal)."""
    if cfg.kind == "page":
        rows = [r for r in store.runs(cell_id, attempt) if not r.warmup]
        tried = [(r.arm, r.valid, r.reason) for r in rows]
    else:
        result = stored_transfer(store, cell_id, attempt)
        flows = (
            [r.flow for r in result.runs]
            if isinstance(result, BulkResult)
            else [f for r in result.runs if not r.spoiled for f in r.flows]
        )
        tried = [(f.arm, f.ok, f.error or "") for f in flows]
    ok = {arm for arm, valid, _ in tried if valid}
    return {
        a: list(dict.fromkeys(why or "no reason stored" for arm, _, why in tried if arm == a))
        for a in cfg.arms
        if a not in ok
    }


def spoiled_throughout(store: Store, cell_id: str, attempt: int, cfg: CellConfig) -> set[str]:
    """The cell's arms whose every measured run of this attempt (replacements too) the
    link or the host spoiled and nothing else (quicbed.link.loadproof): an arm left
    without a valid run that way has measured the host, not its protocol. A compete
    repetition spoils every arm it holds."""
    if cfg.kind == "page":
        rows = [r for r in store.runs(cell_id, attempt) if not r.warmup]
        proofs = [(r.arm, load_proof(r.detail)) for r in rows]
    elif store.transfer(cell_id, attempt) is None:
        return set()
    else:
        result = stored_transfer(store, cell_id, attempt)
        proofs = (
            [(x.arm, x.link) for x in result.runs]
            if isinstance(result, BulkResult)
            else [(a, run.link) for run in result.runs for a in cfg.arms]
        )
    return {
        a
        for a in cfg.arms
        if (mine := [p for arm, p in proofs if arm == a]) and all(map(spoiled_only, mine))
    }


@dataclass
class _PageRig:
    """What one page cell's loads share: servers, browsers, instruments, counters."""

    tracing: TraceSet | None
    profiler: CpuProfile | None
    servers: dict[str, WebServer] = field(default_factory=dict)
    browsers: dict[str, Browser] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    page: dict[str, Any] = field(default_factory=dict)
    loads: list[tuple[str, LoadTrace]] = field(default_factory=list)  # (run_id, its trace)
    recordings: list[Any] = field(default_factory=list)
    meter: CpuMeter | None = None
    net: NetMeter | None = None
    total: int = 0  # loads planned, for progress
    #: what is held on the testbed while the loads run (a replayed page's addresses)
    held: ExitStack = field(default_factory=ExitStack)
    #: the cell's background flows, running through every load (None: none)
    background: background.Background | None = None
    #: the chain every arm's server sends (quicbed.settings.certificate.chain_fact)
    chain: dict[str, Any] = field(default_factory=dict)


@dataclass
class _PageLoad:
    """One page load on its way from the browser to its stored row: what the browser
    returned and the instruments read around it, then the verdict on it, carried
    together instead of a dozen values through every step."""

    arm: str
    rep: int
    warm: bool  # a warm-up: stored, flagged, never in the statistics
    result: dict[str, Any]  # the browser's (its HAR, navigation timing, error)
    metrics: dict[str, Any]  # the HAR's figures (har.metrics)
    facts: dict[str, Any]  # what the server logged, and the offloads read back
    cpu: CpuUse
    proof: Verdict  # the link's and host's proof of the load (quicbed.link.loadproof)
    counters: dict[str, RoleCounters]
    trace: LoadTrace | None
    offload_reasons: list[str]
    reasons: list[str] = field(default_factory=list)  # the verdict: why it is invalid
    generation: str = ""  # the link's generation read after the load
    #: each background flow over the load (quicbed.run.background), and why it was not
    #: running all through it
    background: list[dict[str, Any]] = field(default_factory=list)
    background_reasons: list[str] = field(default_factory=list)


def replacement_counts(runs: Iterable[RunRow]) -> tuple[dict[str, int], dict[str, int]]:
    """Per arm, the measured loads the link or host spoiled (quicbed.link.loadproof) and
    the replacement loads measured (reps past the schedule's: their ``replacement``
    flag)."""
    spoiled: dict[str, int] = {}
    replaced: dict[str, int] = {}
    for r in runs:
        if r.warmup:
            continue
        if load_proof(r.detail).get("spoiled"):
            spoiled[r.arm] = spoiled.get(r.arm, 0) + 1
        if is_replacement(load_proof(r.detail)):
            replaced[r.arm] = replaced.get(r.arm, 0) + 1
    return spoiled, replaced


class LinkFailed(LinkFailure):
    """A LinkFailure that says which check failed (``reason``), for the runner to decide
    on; its message is the one people read."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _Outcome:
    """How an attempt ended and what its stored runs say: what its CellResult reports,
    gathered while the testbed is still claimed and the store open."""

    status: str = "failed"  # until the measuring says otherwise
    problem: str = ""
    reason: FailureReason | None = None
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    invalid: dict[str, list[str]] = field(default_factory=dict)
    spoiled: dict[str, list[str]] = field(default_factory=dict)
    runs: list[RunRow] = field(default_factory=list)

    def result(self, job: _Job, out: Path) -> CellResult:
        """The attempt as the caller sees it, from this and what ``job`` met on the way."""
        return CellResult(
            job.cell_id,
            job.attempt,
            self.status,
            self.problem,
            job.receipt,
            self.comparisons,
            self.invalid,
            out,
            verify_summary(self.runs),
            self.reason,
            job.browsers,
            job.wait.waited_s,
            self.spoiled,
        )


@dataclass
class _Job:
    """One attempt's work on a proven link: servers, browsers, loads, the closing check."""

    cfg: CellConfig
    tb: Testbed
    store: Store
    cell_id: str
    attempt: int
    pageset: Any
    progress: Progress | None
    fault: Callable[[str, int, dict[str, WebServer]], None] | None
    traces: str = "light"
    profile: str = "none"
    receipt: Receipt | None = None
    #: each arm's browser build, once its driver said hello
    browsers: dict[str, str] = field(default_factory=dict)
    #: the cell's budget of waiting for a quiet host (quicbed.link.quiet)
    wait: HostWait = field(default_factory=HostWait)
    #: how late a load's latest frame may leave the emulator (ms; None: from the cell)
    late_tolerance_ms: float | None = None
    #: the most spoiled loads an arm replaces (quicbed.link.loadproof)
    max_replaced: int = 0
    #: spot checks taken again after a wait for a quiet host
    spot_retries: int = 0

    def measure(
        self, link: ProvenLink | None, host: HostPolicy, receipt_tcp_seconds: float
    ) -> _Outcome:
        """Measure the cell, then finish its attempt in the store however the measuring
        ended (interrupted too), with the reason a runner decides on: the link's (out of
        tolerance, a failed opening or closing check, changed under a load), a host that
        stayed busy, or an arm left with no valid run, which leaves nothing to compare."""
        outcome = _Outcome()
        try:
            self._measure_link(link, host, receipt_tcp_seconds)
            empty = arms_without_valid_runs(self.store, self.cell_id, self.attempt, self.cfg)
            if empty:
                self._no_valid_run(empty)
            outcome.status = "done"
        except LinkFailure as exc:
            outcome.problem = str(exc)
            outcome.reason = (
                exc.reason if isinstance(exc, LinkFailed) else FailureReason.LINK_CHANGED
            )
        except QuicbedError as exc:
            outcome.problem, outcome.reason = str(exc), FailureReason.OTHER
        finally:
            with shielded():
                self.store.finish_attempt(
                    self.cell_id,
                    self.attempt,
                    outcome.status,
                    outcome.problem,
                    reason=outcome.reason.value if outcome.reason else None,
                    waited_s=round(self.wait.waited_s, 1),
                )
        return outcome

    def _no_valid_run(self, empty: dict[str, list[str]]) -> None:
        """Fail the attempt for its arms left without a valid run (``empty``, each with
        its runs' reasons): a link failure where the link or the host spoiled every run of
        each (worth measuring again: a sweep retries it on a fresh link, a resume measures
        it again), the cell's own failure otherwise."""
        spoiled = spoiled_throughout(self.store, self.cell_id, self.attempt, self.cfg)
        if set(empty) <= spoiled:
            # a transfer's spoiled runs are kept apart from its flows (a compete cell's
            # under all its arms at once); a page cell's reasons are its loads'
            mine = transfer_spoiled(self.store, self.cell_id, self.attempt)
            if self.cfg.kind == "compete":
                why = "; ".join(r for runs in mine.values() for r in runs)
            else:
                why = " | ".join(
                    f"{arm}: {'; '.join(mine.get(arm) or reasons)}"
                    for arm, reasons in empty.items()
                )
            raise LinkFailed(
                FailureReason.LINK_SPOILED_RUNS,
                f"arm(s) {', '.join(empty)} ended with no valid run: the link or the host "
                f"spoiled every run and its replacements, by the link's own counters ({why})",
            )
        why = " | ".join(
            f"{arm}: {'; '.join(reasons) or 'no measured run'}" for arm, reasons in empty.items()
        )
        raise QuicbedError(
            f"arm(s) {', '.join(empty)} ended with no valid run: nothing to compare ({why})"
        )

    def _measure_link(
        self, link: ProvenLink | None, host: HostPolicy, receipt_tcp_seconds: float
    ) -> None:
        """The loads on ``link``, a sweep's link shared with earlier cells (its opening
        spot check stands in for a receipt once it has been used), or without one on a
        link shaped and proven for this cell alone, undone after its loads (or the
        testbed's kept link, which stays)."""
        cfg = self.cfg
        if link is not None:
            self.measure_on(link, shared=link.uses > 0)
            return
        with shaped_link(
            self.tb,
            cfg.condition,
            cfg.shaper,
            cc=cfg.tcp_cc(),
            offloads_set=cfg.offloads,
            emulator_priority=host.emulator_priority,
        ) as shaped:
            proven = prove(shaped, receipt_tcp_seconds, cfg.tcp_cc(), wait=self.wait)
            # a kept link's receipt (quicbed.link.kept) served other commands: shared
            self.measure_on(proven, shared=proven.uses > 0)

    def tally(self, outcome: _Outcome) -> None:
        """Into ``outcome``, what the finished attempt's stored runs say: a done page
        cell's comparisons, and each arm's invalid loads apart from those the link or host
        spoiled and nothing else (quicbed.link.loadproof); then the store is closed."""
        cfg, store = self.cfg, self.store
        if outcome.status == "done" and cfg.kind == "page":
            outcome.comparisons = compare_cell(store, self.cell_id, self.attempt, cfg)
        outcome.runs = store.runs(self.cell_id, self.attempt)
        for r in outcome.runs:
            if not r.valid:
                spoiled = spoiled_only(load_proof(r.detail))
                (outcome.spoiled if spoiled else outcome.invalid).setdefault(r.arm, []).append(
                    f"#{r.rep}: {r.reason}"
                )
        if cfg.kind != "page":
            outcome.spoiled.update(transfer_spoiled(store, self.cell_id, self.attempt))
        store.close()

    def measure_on(self, proven: ProvenLink, *, shared: bool) -> None:
        """Loads under ``proven``'s receipt, and the record of which loads it covers."""
        self._accept_receipt(proven)
        span = self._link_span(proven, shared)
        opening = self._opening_check(proven, span) if shared else None
        proven.uses += 1
        try:
            self._loads(proven, span)
        except BaseException:
            span["finished"] = now()
            with shielded():
                self.store.add_link_span(span)
            raise
        self._closing_check(proven, span, opening)

    def _accept_receipt(self, proven: ProvenLink) -> None:
        """Store the link's receipt with the attempt, and refuse to measure on a link out
        of tolerance: the attempt fails with the receipt that says why."""
        self.receipt = proven.receipt
        self.store.set_receipt(self.cell_id, self.attempt, proven.receipt.model_dump(mode="json"))
        if not proven.receipt.passed:
            names = "; ".join(c.summary() for c in proven.receipt.failed_checks())
            raise LinkFailed(
                FailureReason.LINK_OUT_OF_TOLERANCE,
                f"the link is out of tolerance ({names}); nothing measured"
                + hostcpu.blame(proven.receipt.host_cpu)
                + (
                    f"; waited {self.wait.waited_s:.0f} s for a quiet host first"
                    if self.wait.waited_s
                    else ""
                ),
            )

    def _link_span(self, proven: ProvenLink, shared: bool) -> dict[str, Any]:
        """The record of which of this attempt's loads ``proven``'s receipt covers and the
        checks around them, filled in as they happen and stored however they end."""
        return {
            "cell_id": self.cell_id,
            "attempt": self.attempt,
            "receipt_created": proven.receipt.created,
            "generation": proven.generation,
            "shared": int(shared),
            "first_seq": None,
            "last_seq": None,
            "started": now(),
            "opening": None,
            "closing": None,
            "passed": 0,
        }

    def _opening_check(self, proven: ProvenLink, span: dict[str, Any]) -> SpotCheck:
        """A shared link's spot check before the first load, since other cells used it
        after its receipt; taken again while the host spoiled it. A failed one is stored
        with the span and fails the attempt before anything is measured."""
        opening = opening_check(proven)
        try:
            while not opening.passed and self._host_spoiled("opening check", opening.problems):
                opening = spot_check(proven, "opening")
        except LinkFailed:  # the host stayed busy: the check is stored all the same
            span.update(opening=opening.model_dump(mode="json"), finished=now())
            self.store.add_link_span(span)
            raise
        span["opening"] = opening.model_dump(mode="json")
        if not opening.passed:
            span["finished"] = now()
            self.store.add_link_span(span)
            raise LinkFailed(
                FailureReason.LINK_OPENING_CHECK,
                f"opening check: {'; '.join(opening.problems)}; nothing measured",
            )
        return opening

    def _closing_check(
        self, proven: ProvenLink, span: dict[str, Any], opening: SpotCheck | None
    ) -> None:
        """The spot check after the last load (counters since the opening check, if one
        was taken), taken again while the host spoiled it: a link that no longer holds
        fails the attempt, as its loads may not have held either. The span is stored."""
        since = opening.counters if opening else None
        closing = spot_check(proven, "closing", since=since)
        try:
            while not closing.passed and self._host_spoiled("closing check", closing.problems):
                closing = spot_check(proven, "closing", since=since)
        finally:  # the loads' span is stored, also when the host stayed busy
            span.update(
                finished=now(),
                closing=closing.model_dump(mode="json"),
                passed=int(closing.passed),
            )
            self.store.add_link_span(span)
        if not closing.passed:
            raise LinkFailed(
                FailureReason.LINK_CLOSING_CHECK,
                f"closing check after the last load: {'; '.join(closing.problems)}",
            )

    def _host_spoiled(self, what: str, problems: list[str]) -> bool:
        """Whether a failed spot check is worth taking again: only when the host was busy
        and quiet again after a wait. A check that fails on a quiet host failed on its
        link. Waits at most SPOT_RETRIES times per attempt (opening and closing
        checks together)."""
        self.spot_retries += 1
        if self.spot_retries > SPOT_RETRIES:
            return False
        return self._settle(f"{what}: {'; '.join(problems)}") is Settled.AFTER_WAIT

    def _loads(self, proven: ProvenLink, span: dict[str, Any]) -> None:
        """A page cell's loads, or a transfer cell's transfers, on the proven link; the
        servers and browsers are stopped, and the traces sealed, however they end."""
        if self.cfg.kind != "page":
            self._transfers(proven, span)
            return

        cfg = self.cfg
        done = {(r.arm, r.rep) for r in self.store.runs(self.cell_id, self.attempt)}
        _, log_dir = self.store.paths(self.cell_id, self.attempt)
        rig = _PageRig(
            tracing=self._traceset(),
            profiler=self._profiler(
                DEFAULT_BROWSER, {a.name: a.browser or DEFAULT_BROWSER for a in cfg.resolved_arms()}
            ),
        )
        try:
            self._start_arms(rig, log_dir)
            self._scheduled_loads(rig, proven, span, done)
            self._replace_spoiled(rig, proven, span, len(cfg.schedule()))
            self._stop_background(rig)
            self._store_versions(rig)
            if rig.profiler:
                rig.profiler.halt(rig.recordings)
                rig.profiler.fold(rig.recordings)
                self._seal_profile(rig.profiler)
        finally:
            self._stop_arms(rig, log_dir)

    def _start_arms(self, rig: _PageRig, log_dir: Path) -> None:
        """Into ``rig``: the page served, each arm's server started, then each arm's
        browser launched and ready, and the meters read around every load. Servers and
        browsers enter ``rig`` as they are made, so a failure stops those that exist."""
        cfg, tb = self.cfg, self.tb
        spec, rig.page, staged = _serve(tb, cfg, self.pageset, log_dir)
        pki = staged.pki
        if spec.replay is not None:
            replay_serve.check_link(spec.replay, cfg.condition)
            rig.held.enter_context(replay_serve.addresses(tb, spec.replay))
        if rig.tracing:
            if spec.replay is not None:  # the loads reach every origin's own address
                rig.tracing.ctx.server_ips = tuple(o.ip for o in spec.replay.origins)
            rig.tracing.start()
            spec = replace(spec, qlog_dirs=rig.tracing.ctx.qlog_dirs)
        rig.servers.update(servers_for(cfg, tb, spec))
        arms = cfg.resolved_arms()
        kinds = {a.name: get_browser(a.browser or "") for a in arms}
        extra = self._browser_options(rig, arms, kinds)
        with timelog.phase(timelog.SERVERS):
            for name, s in rig.servers.items():
                with joining(tb, "server", name):
                    s.start()
        for a in arms:
            kind = kinds[a.name]
            profile = tb.workdir("client") / f"profile-{a.name}"
            bspec = BrowserSpec(
                arm=a.name,
                protocol=a.protocol,
                host=cfg.host,
                server_ip=tb.server_ip,
                port=a.port,
                spki_pin=pki.spki_pin,
                user_data_dir=profile,
                client=kind.name,
                quic_version=rig.servers[a.name].quic_version,
                ca_cert=staged.ca if kind.trusts_ca else None,
                origins=rig.servers[a.name].origin_addresses(),
                visual=cfg.visual,
                **extra[a.name],
            )
            rig.browsers[a.name] = kind(bspec, tb, log_dir)
        anchors = {a.name: "root" if kinds[a.name].trusts_ca else "spki pin" for a in arms}
        rig.chain = certificate.chain_fact(
            cfg.certificate,
            pki.cert.read_bytes(),
            pki.ca_cert.read_bytes(),
            pki.spki_pin,
            anchors,
            {h: p.read_bytes() for h, p in pki.origin_certs.items()},
        )
        self.store.add_provenance(self.cell_id, self.attempt, "certificate", rig.chain)
        self._launch_browsers(rig)
        rig.urls = {a: srv.url(cfg.host, cfg.page) for a, srv in rig.servers.items()}
        metered = [*cfg.arms, background.GROUP] if cfg.background else cfg.arms
        rig.meter, rig.net = CpuMeter(tb, metered), NetMeter(tb)
        if cfg.background:
            rig.background = background.Background(tb, cfg.background, cfg.host, log_dir)
            rig.background.start()
            self.wait.own_cpu_ns = rig.background.cpu_ns  # a quiet host's wait credits them

    def _browser_options(
        self, rig: _PageRig, arms: list[Arm], kinds: dict[str, type[Browser]]
    ) -> dict[str, dict[str, Any]]:
        """Per arm, its browser's options beyond the spec: the trace files it writes at
        the cell's level, and what the arm's server asks of it (a NetLog the server reads,
        whose path the server is told before it starts)."""
        extra: dict[str, dict[str, Any]] = {
            a.name: self._browser_traces(a.name, kinds[a.name], a.transport) for a in arms
        }
        for a in arms:  # at level full, the bodies too: the load can be replayed
            if self.traces == "full" and kinds[a.name].har_content:
                extra[a.name]["har_content"] = True
        for name, srv in rig.servers.items():
            if srv.wants_client_netlog and kinds[name].net_log:
                extra[name].setdefault("net_log", self.tb.workdir("client") / f"netlog-{name}.json")
                srv.client_netlog = extra[name]["net_log"]
            extra[name].update(srv.browser_options())
        return extra

    @timelog.phase(timelog.BROWSERS)
    def _launch_browsers(self, rig: _PageRig) -> None:
        """The arms' browsers started side by side, all from this thread (a child's
        PR_SET_PDEATHSIG fires when the *thread* that forked it ends), then each one's
        build as its driver names it."""
        for name, b in rig.browsers.items():
            with joining(self.tb, "client", name):
                b.launch()
        for b in rig.browsers.values():
            b.connect()
        for b in rig.browsers.values():
            b.ready()
        self.browsers = {name: b.version for name, b in rig.browsers.items()}

    def _scheduled_loads(
        self, rig: _PageRig, proven: ProvenLink, span: dict[str, Any], done: set[tuple[str, int]]
    ) -> None:
        """The schedule's loads (warm-ups, then the runs, the arms interleaved), but for
        those ``done``: stored already by the attempt resumed."""
        cfg = self.cfg
        schedule = list(enumerate(cfg.schedule()))
        if done and cfg.warmup:
            # A resumed attempt has fresh browsers: warm them up again (stored as
            # warm-ups with negative reps) so 0-RTT state exists before measuring.
            low = min(r for _, r in done)
            schedule = [(-1, (arm, low - 1)) for arm in cfg.arms] + schedule
        rig.total = len(schedule)
        for seq, (arm, rep) in schedule:
            if (arm, rep) not in done:
                self._load(rig, proven, span, seq, arm, rep)

    def _stop_background(self, rig: _PageRig) -> None:
        """The background flows stopped, and what their servers and clients ran kept in
        the attempt's provenance (once: a second call finds them stopped)."""
        if rig.background is None:
            return
        facts = rig.background.stop()
        rig.background = None
        self.wait.own_cpu_ns = None
        self.store.add_provenance(self.cell_id, self.attempt, "background", facts)

    def _store_versions(self, rig: _PageRig) -> None:
        """The software that served and loaded the page, as it reported itself, with the
        attempt: each server's version and each arm's browser build."""
        versions: dict[str, Any] = {name: s.version() for name, s in rig.servers.items()}
        browsers = rig.browsers
        versions["browser"] = next(iter(browsers.values())).version if browsers else None
        # each arm's browser build by arm: arms may load in different browsers
        versions["browsers"] = self.browsers
        self.store.set_versions(self.cell_id, self.attempt, versions)

    def _stop_arms(self, rig: _PageRig, log_dir: Path) -> None:
        """Browsers and servers stopped before the link goes: a testbed torn down under
        running daemons would have to kill them one PID at a time. Then the remote logs
        come home beside the runs, and the loads' traces are sealed."""
        with shielded():
            self._stop_background(rig)
            for b in rig.browsers.values():
                b.stop()
            for s in rig.servers.values():
                s.stop()
            rig.held.close()
            for role in ("server", "client"):
                self.tb.collect(role, log_dir)
            if rig.tracing:
                self._seal_traces(rig.tracing, rig.loads, rig.chain)

    def _replace_spoiled(
        self, rig: _PageRig, proven: ProvenLink, span: dict[str, Any], seq: int
    ) -> None:
        """Loads spoiled by the link or the host (quicbed.link.loadproof) are kept, invalid,
        and replaced here: each arm measures one more load per spoiled one, after the
        schedule (reps from warm-up + runs on, the arms alternating, reversed every
        round, as ABBA does), until none is owed or the arm has had ``max_replaced``
        (a spoiled replacement is owed too). Read from the store, so a resumed attempt
        owes what it owed."""
        first, bound = self.cfg.warmup + self.cfg.runs, self.max_replaced
        rounds = 0
        while True:
            spoiled, replaced = replacement_counts(self.store.runs(self.cell_id, self.attempt))
            owed = {
                a: min(spoiled.get(a, 0), bound) - replaced.get(a, 0)
                for a in self.cfg.arms
                if min(spoiled.get(a, 0), bound) > replaced.get(a, 0)
            }
            if not owed:
                return
            order = [a for a in self.cfg.arms if a in owed]
            rig.total = max(rig.total, seq + sum(owed.values()))
            for arm in order if rounds % 2 == 0 else order[::-1]:
                rep = first + replaced.get(arm, 0)
                replaced[arm] = replaced.get(arm, 0) + 1
                self._load(rig, proven, span, seq, arm, rep, replacement=True)
                seq += 1
            rounds += 1

    @timelog.phase(timelog.LOAD)
    def _load(
        self,
        rig: _PageRig,
        proven: ProvenLink,
        span: dict[str, Any],
        seq: int,
        arm: str,
        rep: int,
        *,
        replacement: bool = False,
    ) -> None:
        """One load of ``arm``, verified, proven by the link's own counters, stored;
        ``replacement``: it stands in for a spoiled one."""
        if self.fault:
            self.fault(arm, rep, rig.servers)
        load = self._measure_load(rig, proven, arm, rep, replacement)
        self._judge_load(rig, proven, load)
        self.store.add_run(self._run_row(rig, proven, load, seq), load.result.get("har"))
        if span["first_seq"] is None:
            span["first_seq"] = seq
        span["last_seq"] = seq
        gen = load.generation
        if gen != proven.generation:
            raise LinkFailed(
                FailureReason.LINK_CHANGED,
                f"the link changed during the cell ({arm} #{rep}: generation "
                f"{proven.generation} -> {gen}); the loads after it were not measured",
            )
        if load.background_reasons:
            raise QuicbedError(
                f"{arm} #{rep}: {load.background_reasons[0]}; the loads after it were not measured"
            )
        if self.progress:
            self.progress(arm, seq + 1, rig.total)
        if load.proof.host_spoiled and not load.warm:
            self._after_spoiled(f"{arm} #{rep}: {load.proof.reasons[0]}")

    def _measure_load(
        self, rig: _PageRig, proven: ProvenLink, arm: str, rep: int, replacement: bool
    ) -> _PageLoad:
        """The browser's load of the page, its instruments (server log, offloads, the
        link's proof, traces, CPU, counters) begun just before it and read just after, so
        that what they read is this load's."""
        cfg = self.cfg
        warm = rep < cfg.warmup
        if rig.profiler and not warm and not rig.recordings:  # the measured loads only
            rig.recordings = [r for a in cfg.arms for r in rig.profiler.attach(a)]
        srv = rig.servers[arm]
        srv.mark()
        offl = proven.link.offload_watch()
        offl.begin()
        watch = LoadWatch(self.tb, proven.link.shaper, cfg.condition, self.late_tolerance_ms)
        lt = rig.tracing.begin(arm, rep) if rig.tracing else None
        assert rig.net is not None and rig.meter is not None
        net_mark, cpu_mark = rig.net.read(), rig.meter.begin()
        bg = rig.background
        watch.begin()
        t0 = bg.clock_ns() if bg else 0
        result = rig.browsers[arm].load(
            rig.urls[arm], fresh_context=cfg.mode == "1rtt", timeout_s=cfg.load_timeout_s
        )
        t1 = bg.clock_ns() if bg else 0
        used = rig.meter.end(cpu_mark)
        cpu = used[arm]
        proof = watch.end(own_cpu_ms=_own_ms(self.tb, cpu, used.get(background.GROUP)))
        proof.facts["replacement"] = replacement
        counters = rig.net.since(net_mark)
        m = har.metrics(
            result.get("har"), result.get("nav"), rig.page["hosts"], result.get("paint")
        )
        if cfg.visual:  # the frames scored, and kept beside the HAR (quicbed.client.visual)
            rel = Path("visual") / self.cell_id / str(self.attempt) / f"{arm}-{rep:03d}"
            figures, detail = visual.visual_figures(
                result.get("visual"), m.get("fcp_ms"), self.store.root / rel
            )
            m.update(figures, visual=detail and {**detail, "folder": str(rel)})
        # a replayed page has no fixed object count: the load's own requests
        facts = _server_facts(srv, rig.page["objects"] or m.get("objects") or 0)
        facts.update(srv.observe())
        if srv.spec.replay is not None:  # an origin reused off the requests' connections
            facts.update(reused_off_requests(facts, srv.spec.replay.host_map()))
        if rig.tracing and lt:
            lt.page_started(result.get("har"))
            rig.tracing.end(lt)
            rig.loads.append((f"{self.cell_id}:{self.attempt}:{arm}:{rep}", lt))
        offl_facts, offl_reasons = offl.end()
        facts.update(offl_facts)
        load = _PageLoad(arm, rep, warm, result, m, facts, cpu, proof, counters, lt, offl_reasons)
        if bg:
            t0, t1, span = _page_span(result.get("har"), m, t0, t1)
            # a varying link's share is of what its trace allowed over the span
            # (docs/varying-links.md), placed by the epoch of the load's restart
            same_clock = self.tb.controller_is_host

            def link_bps(direction: str) -> float | None:
                restarted = watch.before if same_clock else None
                return varying.span_rate_bps(cfg.condition, restarted, direction, t0, t1)

            rows, why = bg.over(t0, t1, link_bps)
            load.background = [{**r, "span": span} for r in rows]
            load.background_reasons = why
        return load

    def _judge_load(self, rig: _PageRig, proven: ProvenLink, load: _PageLoad) -> None:
        """Into ``load``, every reason it must not enter the statistics: its own checks'
        (counted apart from the link's in its proof), its link proof's unless it is a
        warm-up, and a change of the link's generation under it."""
        srv = rig.servers[load.arm]
        reasons = (
            _judge(self.cfg, srv, load.warm, load.result, load.metrics, load.facts, rig.page)
            + load.offload_reasons
            + load.background_reasons
        )
        load.proof.facts["own_reasons"] = len(reasons)  # the load's own failures, not the link's
        if not load.warm:  # a warm-up is not measured: its proof is kept, not judged
            reasons += load.proof.reasons
        gen = proven.current_generation()
        if gen != proven.generation:
            reasons.append(
                f"the link changed under this load (generation {proven.generation} -> {gen})"
            )
        load.reasons, load.generation = reasons, gen

    def _run_row(self, rig: _PageRig, proven: ProvenLink, load: _PageLoad, seq: int) -> RunRow:
        """The stored row of a judged load: its figures, its verdict, and in its detail
        the evidence the verdict was read from."""
        m, facts = load.metrics, load.facts
        return RunRow(
            cell_id=self.cell_id,
            attempt=self.attempt,
            arm=load.arm,
            rep=load.rep,
            seq=seq,
            warmup=load.warm,
            valid=not load.reasons,
            reason="; ".join(load.reasons),
            plt_ms=m.get("plt_ms"),
            onload_ms=m.get("onload_ms"),
            dns_ms=m.get("dns_ms"),
            nav_load_ms=m.get("nav_load_ms"),
            ttfb_ms=m.get("ttfb_ms"),
            fcp_ms=m.get("fcp_ms"),
            lcp_ms=m.get("lcp_ms"),
            speed_index_ms=m.get("speed_index_ms"),
            visual_complete_ms=m.get("visual_complete_ms"),
            objects=m.get("objects"),
            bytes=m.get("bytes"),
            protocols=m.get("protocols"),
            used_0rtt=bool(facts["used_0rtt"]) if "used_0rtt" in facts else None,
            tls_resumed=bool(facts.get("tls_resumed", False)),
            detail=_run_detail(rig, proven, load),
        )

    def _settle(self, why: str) -> Settled:
        """Wait for a quiet host after ``why`` was spoiled by it; the cell fails once its
        wait limit is spent (FailureReason.HOST_BUSY)."""
        got = self.wait.settle(self.tb, why)
        if got is Settled.BUSY:
            raise LinkFailed(FailureReason.HOST_BUSY, self.wait.exhausted(why))
        return got

    def _after_spoiled(self, why: str) -> None:
        """After a load or flow the host spoiled (``why``): wait for a quiet host, and
        where it probes quiet already (a burst of steal that has passed), pause before the
        next one as a receipt does (quicbed.link.proof), so that its replacement is not
        measured inside the same burst. Seen in CI: three bulk flows of an arm in a row
        spoiled (the emulator 50-90 ms late), and no probe between them found the host
        busy enough to wait."""
        if self._settle(why) is Settled.QUIET:
            self.wait.pause(f"{why}; the host probes quiet")

    def _transfers(self, proven: ProvenLink, span: dict[str, Any]) -> None:
        """A bulk or compete cell (quicbed.run.bulk): its transfers on the proven link, one
        record stored for the attempt (a resumed attempt runs them again, whole)."""

        _, log_dir = self.store.paths(self.cell_id, self.attempt)
        profiler = self._profiler("quicbed-bulk")
        tracing = self._traceset()
        result = run_transfer(
            self.cfg,
            self.tb,
            proven,
            log_dir,
            self.progress,
            profiler,
            self.fault,
            tracing=tracing,
            judge=FlowJudge(self.late_tolerance_ms, self.max_replaced, self._after_spoiled),
        )
        if profiler:
            self._seal_profile(profiler)
        self.store.set_transfer(
            self.cell_id, self.attempt, self.cfg.kind, result.model_dump(mode="json")
        )
        span.update(first_seq=0, last_seq=len(result.runs) - 1)

    def _profiler(self, client: str, clients: dict[str, str] | None = None) -> CpuProfile | None:
        """The attempt's CPU profile (``--profile cpu``), or None; ``clients``: per arm,
        its own client program where it is not ``client``."""
        if self.profile != "cpu":
            return None

        return CpuProfile(
            self.tb, self.store.root, self.cell_id, self.attempt, client, dict(clients or {})
        )

    def _seal_profile(self, profiler: CpuProfile) -> None:
        """The profile's files and flame graphs, and its record in the provenance."""
        stacks = {a.name: a.stack for a in self.cfg.resolved_arms()}
        record = profiler.finish(stacks)
        self.store.add_provenance(self.cell_id, self.attempt, "profile", record)

    def _traceset(self) -> TraceSet | None:
        if self.traces == "none":
            return None
        arms = self.cfg.resolved_arms()
        ctx = TraceContext(
            level=self.traces,
            testbed=self.tb,
            results=self.store.root,
            cell_id=self.cell_id,
            attempt=self.attempt,
            arms=self.cfg.arms,
            transports={a.name: a.transport for a in arms},
            tcp_buffer_kb=None if self.cfg.kind == "page" else TRANSFER_BUFFER_KB,
            other_ports=background.ports(self.cfg.background),
        )
        for a in arms:
            if a.transport == "udp":
                qdir = self.tb.workdir("server") / "qlog" / f"{self.cell_id}-{self.attempt}"
                ctx.qlog_dirs[a.name] = qdir / a.name
        tracing = TraceSet(ctx, instruments())
        self.store.add_provenance(
            self.cell_id,
            self.attempt,
            "traces",
            {
                "level": self.traces,
                "instruments": [t.name for t in tracing.tracers],
                "unavailable": tracing.unavailable,
            },
        )
        return tracing

    def _arm_dir(self) -> Path:
        return self.store.root / "traces" / self.cell_id / str(self.attempt)

    def _browser_traces(self, arm: str, browser: type[Browser], transport: str) -> dict[str, RPath]:
        """An arm's TLS key log, its browser's NetLog where it writes one (Chromium) and
        its QUIC qlog where it writes one (Firefox; a QUIC arm's), at level full."""
        if self.traces != "full":
            return {}
        out = self.tb.outbox("client", self._arm_dir())
        files = {"ssl_key_log": out / f"{arm}-keys.log"}
        if browser.net_log:
            files["net_log"] = out / f"{arm}-netlog.json"
        if browser.qlog and transport == "udp":
            files["qlog_dir"] = out / f"{arm}-client-qlog"
        return files

    def _seal_traces(
        self, tracing: TraceSet, loads: list[tuple[str, LoadTrace]], chain: dict[str, Any]
    ) -> None:
        """Once browsers and servers are gone: complete every load's traces (qlog files
        close with their connections), derive its facts, and record both with the run."""

        try:
            if self.traces == "full":
                self.tb.collect("client", self._arm_dir())
                for arm in self.cfg.arms:
                    netlog = self._arm_dir() / f"{arm}-netlog.json"
                    if netlog.exists():
                        data, closed = complete_netlog(netlog.read_bytes())
                        write_gz(netlog.with_suffix(".json.gz"), data)
                        netlog.unlink()
                        for _, lt in loads if closed else []:
                            if lt.key.arm == arm:
                                lt.notes.append(
                                    "NetLog left unfinished by Chromium; its "
                                    "event list was closed after the last event"
                                )
                netlogs = {a.name: a.browser for a in self.cfg.resolved_arms()}
                for _, lt in loads:
                    for name, f in (("keys", "keys.log"), ("netlog", "netlog.json.gz")):
                        rel = lt.key.arm_rel(f)
                        if (self.store.root / rel).exists():
                            lt.files[name] = str(rel)
                        elif name == "netlog" and not _writes_netlog(netlogs[lt.key.arm]):
                            lt.missing[name] = f"{netlogs[lt.key.arm]} writes no NetLog"
                        else:
                            lt.missing[name] = "the browser wrote no file"
            tracing.finish()

            runs = {r.run_id: r for r in self.store.runs(self.cell_id, self.attempt)}
            spurious = {
                a.name: get_stack(a.stack).logs_spurious_losses for a in self.cfg.resolved_arms()
            }
            ports = {a.port for a in self.cfg.resolved_arms()}
            for run_id, lt in loads:
                stored = runs.get(run_id)
                patch = {"traces": tracing.detail(lt)}
                if "capture" in lt.files:
                    patch["handshake"] = self._handshakes(lt, ports, chain)
                    patch["wire"] = self._wire(lt, ports)
                facts = derive(
                    lt.samples,
                    arm=lt.key.arm,
                    ttfb_ms=stored.ttfb_ms if stored else None,
                    plt_ms=stored.plt_ms if stored else None,
                    page_start_ms=lt.page_start_ms,
                    logs_spurious=spurious.get(lt.key.arm, False),
                )
                self.store.update_run_detail(run_id, patch | {"transport": facts})
        finally:
            tracing.stop()

    def _handshakes(self, lt: LoadTrace, ports: set[int], chain: dict[str, Any]) -> dict[str, Any]:
        """Each connection's handshake in the load's capture (quicbed.traces.handshake),
        or why there is none: a trace problem never fails a load; and whether every
        chain on the wire was the cell's (``chain_problems``: none, or each connection's
        difference, quicbed.settings.certificate.wire_problems)."""
        root = self.store.root
        keys = root / lt.files["keys"] if "keys" in lt.files else None
        try:
            found = handshake.read(
                root / lt.files["capture"], keys, ports, self.cfg.condition.rtt()
            )
        except QuicbedError as exc:
            return {"error": str(exc)}
        conns = [h.as_dict() for h in found]
        judged = (
            certificate.wire_problems(
                chain["setting"],
                chain["der_bytes"],
                conns,
                list(chain.get("origin_der_bytes", {}).values()),
            )
            if chain
            else []
        )
        return handshake.summary(conns) | {"all": conns, "chain_problems": judged}

    def _wire(self, lt: LoadTrace, ports: set[int]) -> dict[str, Any]:
        """The load's transport timeline from its capture (quicbed.traces.wire), its rows
        beside the capture as ``wire.csv.gz``; or why there is none (never fails a load)."""
        root = self.store.root
        try:
            found = wire.read_stored(root, lt.files, ports, lt.began_wall)
        except QuicbedError as exc:
            return {"error": str(exc)}
        rel = lt.key.rel() / "wire.csv.gz"
        write_samples(root / rel, found.samples)
        return found.summary() | {"file": str(rel)}


def _writes_netlog(browser: str | None) -> bool:

    return browser is not None and get_browser(browser).net_log


def _page_span(
    har_log: dict[str, Any] | None, m: dict[str, Any], t0: int, t1: int
) -> tuple[int, int, str]:
    """The span a load's background figures cover, on the client's clock (ns): the
    page's own, from its HAR start to its onLoad (the browser runs on the client), or
    where the HAR has none, the runner's call around the load (``call``: wider by the
    driver's own work)."""
    pages = ((har_log or {}).get("log") or {}).get("pages") or []
    onload = m.get("onload_ms")
    if pages and pages[0].get("startedDateTime") and onload is not None and onload >= 0:
        started = datetime.fromisoformat(str(pages[0]["startedDateTime"]))
        start_ns = int(started.timestamp() * 1e9)
        return start_ns, start_ns + int(onload * 1e6), "page"
    return t0, t1, "call"


def _own_ms(tb: Testbed, arm: CpuUse, bg: CpuUse | None) -> float | None:
    """The CPU a load's own roles used, and the background flows' servers and clients
    beside it: the cell's work, not other work on the host (quicbed.link.loadproof)."""
    own = own_cpu_ms(tb, [arm])
    if own is None or bg is None:
        return own
    return own + sum(t.total_ms for role, t in bg.roles.items() if role != "bridge")


def _server_facts(srv: WebServer, objects: int, wait_s: float = 2.0) -> dict[str, Any]:
    """What the server logged about the load just done: as soon as it logged a request
    for every object of the page, else after ``wait_s``. A server writes its log line
    after the response has left, so the line may land after the browser's onLoad, and on
    a busy 2-core host (a full test run, a command started beside a sweep) later than
    the 50 ms this waited before, leaving a load judged from part of its log. Only a load
    that never logs every object (a failed one) pays the whole wait."""
    deadline = time.monotonic() + wait_s
    while True:
        facts = srv.load_facts(srv.since_mark())
        if facts.get("requests", 0) >= objects or time.monotonic() >= deadline:
            return facts
        time.sleep(0.005)


def _run_detail(rig: _PageRig, proven: ProvenLink, load: _PageLoad) -> dict[str, Any]:
    """A load's stored detail: the evidence behind its row (HAR entries, the server's
    facts, its link proof under the receipt, CPU, counters, traces), so a verdict can be
    checked, and a figure explained, from the store alone."""
    m, result, lt = load.metrics, load.result, load.trace
    return {
        "entries": m.get("entries"),
        "server": load.facts,
        "error": result.get("error"),
        "context": result.get("context"),
        # what cleared the browser before the load, as its driver says
        # and the iframes in renderers of their own whose requests it recorded
        **{k: result[k] for k in ("clearing", "connections_closed", "frames") if result.get(k)},
        "main_connect_ms": m.get("main_connect_ms"),
        "main_ssl_ms": m.get("main_ssl_ms"),
        # the driver's paint record (LCP element, why a figure is null), requests and
        # bytes per origin and per protocol (har.metrics)
        **{k: m.get(k) for k in ("paint", "by_origin", "by_protocol")},
        # a visual cell's frames: per frame its time, progress and kept file
        **({"visual": m["visual"]} if m.get("visual") else {}),
        "link": {
            "generation": load.generation,
            "receipt": proven.receipt.created,
            "load": load.proof.facts,
        },
        "cpu": load.cpu.model_dump(mode="json"),
        "counters": {r: c.model_dump() for r, c in load.counters.items()},
        **({"background": load.background} if load.background else {}),
        **({"traces": rig.tracing.detail(lt)} if rig.tracing and lt else {}),
    }


def _serve(
    tb: Testbed, cfg: CellConfig, pageset: Any, log_dir: Path
) -> tuple[ServeSpec, dict[str, Any], StagedChain]:
    """Put the page tree and the cell's certificate chain on the server; what both
    servers serve; the chain (its leaf's SPKI pin) and where its root is on the client.

    Both are made on the controller (a chain per certificate setting and testbed, kept
    there) and pushed to the server role; the servers' logs go to the role's outbox for
    ``log_dir``.
    """

    work = tb.workdir("server")
    archive = None
    if cfg.replay is not None:  # a replayed page: its archive, each origin its own leaf
        folder, archive = replay_serve.checked(cfg.page, cfg.replay)
        hosts = [o.host for o in archive.origins]
        page: dict[str, Any] = {"objects": None, "bytes": None, "archive": archive}
        tb.mkdir("server", work / "www")  # the servers' default tree: empty
    else:
        www = tb.local_stage("server", "www")
        page = workloads.generate(www, [cfg.page], pageset)["pages"][cfg.page]
        tb.push("server", www / cfg.page, work / "www" / cfg.page)  # only this cell's page
        hosts = []
    page["hosts"] = frozenset(hosts or [cfg.host])
    staged = stage_chain(tb, cfg.host, hosts, cfg.certificate)
    spec = ServeSpec(
        docroot=work / "www",
        cert=staged.cert,
        key=staged.key,
        logdir=tb.outbox("server", log_dir),
        replay=(
            None
            if archive is None
            else replay_serve.put(tb, folder, archive, staged.pki, wait=cfg.server_time is not None)
        ),
    )
    return spec, page, staged


def verify_summary(runs: list[RunRow]) -> dict[str, dict[str, Any]]:
    """Per arm, what the checks of each measured load found, so the claim "h3 with
    0-RTT, h2 with TLS resumption" is read off the stored evidence, not the config;
    the key-exchange groups its ServerHellos chose (:func:`load_groups`); and at level
    full the loads whose chains were counted from the wire and those where one was not
    the cell's certificate chain."""
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        if r.warmup:
            continue
        a = out.setdefault(
            r.arm,
            {
                "measured": 0,
                "valid": 0,
                "protocols": [],
                "used_0rtt": 0,
                "tls_resumed": 0,
                "cc": [],
                "spoiled": 0,
                "replacements": 0,
                "groups": [],
                "chains_counted": 0,
                "chain_problems": 0,
            },
        )
        shake = r.detail.get("handshake") or {}
        if "chain_problems" in shake:
            a["chains_counted"] += 1
            a["chain_problems"] += int(bool(shake["chain_problems"]))
        for g in load_groups(r.detail):
            if g not in a["groups"]:
                a["groups"].append(g)
        a["spoiled"] += int(bool(load_proof(r.detail).get("spoiled")))
        a["replacements"] += int(is_replacement(load_proof(r.detail)))
        a["measured"] += 1
        a["valid"] += int(r.valid)
        a["used_0rtt"] += int(r.used_0rtt is True)
        a["tls_resumed"] += int(r.tls_resumed is True)
        for p in r.protocols or []:
            if p not in a["protocols"]:
                a["protocols"].append(p)
        for cc in (r.detail.get("server") or {}).get("cc") or []:
            if cc not in a["cc"]:
                a["cc"].append(cc)
    for arm, a in out.items():
        for direction, key in (("down", "background_share"), ("up", "background_share_up")):
            share = background_share(runs, arm, direction)
            if share is not None:
                a[key] = share
    return out
