"""Bulk and compete cells: goodput of one flow per arm, and flows sharing a bottleneck.

They are cells of kind ``bulk`` and ``compete`` (quicbed.spec.cellconfig): quicbed.run.cell runs
them as it runs page cells, so they get the same link (shaped, with its receipt, a
link out of tolerance never measured on, the link checked around the transfers), the
same attempts, store, sweeps, reports and packages. This module does the transfers
(run_transfer), with the arms' own servers (quicbed.servers, the stacks of
quicbed.spec.arms) serving a generated bulk object (quicbed.spec.bulkobjects) with the
default certificate chain (quicbed.run.chainstage). It sits below the runner that calls
it (quicbed.run.cell) and imports none of it: the one-shot ``quicbed bulk`` and
``quicbed compete``, which measure one such cell as a sweep does, are quicbed.cli.bulk's.

The client of every flow, whatever its arm, is ``quicbed-bulk`` (go/cmd/quicbed-bulk):
Go's net/http with its bundled HTTP/2 over TCP+TLS 1.3 for h2 arms, quic-go's http3
client for h3 arms, the same receive windows for both. Not the browser: a bulk flow
has no page to render, a browser's own scheduling and flow-control tuning would be a
confound of the TCP/QUIC comparison, and the same program for both arms makes the
client side equal. It samples the bytes received every 100 ms.

- ``bulk``: N repetitions per arm, arms interleaved, one flow at a time: goodput
  (application bytes / time), completion time, retransmissions (TCP: the server
  kernel's ``ss -ti`` for the flow's connection; QUIC: the counters the arm's stack
  reads from its server's log, WebServer.flow_facts), the packets the
  bottleneck dropped (the emulator's counters, protocol neutral), Welch's t-test and
  Mann-Whitney U per arm against the TCP arm (quicbed.analysis.stats.compare).
- ``compete``: K flows of arm A and M of arm B started together (or staggered) on one
  bottleneck: per-flow throughput every 100 ms, each flow's share and Jain's fairness
  index over the steady part, and the bottleneck queue's occupancy sampled from the
  emulator (quicbed-linkem's ``queue_bytes``/``queue_packets``) every 100 ms; repeated
  ``runs`` times, with each arm's share over the repetitions and Welch/MWU on the arms'
  per-flow throughput.

Every bulk flow and every compete repetition is proven as a page load is
(quicbed.link.loadproof: the emulator's lateness by its own clock, drops it was not asked
for, the host's steal and other work over it): one the link or the host spoiled is kept
with its figures named, counts in no summary, and is replaced after the planned ones, up
to the cell's bound (FlowJudge), the runner waiting for a quiet host after it.

An attempt's record (BulkResult, CompeteResult: every flow's samples, the queue) is
stored in the store's ``transfers`` table; summaries and comparisons are computed from
it when read (quicbed.analysis.transfers), figures drawn by the report
(quicbed.report.transferplots).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quicbed import timelog
from quicbed.errors import QuicbedError
from quicbed.jsonlines import json_events
from quicbed.link import loadproof
from quicbed.link.proof import ProvenLink
from quicbed.model.link import LinkCondition
from quicbed.profile.components import read_map
from quicbed.results.flowtraces import FlowTracing
from quicbed.results.linkload import owes_replacement
from quicbed.results.store import now
from quicbed.results.transfers import (
    BulkResult,
    BulkRun,
    CompeteResult,
    CompeteRun,
    FlowResult,
    QueueSample,
    compete_run,
    ideal_goodput_bps,
)
from quicbed.roles import offloads
from quicbed.run.chainstage import stage_chain
from quicbed.run.loadcpu import CpuMeter, joining, own_cpu_ms
from quicbed.run.netcounters import NetMeter
from quicbed.servers import get_stack
from quicbed.servers.webserver import Arm, ServeSpec, WebServer, port_of
from quicbed.settings import sockopts, tparams
from quicbed.spec import bulkobjects
from quicbed.spec.cellconfig import CellConfig
from quicbed.tcpinfo import ss_connections
from quicbed.testbed.lifecycle import Process, RPath, Testbed

if TYPE_CHECKING:
    from quicbed.profile.session import CpuProfile
    from quicbed.results.flowtraces import FlowTracing
    from quicbed.traces.tracer import TraceSet

CLIENT = "quicbed-bulk"
#: the client's own CPU map beside this module: the HTTP/2 framing of its h2 flows, on
#: top of quic-go's (its h3 flows are quic-go's client)
CPU_MAP_FILE = "bulk.cpu.yaml"
INTERVAL_S = 0.1
#: how long a client keeps its connection after its final record, so the server's
#: kernel can still be asked about it (``ss``); on a testbed reached over ssh every read
#: between the flow's end and that ``ss`` (CPU, counters, the link's stats, the server's
#: log) is a remote command, and 1.5 s was seen not to be enough there (the ssh lab, under
#: the whole test suite: no connection left to read)
LINGER_S = 1.5
LINGER_REMOTE_S = 4.0


def linger_s(tb: Testbed) -> float:
    """The client's linger on ``tb`` (:data:`LINGER_S`, or :data:`LINGER_REMOTE_S`)."""
    return LINGER_S if tb.controller_is_host else LINGER_REMOTE_S


