"""Transfer cells' records: what a bulk or compete attempt stored, and the numbers
made when it is recorded (a compete repetition's steady window, shares and Jain's
index, a link's ideal goodput), which the runner (quicbed.run.bulk) computes as it
measures and so must find at or below its own level.

What is read from a stored record later has its own homes: the summaries and
comparisons in quicbed.analysis.transfers, the figures in quicbed.report.transferplots.
Pure: the report and ``quicbed verify`` read transfer cells through this module
without importing the runner (quicbed.run.bulk, which starts servers and clients).
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel, Field

from quicbed.model.link import LinkCondition
from quicbed.results.cpuuse import CpuUse
from quicbed.results.linkload import cell_line, is_replacement, shortfall
from quicbed.results.netcounters import RoleCounters

#: the steady part of a compete run starts this long after the last flow started,
#: or after this fraction of the duration, whichever is later
STEADY_MIN_S = 2.0
STEADY_FRACTION = 0.2
#: a TCP segment's payload in a 1514-byte frame (1500 - 20 IP - 32 TCP with timestamps)
TCP_PAYLOAD = 1448
FRAME = 1514


# --- records --------------------------------------------------------------------------
class FlowResult(BaseModel):
    """One flow as its client and the server side saw it."""

    flow: str
    arm: str
    protocol: str  # h2 | h3
    ok: bool
    error: str | None = None
    http_proto: str | None = None
    bytes: int = 0
    completion_s: float | None = None
    goodput_bps: float | None = None
    connect_s: float | None = None
    ttfb_s: float | None = None
    #: when it started, seconds after the run's common start (its stagger + lag)
    start_offset_s: float = 0.0
    start_lag_s: float | None = None
    #: (t_s since the flow's own start, bytes received so far), every 100 ms
    samples: list[tuple[float, int]] = Field(default_factory=list)
    #: retransmitted segments (TCP) or packets (QUIC) by the server; None: not known
    retransmissions: int | None = None
    retrans_bytes: int | None = None
    retrans_source: str = ""
    #: the server side's transport facts: TCP from ``ss -ti``, QUIC from its log
    server: dict[str, Any] = Field(default_factory=dict)
    quic_client: dict[str, Any] | None = None
    #: a QUIC flow's transport parameters as its client recorded them (``tp_local``: what
    #: it advertised, ``tp_remote``: what the server did; quicbed.settings.tparams), and the
    #: receive windows it ran (``windows``, ``flow_control_autotune``)
    client_transport: dict[str, Any] | None = None
    local_addr: str | None = None
    #: what the arm's server and its kernel showed of the arm's settings during the flow
    #: (its CC, parameters, the TCP options of its handshake: WebServer.evidence);
    #: a flow whose evidence does not match is not ok, the reason its error
    evidence: dict[str, Any] = Field(default_factory=dict)
    #: CPU per role over the flow (bulk; a compete run keeps its arms' in CompeteRun.cpu);
    #: None in records made before quicbed measured it
    cpu: CpuUse | None = None
    #: each role's UDP errors and interface drops over the flow (bulk; a compete run
    #: keeps them for all its flows in CompeteRun.counters)
    counters: dict[str, RoleCounters] = Field(default_factory=dict)
    #: its transport trace (a cell traced at light or full; quicbed.results.flowtraces): the
    #: load's files and what is missing, the flow's connection in them, ``t0_ms`` and the
    #: facts derived from its rows; None: not traced
    trace: dict[str, Any] | None = None

    def ack_ratio(self) -> float | None:
        """A QUIC flow's packets its client sent per packet it received: the client's own
        counters (quicbed-bulk), else the server's (received per sent); None for TCP."""
        sent, got = self.packets()
        return sent / got if sent and got else None

    def packets(self) -> tuple[int | None, int | None]:
        """A QUIC flow's packets sent by its client and by its server: the client's own
        counters (quicbed-bulk), else the server's log (received, sent); None for TCP or
        where neither counted (the study's ethtool counts per interface, per download)."""
        qc = self.quic_client or {}
        sent, got = qc.get("packets_sent"), qc.get("packets_received")
        if not (sent and got):
            stats = self.server.get("stats") or {}
            sent, got = stats.get("recv"), stats.get("sent")
        return (int(sent) if sent else None, int(got) if got else None)

    def timeline(self, offset: bool = True) -> list[tuple[float, float]]:
        """(t_s, bit/s over the interval ending at t_s); t on the run's clock if ``offset``."""
        out, pt, pb = [], 0.0, 0
        for t, b in self.samples:
            if t > pt:
                out.append((t + (self.start_offset_s if offset else 0.0), (b - pb) * 8 / (t - pt)))
            pt, pb = t, b
        return out