#: (what, done, total), as quicbed.run.cell reports a cell's loads
Progress = Callable[[str, int, int], None]
#: a test's hook before a flow: arm, rep, the arms' servers (quicbed.run.cell's ``fault``)
Fault = Callable[[str, int, dict[str, WebServer]], None]
#: the client's flag for each transport parameter it advertises (an arm's ``client_``
#: keys; quicbed.client.transfer says which it takes: quic-go's client has one
#: stream window for the three stream-data limits)
CLIENT_FLAGS = {
    "initial_max_data": "-initial-max-data",
    "initial_max_stream_data_bidi_local": "-initial-max-stream-data",
    "initial_max_streams_bidi": "-initial-max-streams-bidi",
    "initial_max_streams_uni": "-initial-max-streams-uni",
}


def cpu_map() -> dict[str, tuple[str, ...]]:
    """quicbed-bulk's CPU map (``--profile``): quic-go's, and Go's HTTP/2 frames."""
    own = read_map(Path(__file__).with_name(CPU_MAP_FILE))
    base = get_stack("quic-go").cpu_map()
    cats = dict.fromkeys([*base, *own])
    return {c: (*base.get(c, ()), *own.get(c, ())) for c in cats}


def client_transport_argv(params: dict[str, Any]) -> list[str]:
    """quicbed-bulk's flags for an arm's client transport parameters (unset: none)."""
    out: list[str] = []
    for name, flag in CLIENT_FLAGS.items():
        v = params.get(tparams.CLIENT + name)
        if v is not None:
            # quic-go's client takes 0 bidirectional streams as its default 100: -1 is none
            out += [flag, str(-1 if name == "initial_max_streams_bidi" and v == 0 else v)]
    idle = params.get(tparams.CLIENT + "max_idle_timeout")
    if idle is not None:
        out += ["-max-idle-timeout", f"{idle}ms"]
    auto = params.get(tparams.CLIENT + tparams.AUTOTUNE)
    if auto is not None:
        out.append(f"-flow-control-autotune={str(auto).lower()}")
    return out


@dataclass(frozen=True)
class StagedBulk:
    """Bulk objects and the testbed's certificate where a server and a client read them."""

    docroot: RPath  # on the server: its bulk/ folder holds the objects
    cert: RPath
    key: RPath
    ca: RPath  # on the client: the CA that signed ``cert``
    manifest: dict[str, Any]  # quicbed.spec.bulkobjects' (bytes and SHA-256 per object)


def stage_bulk(tb: Testbed, sizes: list[str], host: str) -> StagedBulk:
    """The objects of ``sizes`` generated and pushed to the server, with the testbed's
    leaf for ``host`` and its CA on the client: what a bulk cell's servers and a page
    cell's background flows (quicbed.run.background) serve and fetch."""
    www = tb.local_stage("server", "www")
    manifest = bulkobjects.generate_bulk(www, sizes)
    work = tb.workdir("server")
    tb.push("server", www / bulkobjects.FOLDER, work / "www" / bulkobjects.FOLDER)
    staged = stage_chain(tb, host)
    return StagedBulk(work / "www", staged.cert, staged.key, staged.ca, manifest)


def client_clock_ns(tb: Testbed) -> int:
    """The client role's clock (Unix ns), which quicbed-bulk's ``-start-at`` and samples
    are on: the controller's own where it is the client's host (one clock), else read
    there."""
    if tb.controller_is_host:
        return time.time_ns()
    return int(tb.exec("client", ["date", "+%s%N"]).stdout.strip())


# --- the run --------------------------------------------------------------------------
class _Rig:
    """Servers of the arms serving the bulk object, and clients started on the client."""

    def __init__(
        self,
        tb: Testbed,
        arms: list[Arm],
        size: str,
        out: Path,
        host: str,
        traced: FlowTracing | None = None,
    ) -> None:

        self.tb, self.arms, self.size, self.out, self.host = tb, arms, size, out, host
        #: the flows' transport traces (the cell's trace level), or None
        self.traced = traced
        staged = stage_bulk(tb, [size], host)
        self.manifest = staged.manifest
        self.object_bytes = bulkobjects.parse_size(size)
        self.logs = out / "logs"
        self.spec = ServeSpec(
            docroot=staged.docroot,
            cert=staged.cert,
            key=staged.key,
            logdir=tb.outbox("server", self.logs),
            qlog_dirs=traced.tracing.ctx.qlog_dirs if traced else None,
        )
        self.ca = staged.ca
        self.path = bulkobjects.object_path(size)
        self.client_logs = tb.outbox("client", self.logs)
        self.servers: dict[str, WebServer] = {
            a.name: get_stack(a.stack)(tb, self.spec, a) for a in arms
        }
        self.by_name = {a.name: a for a in arms}
        self.flows = 0
        #: at level full, the clients' TLS key logs, per arm, beside the captures (so a
        #: flow's capture decrypts: quicbed.traces.wire), as a page cell keeps its
        #: browsers'; None below full
        self.keys: tuple[Path, RPath] | None = None
        if traced and traced.tracing.ctx.level == "full":
            ctx = traced.tracing.ctx
            local = ctx.results / "traces" / ctx.cell_id / str(ctx.attempt)
            self.keys = (local, tb.outbox("client", local))

    @timelog.phase(timelog.SERVERS)
    def start(self) -> None:
        for name, s in self.servers.items():
            with joining(self.tb, "server", name):
                s.start()

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()
        for role in ("server", "client"):
            self.tb.collect(role, self.logs)
        if self.keys:
            self.tb.collect("client", self.keys[0])

    def spawn(
        self, arm: str, flow: str, duration_s: float | None, start_at_ns: int | None
    ) -> tuple[Process, RPath]:
        a = self.by_name[arm]
        port = "" if a.port == 443 else f":{a.port}"
        argv = [
            str(self.tb.bin_path("client", CLIENT)),
            "-proto",
            a.protocol,
            "-url",
            f"https://{self.host}{port}/{self.path}",
            "-addr",
            f"{self.tb.server_ip}:{a.port}",
            "-ca",
            str(self.ca),
            "-interval",
            f"{int(INTERVAL_S * 1000)}ms",
            "-flow",
            flow,
            "-linger",
            f"{int(linger_s(self.tb) * 1000)}ms",
            *(["-duration", f"{int(duration_s * 1000)}ms"] if duration_s else []),
            *(["-start-at", str(start_at_ns)] if start_at_ns else []),
            *(client_transport_argv(a.params) if a.protocol == "h3" else []),
            *(sockopts.client_argv(a.params) if a.protocol == "h3" else []),
            *(["-keylog", str(self.keys[1] / f"{arm}-keys.log")] if self.keys else []),
        ]
        self.flows += 1
        log = self.client_logs / f"{flow}.jsonl"
        self.tb.remove("client", log)
        with joining(self.tb, "client", arm):
            return self.tb.spawn("client", argv, log=log), log

    def records(self, log: RPath) -> list[dict[str, Any]]:
        return json_events(self.tb.read_text("client", log).splitlines())

    def wait_done(self, logs: list[RPath], procs: list[Process], timeout: float) -> None:
        """Until every flow's final record is written (or its client has exited)."""
        deadline = time.monotonic() + timeout
        while True:
            done = [
                any(r.get("event") == "done" for r in self.records(lg)) or p.poll() is not None
                for lg, p in zip(logs, procs, strict=True)
            ]
            if all(done):
                return
            if time.monotonic() > deadline:
                raise QuicbedError(
                    f"{CLIENT}: {done.count(False)} flow(s) not done after {timeout:g} s"
                )
            time.sleep(0.05)

    def server_tcp(self) -> dict[int, dict[str, Any]]:
        cp = self.tb.exec(
            "server", ["ss", "-tinH", "state", "established", "( sport = :443 )"], check=False
        )
        return ss_connections(cp.stdout) if cp.returncode == 0 else {}

    def flow_result(
        self,
        arm: str,
        flow: str,
        recs: list[dict[str, Any]],
        tcp: dict[int, dict[str, Any]],
        quic_log: list[str] | None,
        start_offset: float = 0.0,
        rc: int | None = None,
    ) -> FlowResult:
        """One flow as its client recorded it, judged by the protocol it came over and by
        its server's view of the wire; a flow without a final record is not ok, naming
        what its client said instead."""
        a = self.by_name[arm]
        final = next((r for r in recs if r.get("event") == "done"), None)
        start = next((r for r in recs if r.get("event") == "start"), {})
        samples = [(float(r["t"]), int(r["bytes"])) for r in recs if r.get("event") == "sample"]
        f = FlowResult(
            flow=flow,
            arm=arm,
            protocol=a.protocol,
            ok=False,
            start_lag_s=start.get("lag_s"),
            samples=samples,
            start_offset_s=start_offset + float(start.get("lag_s") or 0.0),
        )
        if final is None:
            f.error = self._no_final_record(flow, rc)
            return f
        _take_final(f, final, a)
        if f.completion_s and (not samples or samples[-1][0] < f.completion_s):
            f.samples.append((float(f.completion_s), f.bytes))  # the last partial interval
        want = {"h2": "HTTP/2.0", "h3": "HTTP/3.0"}[a.protocol]
        if f.ok and f.http_proto != want:
            f.ok, f.error = False, f"the response came over {f.http_proto}, not {want}"
        self._server_view(f, a, tcp, quic_log)
        return f

    def _no_final_record(self, flow: str, rc: int | None) -> str:
        """Why a flow has no result: the client's last lines that are not its records
        (Go's own errors, a panic), since its records stopped short of saying."""
        other = [
            ln
            for ln in self.tb.read_text("client", self.client_logs / f"{flow}.jsonl").splitlines()
            if not ln.startswith("{")
        ]
        return f"{CLIENT} wrote no final record (exit {rc}): {' | '.join(other[-2:])}"

    def _server_view(
        self,
        f: FlowResult,
        a: Arm,
        tcp: dict[int, dict[str, Any]],
        quic_log: list[str] | None,
    ) -> None:
        """The flow's retransmissions as its server saw them (the client cannot count
        them): the kernel's ``ss -ti`` for TCP, which must also show the arm's CC, the
        stack's log for QUIC; the flow found by its client port."""
        port = port_of(f.local_addr)
        if a.transport == "tcp":
            conn = tcp.get(port) if port is not None else None
            if conn is None:
                f.retrans_source = "ss found no connection for this flow"
            else:
                f.server = conn
                f.retransmissions, f.retrans_bytes = conn["retrans"], conn["bytes_retrans"]
                f.retrans_source = "ss -ti on the server (retrans segments, bytes_retrans)"
                if conn.get("cc") not in (None, a.cc):
                    f.ok, f.error = False, f"the server's kernel ran {conn.get('cc')}, not {a.cc}"
        else:
            facts = self.servers[a.name].flow_facts(quic_log or [], port)
            f.server, f.retrans_source = facts.server, facts.source
            f.retransmissions, f.retrans_bytes = facts.retransmissions, facts.retrans_bytes

    def evidence(self, arm: str) -> tuple[dict[str, Any], list[str]]:
        """The arm's server's facts since its mark (its log, its kernel: CC, parameters,
        TCP options from the handshakes) and why they do not show the arm's settings,
        as every page load is judged (quicbed.servers.webserver.WebServer.evidence)."""
        srv = self.servers[arm]
        facts = srv.load_facts(srv.since_mark()) | srv.observe()
        return facts, srv.evidence(facts)

    def quic_lines(self, arm: str, offset: int) -> list[str]:
        srv = self.servers[arm]
        if srv.transport != "udp":
            return []
        return self.tb.read_bytes("server", srv.log, offset).decode(errors="replace").splitlines()

    def log_sizes(self) -> dict[str, int]:
        return {
            n: self.tb.size("server", s.log)
            for n, s in self.servers.items()
            if s.transport == "udp"
        }

    def versions(self) -> dict[str, Any]:
        """The servers' own start records, and the client binary by its SHA-256."""
        out: dict[str, Any] = {n: s.version() for n, s in self.servers.items()}
        exe = self.tb.bin_path("client", CLIENT)
        cp = self.tb.exec("client", ["sha256sum", str(exe)], check=False)
        digest = cp.stdout.split()
        out[CLIENT] = {"path": str(exe), "sha256": digest[0] if digest else None}
        return out