class BulkRun(BaseModel):
    arm: str
    rep: int
    seq: int
    flow: FlowResult
    #: the emulator's down-direction counters over this run: drops, peak queue
    bottleneck: dict[str, Any] | None = None
    #: what the link and the host did during the flow (quicbed.link.loadproof, as a page
    #: load keeps it; quicbed.results.linkload reads it): a flow it calls spoiled is not
    #: ok, its reasons the flow's error, and is replaced. {} in records before it
    link: dict[str, Any] = Field(default_factory=dict)

    @property
    def replacement(self) -> bool:
        """Measured after the schedule, in place of a spoiled flow."""
        return is_replacement(self.link)


class ArmBulk(BaseModel):
    arm: str
    n: int
    goodput_mbit_mean: float | None
    goodput_mbit_sd: float | None
    goodput_mbit_median: float | None
    completion_s_mean: float | None
    retransmissions_mean: float | None
    #: the mean goodput against the link's ideal (:func:`ideal_goodput_bps`)
    of_ideal: float | None
    #: QUIC: packets the client sent per packet it received (FlowResult.ack_ratio), mean
    ack_ratio_mean: float | None = None
    #: QUIC: packets the client and the server sent per flow (FlowResult.packets), mean
    client_packets_mean: float | None = None
    server_packets_mean: float | None = None
    #: per role: mean CPU ms per flow, and all flows' CPU ms per MB they carried
    cpu_ms: dict[str, float | None] = Field(default_factory=dict)
    cpu_ms_per_mb: dict[str, float | None] = Field(default_factory=dict)
    #: per role, over the flows: UDP datagrams dropped for a full receive buffer, UDP
    #: receive errors (those included), frames the role's interfaces dropped
    udp_rcvbuf_errors: dict[str, int] = Field(default_factory=dict)
    udp_in_errors: dict[str, int] = Field(default_factory=dict)
    drops: dict[str, int] = Field(default_factory=dict)
    #: the packets the emulator marked CE per run, where the link marks ECN (its
    #: down-direction counter over the run; None: no marking link, or older records)
    ce_marks_mean: float | None = None


class BulkResult(BaseModel):
    kind: str = "bulk"
    created: str
    condition: dict[str, Any]
    arms: list[dict[str, Any]]
    object: str
    object_bytes: int
    duration_s: float | None
    reps: int
    ideal_goodput_bps: float | None
    runs: list[BulkRun]
    #: computed from ``runs`` when read (quicbed.analysis.transfers.bulk_summary), never stored
    summary: dict[str, ArmBulk] = Field(default_factory=dict)
    #: reference/candidate (the TCP arm first): ``goodput_bps`` and ``completion_s`` each
    #: a quicbed.analysis.stats.Comparison (the bootstrap interval in the metric's unit, not
    #: ms); stored empty, typed where computed (quicbed.analysis.transfers.BulkSummary)
    comparisons: dict[str, dict[str, Any]] = Field(default_factory=dict)
    receipt: dict[str, Any] | None = None
    versions: dict[str, Any] = Field(default_factory=dict)

    def cpu_items(self) -> dict[str, list[tuple[CpuUse, int | None]]]:
        """Per arm, each verified flow's CPU per role and the bytes it carried."""
        out: dict[str, list[tuple[CpuUse, int | None]]] = {a["name"]: [] for a in self.arms}
        for run in self.runs:
            if run.flow.ok and run.flow.cpu is not None and run.arm in out:
                out[run.arm].append((run.flow.cpu, run.flow.bytes))
        return out