def _verified(f: FlowResult, evidence: tuple[dict[str, Any], list[str]], arm: Arm) -> FlowResult:
    """The flow judged by its server's evidence and, for QUIC, by its client's own record
    of the transport parameters: the other end of the wire."""
    facts, reasons = evidence
    if f.client_transport is not None:
        reasons = reasons + tparams.client_view(arm.params, f.client_transport)
        reasons = reasons + sockopts.client_view(arm.params, f.client_transport)
    f.evidence = facts
    if f.ok and reasons:
        f.ok, f.error = False, "; ".join(reasons)
    return f


def _take_final(f: FlowResult, final: dict[str, Any], a: Arm) -> None:
    """What the client's final record says of the flow into ``f``: for QUIC also the
    transport parameters it advertised and received, so the flow is judged by both ends."""
    f.ok = bool(final.get("ok"))
    f.error = final.get("error")
    f.http_proto = final.get("http_proto")
    f.bytes = int(final.get("bytes") or 0)
    f.completion_s = final.get("completion_s")
    f.goodput_bps = final.get("goodput_bps")
    f.connect_s = final.get("connect_s")
    f.ttfb_s = final.get("ttfb_s")
    f.local_addr = final.get("local_addr")
    f.quic_client = final.get("quic_client")
    if a.transport == "udp":  # what the client advertised and received, and ran
        f.client_transport = {
            k: final.get(k)
            for k in (
                "tp_local",
                "tp_remote",
                "windows",
                tparams.AUTOTUNE,
                *sockopts.CLIENT_RECORD,
            )
            if final.get(k) is not None
        }


def _with_offloads(
    evidence: tuple[dict[str, Any], list[str]], watch: offloads.Watch
) -> tuple[dict[str, Any], list[str]]:
    """A flow's evidence with the cell's interface offloads read back before and after it
    (quicbed.roles.offloads): a flow under another setting is not ok, naming it."""
    facts, reasons = evidence
    more, why = watch.end()
    return {**facts, **more}, reasons + why


def _down(counters: dict[str, Any] | None) -> dict[str, Any]:
    return ((counters or {}).get("directions") or {}).get("down") or {}


def _bottleneck(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    b, a = _down(before), _down(after)
    if not a:
        return {}
    return {
        k: a.get(k, 0) - b.get(k, 0)
        for k in ("queue_drops", "loss_drops", "tx_packets", "tx_bytes", "ce_marked")
    } | {
        "max_queue_bytes": a.get("max_queue_bytes"),
    }


def _quic_wait(
    rig: _Rig, arm: str, offset: int, port: int | None, timeout: float = 3.0
) -> list[str]:
    """The QUIC server's log lines since ``offset`` once it has logged the flow's close."""
    deadline = time.monotonic() + timeout
    while True:
        lines = rig.quic_lines(arm, offset)
        if rig.servers[arm].flow_closed(lines, port) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


# --- transfer cells (quicbed.run.cell runs them like page cells) -------------------------
def run_transfer(
    cfg: CellConfig,
    tb: Testbed,
    proven: ProvenLink,
    logs: Path,
    progress: Progress | None,
    profile: CpuProfile | None = None,
    fault: Fault | None = None,
    *,
    tracing: TraceSet | None = None,
    judge: FlowJudge | None = None,
) -> BulkResult | CompeteResult:
    """A bulk or compete cell's transfers on ``proven`` (receipt passed, link checked
    around it by quicbed.run.cell), the arms' servers started and stopped here; their logs
    and the clients' go to ``logs``. With ``profile``, perf samples each flow's server and
    client (quicbed.profile.session). ``fault`` (tests) is called before each bulk flow
    (arm, rep, servers), or each compete run (its first arm, rep, servers). With
    ``tracing`` (the cell's trace level, as page cells trace their loads), each flow gets
    its transport trace (quicbed.results.flowtraces), sealed once the servers have
    stopped (their qlog files are complete then). ``judge``: how each flow is proven and
    spoiled ones replaced (FlowJudge; default: the link's own tolerance, none replaced)."""

    t = cfg.transfer
    assert t is not None and cfg.kind in ("bulk", "compete")
    arms = cfg.resolved_arms()
    traced = FlowTracing(tracing) if tracing else None
    rig = _Rig(tb, arms, t.size, logs, cfg.host, traced)
    say = progress or (lambda _m, _i, _n: None)
    how = judge or FlowJudge()
    try:
        if tracing:
            tracing.start()
        rig.start()
        try:
            cell = _Cell(cfg, rig, proven, say, profile, fault, how)
            result: BulkResult | CompeteResult = (_bulk if cfg.kind == "bulk" else _compete)(cell)
        finally:
            rig.stop()
        if traced:
            stacks = {a.name: get_stack(a.stack) for a in arms}
            traced.seal(
                result,
                spurious={n: s.logs_spurious_losses for n, s in stacks.items()},
                qlog_writers={n: s.writes_qlog for n, s in stacks.items() if s.transport == "udp"},
                ports={a.port for a in arms},
            )
        return result
    finally:
        if tracing:
            tracing.stop()


@dataclass
class FlowJudge:
    """How a transfer cell's flows are proven (quicbed.link.loadproof), as its page loads
    are: the lateness tolerance (None: from the link), the most spoiled flows an arm (or
    repetitions a compete cell) replaces, and the runner's wait for a quiet host after a
    flow the host spoiled (quicbed.run.cell: it fails the attempt once its wait is
    spent)."""

    late_tolerance_ms: float | None = None
    max_replaced: int = 0
    settle: Callable[[str], object] | None = None

    def watch(self, tb: Testbed, proven: ProvenLink, cond: LinkCondition) -> loadproof.LoadWatch:
        return loadproof.LoadWatch(tb, proven.link.shaper, cond, self.late_tolerance_ms)

    def after(self, what: str, verdict: loadproof.Verdict) -> None:
        """Wait for a quiet host where the host spoiled ``what``."""
        if verdict.host_spoiled and self.settle:
            self.settle(f"{what}: {verdict.reasons[0]}")


def _proven(verdict: loadproof.Verdict, own_failed: bool, replacement: bool) -> dict[str, Any]:
    """A flow's or repetition's stored proof, as a page load's (quicbed.run.cell)."""
    return {
        **verdict.facts,
        "reasons": verdict.reasons,
        "replacement": replacement,
        "own_reasons": int(own_failed),
    }


@dataclass
class _Cell:
    """What every flow or repetition of one transfer cell shares: its config, its rig of
    servers and clients, the proven link, its instruments and its judge."""

    cfg: CellConfig
    rig: _Rig
    proven: ProvenLink
    say: Progress
    profile: CpuProfile | None
    fault: Fault | None
    judge: FlowJudge

    def __post_init__(self) -> None:
        #: CPU and interface counters, read around each flow or repetition
        self.meter, self.net = CpuMeter(self.rig.tb, self.cfg.arms), NetMeter(self.rig.tb)


def _bulk(c: _Cell) -> BulkResult:
    """``cfg.runs`` downloads per arm, interleaved (ABBA, the cell's schedule), one flow
    at a time. With a duration each runs that long (the object again and again on one
    connection), else it fetches the object once. A flow the link or the host spoiled
    is kept, not ok, and replaced after the schedule (_replaced)."""
    cfg, rig, proven, t = c.cfg, c.rig, c.proven, c.cfg.transfer
    assert t is not None
    runs: list[BulkRun] = []
    schedule = cfg.schedule()
    for seq, (arm, rep) in enumerate(schedule):
        c.say(f"{arm} #{rep}", seq + 1, len(schedule))
        runs.append(_flow(c, arm, rep, seq))
    owed = _replaced(cfg.arms, c.judge.max_replaced, runs)
    while owed:
        for arm in owed:
            seq, rep = len(runs), cfg.runs + sum(1 for x in runs if x.arm == arm and x.replacement)
            c.say(f"{arm} #{rep} (in place of a spoiled flow)", seq + 1, seq + len(owed))
            runs.append(_flow(c, arm, rep, seq, replacement=True))
        owed = _replaced(cfg.arms, c.judge.max_replaced, runs)
    return BulkResult(
        created=now(),
        condition=cfg.condition.model_dump(mode="json"),
        arms=[a.as_dict() for a in cfg.resolved_arms()],
        object=rig.path,
        object_bytes=rig.object_bytes,
        duration_s=t.duration_s,
        reps=cfg.runs,
        ideal_goodput_bps=ideal_goodput_bps(cfg.condition),
        runs=runs,
        receipt=proven.receipt.model_dump(mode="json"),
        versions=rig.versions(),
    )


def _replaced(arms: Iterable[str], bound: int, runs: list[BulkRun]) -> list[str]:
    """The arms that owe a flow (quicbed.results.linkload.owes_replacement)."""
    return [a for a in arms if owes_replacement((x.link for x in runs if x.arm == a), bound)]


@timelog.phase(timelog.FLOW)
def _flow(c: _Cell, arm: str, rep: int, seq: int, *, replacement: bool = False) -> BulkRun:
    """One bulk flow of ``arm``: verified by its server's evidence, proven by the link's
    own counters and the host's CPU over it."""
    cfg, rig, proven, profile, fault, judge = c.cfg, c.rig, c.proven, c.profile, c.fault, c.judge
    t = cfg.transfer
    assert t is not None
    tb, cond, link = rig.tb, cfg.condition, proven.link
    meter, net = c.meter, c.net
    if fault:
        fault(arm, rep, rig.servers)
    offl = link.offload_watch()
    offl.begin()
    offsets = rig.log_sizes()
    watch = judge.watch(tb, proven, cond)
    watch.begin()
    rig.servers[arm].mark()
    net_mark, cpu_mark = net.read(), meter.begin()
    lt = rig.traced.begin(arm, rep) if rig.traced else None
    p, log = rig.spawn(arm, f"{arm}-{rep}", t.duration_s, None)
    profiled = profile.attach(arm, {"client": [p.pid]}) if profile else []
    limit = (t.duration_s or rig.object_bytes * 8 / (cond.rate_mbit or 1000) / 1e6 * 4) + 60
    rig.wait_done([log], [p], timeout=limit)
    cpu = meter.end(cpu_mark)[arm]
    counters = net.since(net_mark)
    # the flow's own span: not the tracer's seconds of reading after it
    verdict = watch.end(own_cpu_ms=own_cpu_ms(tb, [cpu]))
    if profile:
        profile.halt(profiled)
    tcp = rig.server_tcp()
    evidence = rig.evidence(arm)  # while the client lingers: its connection is open
    if rig.traced and lt:  # still lingering (the TCP tracer keeps our table's flows),
        rig.traced.end(lt, lt.began_wall)  # after ss and evidence: it reads for seconds
    evidence = _with_offloads(evidence, offl)
    recs = rig.records(log)
    final = next((r for r in recs if r.get("event") == "done"), {})
    port = port_of(final.get("local_addr"))
    rc = p.wait(linger_s(tb) + 10)
    quic = _quic_wait(rig, arm, offsets.get(arm, 0), port) if arm in offsets else None
    f = _verified(
        rig.flow_result(arm, f"{arm}-{rep}", rig.records(log), tcp, quic, rc=rc),
        evidence,
        rig.by_name[arm],
    )
    f.cpu, f.counters = cpu, counters
    proof = _proven(verdict, not f.ok, replacement)
    if verdict.spoiled:
        why = "; ".join(verdict.reasons)
        f.ok, f.error = False, f"{f.error}; {why}" if f.error else why
    if profile:
        profile.fold(profiled)
    judge.after(f"{arm} #{rep}", verdict)
    return BulkRun(
        arm=arm,
        rep=rep,
        seq=seq,
        flow=f,
        bottleneck=_bottleneck(watch.before, watch.after) or None,
        link=proof,
    )


class _QueueSampler(threading.Thread):
    """The emulator's down-direction queue every ``INTERVAL_S`` on the run's clock."""

    def __init__(self, tb: Testbed, link: Any, t0_ns: int) -> None:
        super().__init__(daemon=True)
        self.tb, self.link, self.t0_ns = tb, link, t0_ns
        self.samples: list[QueueSample] = []
        self.problem = ""
        self.halt = threading.Event()

    def run(self) -> None:
        k, begin = 0, time.time_ns()
        while not self.halt.is_set():
            try:
                c = self.link.shaper.counters(self.tb)
            except (QuicbedError, OSError, ValueError) as exc:  # the emulator went away
                self.problem = f"queue sampling stopped: {exc}"
                return
            d = _down(c)
            if c is None or "queue_bytes" not in d:
                self.problem = (
                    f"the {self.link.shaper.name} shaper reports no queue occupancy "
                    "(only quicbed-linkem does)"
                )
                return
            t = (time.time_ns() - self.t0_ns) / 1e9
            self.samples.append(
                QueueSample(
                    t_s=t,
                    bytes=int(d["queue_bytes"]),
                    packets=int(d["queue_packets"]),
                    drops=int(d.get("queue_drops", 0)),
                )
            )
            k += 1
            next_t = begin + int(k * INTERVAL_S * 1e9)
            self.halt.wait(max(0.0, (next_t - time.time_ns()) / 1e9))


def _compete(c: _Cell) -> CompeteResult:
    """``cfg.runs`` repetitions: every flow of ``transfer.flows`` (e.g. h3x1,h2x4) starts
    at one instant on the client's clock, flow i ``i x stagger_s`` later, and runs
    ``duration_s`` (the object again and again). A repetition the link or the host
    spoiled is kept and replaced by one more after the planned ones, up to
    ``judge.max_replaced`` (a spoiled replacement is owed too)."""
    cfg, rig, proven, t = c.cfg, c.rig, c.proven, c.cfg.transfer
    assert t is not None and t.duration_s is not None
    plan = [(arm, f"{arm}-{i}") for arm, n in t.flows for i in range(n)]
    runs: list[CompeteRun] = []
    for rep in range(cfg.runs):
        c.say(f"{len(plan)} flows", rep + 1, cfg.runs)
        runs.append(_compete_rep(c, plan, rep))
    while owes_replacement((x.link for x in runs), c.judge.max_replaced):
        rep = len(runs)
        c.say(f"{len(plan)} flows (in place of a spoiled repetition)", rep + 1, rep + 1)
        runs.append(_compete_rep(c, plan, rep, replacement=True))
    return CompeteResult(
        created=now(),
        condition=cfg.condition.model_dump(mode="json"),
        groups=list(t.flows),
        arms=[a.as_dict() for a in cfg.resolved_arms()],
        duration_s=t.duration_s,
        stagger_s=t.stagger_s,
        object=rig.path,
        runs=runs,
        queue_limit_bytes=cfg.condition.pipes()["down"].queue_bytes,
        receipt=proven.receipt.model_dump(mode="json"),
        versions=rig.versions(),
    )


@timelog.phase(timelog.COMPETE)
def _compete_rep(
    c: _Cell, plan: list[tuple[str, str]], rep: int, *, replacement: bool = False
) -> CompeteRun:
    """One repetition of a compete cell, its flows verified, proven as one load is."""
    rig, proven, profile, t = c.rig, c.proven, c.profile, c.cfg.transfer
    assert t is not None and t.duration_s is not None
    if c.fault:
        c.fault(plan[0][0], rep, rig.servers)
    offl = proven.link.offload_watch()
    offl.begin()
    r = _Rep(plan, rep, offsets=rig.log_sizes())
    lead_s = 1.0 + 0.15 * len(plan)  # time to spawn every client before the start
    t0_client = client_clock_ns(rig.tb) + int(lead_s * 1e9)
    # the controller's clock for the queue sampler (the same clock locally)
    zero_ns = time.time_ns() + int(lead_s * 1e9)
    sampler = _QueueSampler(rig.tb, proven.link, zero_ns)
    watch = c.judge.watch(rig.tb, proven, c.cfg.condition)
    watch.begin()
    sampler.start()
    for srv in rig.servers.values():
        srv.mark()
    net_mark, cpu_mark = c.net.read(), c.meter.begin()
    # one traced load per arm and repetition, every flow of the arm in it
    traced = {a: rig.traced.begin(a, rep) for a, _ in t.flows} if rig.traced else {}
    try:
        _spawn_clients(c, r, t0_client)
        profiled = _profile_clients(c, r)
        total = lead_s + t.stagger_s * len(plan) + t.duration_s + 60
        rig.wait_done(r.logs, r.procs, timeout=total)
        cpu = c.meter.end(cpu_mark)
        counters = c.net.since(net_mark)
        verdict = watch.end(own_cpu_ms=own_cpu_ms(rig.tb, list(cpu.values())))
        if profile:
            profile.halt(profiled)
        tcp = rig.server_tcp()
        evidence = _arms_evidence(rig, (a for a, _ in t.flows), offl)
        for lt in traced.values():  # as in _flow: after ss and evidence
            assert rig.traced is not None
            rig.traced.end(lt, zero_ns / 1e9)
    finally:
        sampler.halt.set()
        sampler.join(5)
    rcs = [p.wait(linger_s(rig.tb) + 10) for p in r.procs]
    if profile:
        profile.fold(profiled)
    flows = _compete_flows(c, r, rcs, tcp, evidence)
    run = compete_run(rep, flows, t.duration_s, sampler.samples, sampler.problem)
    c.judge.after(f"repetition #{rep}", verdict)
    return run.model_copy(
        update={
            "cpu": cpu,
            "counters": counters,
            "link": _proven(verdict, not all(f.ok for f in flows), replacement),
        }
    )


@dataclass
class _Rep:
    """One compete repetition's flows (``plan``: arm, flow name) and the clients spawned
    for them, in plan order: spawned, profiled, waited for and read back as one."""

    plan: list[tuple[str, str]]
    rep: int
    #: the QUIC servers' log sizes before the repetition: its flows' lines follow them
    offsets: dict[str, int]
    procs: list[Process] = field(default_factory=list)
    logs: list[RPath] = field(default_factory=list)


def _spawn_clients(c: _Cell, r: _Rep, t0_client_ns: int) -> None:
    """Every flow's client, each told to start at its own instant on the client's clock
    (flow i ``i x stagger_s`` after ``t0_client_ns``), so the flows start together."""
    t = c.cfg.transfer
    assert t is not None and t.duration_s is not None
    for i, (arm, flow) in enumerate(r.plan):
        p, log = c.rig.spawn(
            arm, f"{flow}-r{r.rep}", t.duration_s, t0_client_ns + int(i * t.stagger_s * 1e9)
        )
        r.procs.append(p)
        r.logs.append(log)


def _profile_clients(c: _Cell, r: _Rep) -> list[Any]:
    """perf on each arm's server and its just spawned clients (with ``--profile``): a
    spawn returns before its client has joined the arm's group."""
    if not c.profile:
        return []
    mine = {
        a: [p.pid for (b, _), p in zip(r.plan, r.procs, strict=True) if b == a] for a in c.cfg.arms
    }
    return [rec for a in c.cfg.arms for rec in c.profile.attach(a, {"client": mine[a]})]


def _arms_evidence(
    rig: _Rig, arms: Iterable[str], offl: offloads.Watch
) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Each arm's server evidence, with the interface offloads read back once for the
    repetition (_with_offloads reads them per flow): its flows ran together."""
    evidence = {a: rig.evidence(a) for a in arms}
    offl_facts, offl_reasons = offl.end()
    return {
        a: ({**facts, **offl_facts}, reasons + offl_reasons)
        for a, (facts, reasons) in evidence.items()
    }


def _compete_flows(
    c: _Cell,
    r: _Rep,
    rcs: list[int],
    tcp: dict[int, dict[str, Any]],
    evidence: dict[str, tuple[dict[str, Any], list[str]]],
) -> list[FlowResult]:
    """Each flow's result, named as planned (not by its client's per-repetition log),
    verified by its arm's evidence."""
    t = c.cfg.transfer
    assert t is not None
    rig = c.rig
    flows = []
    for i, ((arm, flow), log, rc) in enumerate(zip(r.plan, r.logs, rcs, strict=True)):
        recs = rig.records(log)
        final = next((x for x in recs if x.get("event") == "done"), {})
        quic = (
            _quic_wait(rig, arm, r.offsets[arm], port_of(final.get("local_addr")))
            if arm in r.offsets
            else None
        )
        f = rig.flow_result(arm, f"{flow}-r{r.rep}", recs, tcp, quic, i * t.stagger_s, rc)
        f = f.model_copy(update={"flow": flow})
        flows.append(_verified(f, evidence[arm], rig.by_name[arm]))
    return flows