class QueueSample(BaseModel):
    t_s: float
    bytes: int
    packets: int
    drops: int


class CompeteRun(BaseModel):
    """One repetition: every flow started together (or staggered), run to the end."""

    rep: int
    flows: list[FlowResult]
    steady_from_s: float
    steady_to_s: float
    #: each flow's share of the bytes all flows received in the steady part
    shares: dict[str, float]
    arm_shares: dict[str, float]
    #: each flow's mean throughput in the steady part (bit/s)
    steady_bps: dict[str, float]
    jain: float | None
    #: the bottleneck's queue (server to client) every ~100 ms; empty if the shaper
    #: cannot say (only the userspace emulator reports its occupancy)
    queue: list[QueueSample]
    queue_note: str = ""
    #: CPU per role over the repetition, per arm (all its flows' clients, its server)
    cpu: dict[str, CpuUse] = Field(default_factory=dict)
    #: each role's UDP errors and interface drops over the repetition
    counters: dict[str, RoleCounters] = Field(default_factory=dict)
    #: what the link and the host did during the repetition, all its flows at once
    #: (quicbed.link.loadproof): a spoiled repetition is kept, counts in no summary, and
    #: is replaced by one more at the cell's end. {} in records before it
    link: dict[str, Any] = Field(default_factory=dict)

    @property
    def spoiled(self) -> bool:
        return bool(self.link.get("spoiled"))

    @property
    def replacement(self) -> bool:
        """Measured after the planned repetitions, in place of a spoiled one."""
        return is_replacement(self.link)


class ArmCompete(BaseModel):
    arm: str
    n_flows: int
    #: repetitions with a steady part
    n: int
    #: the arm's flows' share of the bottleneck if every flow got the same
    fair_share: float
    share_mean: float | None
    share_sd: float | None
    per_flow_mbit_mean: float | None
    per_flow_mbit_sd: float | None
    #: QUIC: packets the client sent per packet it received, mean over the arm's flows
    ack_ratio_mean: float | None = None


class CompeteResult(BaseModel):
    kind: str = "compete"
    created: str
    condition: dict[str, Any]
    groups: list[tuple[str, int]]
    arms: list[dict[str, Any]]
    duration_s: float
    stagger_s: float
    object: str
    runs: list[CompeteRun]
    queue_limit_bytes: int | None = None
    #: computed from ``runs`` when read (quicbed.analysis.transfers.compete_summary), never
    #: stored
    summary: dict[str, ArmCompete] = Field(default_factory=dict)
    jain_mean: float | None = None
    jain_sd: float | None = None
    #: per pair, ``per_flow_bps``: stored empty, typed where computed
    #: (quicbed.analysis.transfers.CompeteSummary)
    comparisons: dict[str, dict[str, Any]] = Field(default_factory=dict)
    receipt: dict[str, Any] | None = None
    versions: dict[str, Any] = Field(default_factory=dict)

    def cpu_items(self) -> dict[str, list[tuple[CpuUse, int | None]]]:
        """Per arm, each repetition's CPU per role (all its flows at once) and the bytes
        its flows carried; a repetition counts where all the arm's flows were verified."""
        out: dict[str, list[tuple[CpuUse, int | None]]] = {a["name"]: [] for a in self.arms}
        for run in self.runs:
            if run.spoiled:
                continue
            for arm, use in run.cpu.items():
                flows = [f for f in run.flows if f.arm == arm]
                if arm in out and flows and all(f.ok for f in flows):
                    out[arm].append((use, sum(f.bytes for f in flows)))
        return out


# --- numbers made at record time --------------------------------------------------------
def ideal_goodput_bps(cond: LinkCondition) -> float | None:
    """The most application bytes per second the bottleneck carries for a TCP flow: its
    rate (which counts Ethernet frames, quicbed.model.link) times a full frame's TCP
    payload share (1448 of 1514 bytes). TLS records cost another ~0.1 %, counted
    against the flow. None for an unlimited link."""
    if cond.rate_mbit is None:
        return None
    rate = cond.rate_mbit * 1e6
    return rate * (TCP_PAYLOAD if cond.count == "ethernet" else TCP_PAYLOAD + 14) / FRAME


def jain(values: list[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal, 1/n = one takes all."""
    sq = sum(v * v for v in values)
    if not values or sq == 0:
        return None
    return sum(values) ** 2 / (len(values) * sq)


def bytes_at(f: FlowResult, t: float) -> float:
    """Bytes ``f`` had received at time ``t`` of the run's clock (linear between samples)."""
    pts = [(f.start_offset_s, 0.0)] + [(f.start_offset_s + s, float(b)) for s, b in f.samples]
    if t <= pts[0][0]:
        return 0.0
    for (t0, b0), (t1, b1) in itertools.pairwise(pts):
        if t <= t1:
            return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else b1
    return pts[-1][1]


def steady_window(flows: list[FlowResult], duration_s: float) -> tuple[float, float]:
    """From the later of 2 s and 20 % of the duration after the last flow started, to
    the end of the first flow to end (all flows present throughout)."""
    last_start = max(f.start_offset_s for f in flows)
    start = last_start + max(STEADY_MIN_S, STEADY_FRACTION * duration_s)
    ends = [f.start_offset_s + (f.samples[-1][0] if f.samples else 0.0) for f in flows]
    return start, min(ends)


def compete_run(
    rep: int,
    flows: list[FlowResult],
    duration_s: float,
    queue: list[QueueSample],
    queue_note: str = "",
) -> CompeteRun:
    """One repetition's numbers from its flows: the steady window, each flow's mean
    throughput and share in it, the arms' shares, Jain's index."""
    lo, hi = steady_window(flows, duration_s)
    steady: dict[str, float] = {}
    if hi > lo and all(f.ok for f in flows):
        for f in flows:
            steady[f.flow] = (bytes_at(f, hi) - bytes_at(f, lo)) * 8 / (hi - lo)
    total = sum(steady.values())
    shares = {k: v / total for k, v in steady.items()} if total > 0 else {}
    arm_shares: dict[str, float] = {}
    for f in flows:
        if f.flow in shares:
            arm_shares[f.arm] = arm_shares.get(f.arm, 0.0) + shares[f.flow]
    return CompeteRun(
        rep=rep,
        flows=flows,
        steady_from_s=lo,
        steady_to_s=hi,
        shares=shares,
        arm_shares=arm_shares,
        steady_bps=steady,
        jain=jain(list(steady.values())) if steady else None,
        queue=queue,
        queue_note=queue_note,
    )


def link_line(r: BulkResult | CompeteResult, waited_s: float | None) -> str | None:
    """What the link and the host did during a transfer attempt's flows (bulk) or
    repetitions (compete), in the page cells' words (quicbed.results.linkload)."""
    if isinstance(r, BulkResult):
        flows = [(x.arm, x.flow.ok, x.link) for x in r.runs]
        return cell_line([p for _, _, p in flows], waited_s, shortfall(flows, r.reps), "flows")
    planned = len([x for x in r.runs if not x.replacement])
    reps = [("the cell", bool(x.steady_bps) and not x.spoiled, x.link) for x in r.runs]
    return cell_line([p for _, _, p in reps], waited_s, shortfall(reps, planned), "repetitions")
