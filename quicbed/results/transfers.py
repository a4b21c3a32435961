"""Transfer cells' records and numbers: what a bulk or compete attempt stored, and
everything computed from it (summaries, comparisons, fairness, figures).

Pure: the report and ``quicbed verify`` read transfer cells through this module
without importing the runner (quicbed.run.bulk, which starts servers and clients).
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from quicbed.analysis.stats import DEFAULT_ALPHA, compare
from quicbed.errors import QuicbedError
from quicbed.link.model import LinkCondition
from quicbed.results.cpu import CpuUse
from quicbed.results.cpu import summary as cpu_summary
from quicbed.results.linkload import cell_line, is_replacement, shortfall
from quicbed.results.netcounters import RoleCounters
from quicbed.results.store import Store

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
    #: it advertised, ``tp_remote``: what the server did; quicbed.spec.tparams), and the
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
        qc = self.quic_client or {}
        sent, got = qc.get("packets_sent"), qc.get("packets_received")
        if not (sent and got):
            stats = self.server.get("stats") or {}
            sent, got = stats.get("recv"), stats.get("sent")
        return sent / got if sent and got else None

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
    #: computed from ``runs`` when read (bulk_summary), never stored
    summary: dict[str, ArmBulk] = Field(default_factory=dict)
    #: reference/candidate (the TCP arm first): ``goodput_bps`` and ``completion_s`` each
    #: a quicbed.analysis.stats.Comparison (the bootstrap interval in the metric's unit, not ms)
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
    #: computed from ``runs`` when read (compete_summary), never stored
    summary: dict[str, ArmCompete] = Field(default_factory=dict)
    jain_mean: float | None = None
    jain_sd: float | None = None
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


# --- numbers --------------------------------------------------------------------------
def ideal_goodput_bps(cond: LinkCondition) -> float | None:
    """The most application bytes per second the bottleneck carries for a TCP flow: its
    rate (which counts Ethernet frames, quicbed.link.model) times a full frame's TCP
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


def _mean(v: list[float]) -> float | None:
    return statistics.fmean(v) if v else None


def _sd(v: list[float]) -> float | None:
    return statistics.stdev(v) if len(v) > 1 else None


def counter_totals(items: list[dict[str, RoleCounters]]) -> dict[str, dict[str, int]]:
    """Per role, the flows' UDP receive-buffer errors, UDP receive errors and drops."""
    out: dict[str, dict[str, int]] = {"udp_rcvbuf_errors": {}, "udp_in_errors": {}, "drops": {}}
    for counters in items:
        for role, c in counters.items():
            for key, v in (
                ("udp_rcvbuf_errors", c.udp_rcvbuf_errors),
                ("udp_in_errors", c.udp_in_errors),
                ("drops", c.drops),
            ):
                out[key][role] = out[key].get(role, 0) + v
    return out


def bulk_summary(
    r: BulkResult,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    extra_pairs: list[tuple[str, str]] | None = None,
) -> BulkResult:
    """``r`` with its per-arm summary and its comparisons, from its runs alone (the
    report and verify call this on a stored record, so the numbers have one home).
    Compared: each arm against the TCP reference, and the spec's ``statistics.pairs``
    among the cell's arms (``quicbed.spec.arms.pairs``, as for page cells)."""
    summary: dict[str, ArmBulk] = {}
    cpu_items = r.cpu_items()
    for a in r.arms:
        ok = [x.flow for x in r.runs if x.arm == a["name"] and x.flow.ok]
        gp = [f.goodput_bps / 1e6 for f in ok if f.goodput_bps]
        rt = [float(f.retransmissions) for f in ok if f.retransmissions is not None]
        acks = [v for f in ok if (v := f.ack_ratio()) is not None]
        cpu = cpu_summary(cpu_items[a["name"]]) if cpu_items[a["name"]] else {}
        ce = [
            float((x.bottleneck or {})["ce_marked"])
            for x in r.runs
            if x.arm == a["name"] and x.flow.ok and "ce_marked" in (x.bottleneck or {})
        ]
        marking = bool(r.condition.get("ecn_threshold"))
        summary[a["name"]] = ArmBulk(
            arm=a["name"],
            ack_ratio_mean=_mean(acks),
            cpu_ms={k: v.get("total_ms") for k, v in cpu.items()},
            cpu_ms_per_mb={k: v.get("ms_per_mb") for k, v in cpu.items()},
            **counter_totals([f.counters for f in ok]),
            n=len(ok),
            goodput_mbit_mean=_mean(gp),
            goodput_mbit_sd=_sd(gp),
            goodput_mbit_median=statistics.median(gp) if gp else None,
            completion_s_mean=_mean([f.completion_s for f in ok if f.completion_s]),
            retransmissions_mean=_mean(rt),
            ce_marks_mean=_mean(ce) if marking else None,
            of_ideal=(statistics.fmean(gp) * 1e6 / r.ideal_goodput_bps)
            if gp and r.ideal_goodput_bps
            else None,
        )
    comparisons: dict[str, dict[str, Any]] = {}
    for ref, cand in _pairs(r.arms, extra_pairs):
        cmp: dict[str, Any] = {}
        for metric in ("completion_s", "goodput_bps"):
            vals = {
                n: [
                    float(getattr(x.flow, metric))
                    for x in r.runs
                    if x.arm == n and x.flow.ok and getattr(x.flow, metric)
                ]
                for n in (ref, cand)
            }
            cmp[metric] = compare(
                vals[ref],
                vals[cand],
                planned=r.reps,
                alpha=alpha,
                test=test,
                tcp_arm=ref,
                quic_arm=cand,
            ).model_dump()
        comparisons[f"{ref}/{cand}"] = cmp
    return r.model_copy(update={"summary": summary, "comparisons": comparisons})


def _pairs(
    arms: list[dict[str, Any]], extra: list[tuple[str, str]] | None
) -> list[tuple[str, str]]:
    """The page cells' pairs (``quicbed.spec.arms.pairs``) of a stored record's arms."""
    from quicbed.spec.arms import own_pairs, pairs

    return pairs(arms, own_pairs(extra, (a["name"] for a in arms)))


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


def compete_summary(
    r: CompeteResult,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    extra_pairs: list[tuple[str, str]] | None = None,
) -> CompeteResult:
    """``r`` with per-arm shares over its repetitions, Jain's index's mean, and per pair
    of arms the comparison of their flows' mean steady throughput per repetition (the
    report and verify call this on a stored record)."""
    counts = dict(r.groups)
    per_flow: dict[str, list[float]] = {a: [] for a in counts}
    shares: dict[str, list[float]] = {a: [] for a in counts}
    for run in r.runs:
        if not run.steady_bps or run.spoiled:
            continue
        for a in counts:
            mine = [
                run.steady_bps[f.flow] for f in run.flows if f.arm == a and f.flow in run.steady_bps
            ]
            if mine:
                per_flow[a].append(statistics.fmean(mine) / 1e6)
                shares[a].append(run.arm_shares.get(a, 0.0))
    total = sum(counts.values())
    acks: dict[str, list[float]] = {a: [] for a in counts}
    for run in r.runs:
        for f in run.flows:
            if f.ok and not run.spoiled and f.arm in acks and (v := f.ack_ratio()) is not None:
                acks[f.arm].append(v)
    summary = {
        a: ArmCompete(
            arm=a,
            ack_ratio_mean=_mean(acks[a]),
            n_flows=n,
            n=len(shares[a]),
            fair_share=n / total,
            share_mean=_mean(shares[a]),
            share_sd=_sd(shares[a]),
            per_flow_mbit_mean=_mean(per_flow[a]),
            per_flow_mbit_sd=_sd(per_flow[a]),
        )
        for a, n in counts.items()
    }
    jains = [run.jain for run in r.runs if run.jain is not None and not run.spoiled]
    comparisons = {}
    for ref, cand in _pairs(r.arms, extra_pairs):
        comparisons[f"{ref}/{cand}"] = {
            "per_flow_bps": compare(
                [v * 1e6 for v in per_flow[ref]],
                [v * 1e6 for v in per_flow[cand]],
                planned=len([x for x in r.runs if not x.replacement]),
                alpha=alpha,
                test=test,
                tcp_arm=ref,
                quic_arm=cand,
            ).model_dump()
        }
    return r.model_copy(
        update={
            "summary": summary,
            "jain_mean": _mean(jains),
            "jain_sd": _sd(jains),
            "comparisons": comparisons,
        }
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


def stored_transfer(
    store: Store,
    cell_id: str,
    attempt: int,
    *,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    extra_pairs: list[tuple[str, str]] | None = None,
) -> BulkResult | CompeteResult:
    """A transfer cell's record from the store, with its summary computed from its runs."""
    row = store.transfer(cell_id, attempt)
    if row is None:
        raise QuicbedError(f"cell {cell_id} attempt {attempt} has no transfer record")
    if row["kind"] == "bulk":
        return bulk_summary(BulkResult.model_validate(row["result"]), alpha, test, extra_pairs)
    return compete_summary(CompeteResult.model_validate(row["result"]), alpha, test, extra_pairs)


# --- figures --------------------------------------------------------------------------
_COLORS = {
    "tcp": ["#c0392b", "#e67e22", "#8e44ad", "#d35400", "#a93226", "#f39c12"],
    "udp": ["#1f77b4", "#17becf", "#2ca02c", "#1abc9c", "#2471a3", "#27ae60"],
}


def flow_colors(flows: list[FlowResult], arms: list[dict[str, Any]]) -> dict[str, str]:
    transport = {a["name"]: a["transport"] for a in arms}
    seen: dict[str, int] = {}
    out = {}
    for f in flows:
        t = transport.get(f.arm, "tcp")
        i = seen.get(t, 0)
        seen[t] = i + 1
        out[f.flow] = _COLORS[t][i % len(_COLORS[t])]
    return out


def plot_compete(r: CompeteResult, run: CompeteRun, base: Path) -> list[Path]:
    """Throughput of each flow over time (100 ms bins), one line per flow, as the long
    look at QUIC drew its fairness runs; under it, the bottleneck queue's occupancy.
    One repetition (``run``) of ``r``."""
    import matplotlib.pyplot as plt

    from quicbed.report.plots import save_figure

    rows = 2 if run.queue else 1
    fig, axes = plt.subplots(
        rows,
        1,
        figsize=(8, 4.2 if rows == 1 else 6),
        sharex=True,
        squeeze=False,
        height_ratios=[3, 1.3][:rows],
    )
    ax = axes[0][0]
    colors = flow_colors(run.flows, r.arms)
    for f in run.flows:
        tl = f.timeline()
        share = run.shares.get(f.flow)
        label = f.flow + (f" ({share * 100:.0f} %)" if share is not None else "")
        ax.plot(
            [t for t, _ in tl], [v / 1e6 for _, v in tl], lw=1.1, color=colors[f.flow], label=label
        )
    if r.condition.get("rate_mbit"):
        ax.axhline(r.condition["rate_mbit"], color="grey", lw=0.8, ls=":", label="link rate")
    if run.steady_to_s > run.steady_from_s:
        ax.axvspan(run.steady_from_s, run.steady_to_s, color="0.93", zorder=0)
    ax.set_ylabel("throughput (Mbit/s)")
    jain_s = f", Jain {run.jain:.3f}" if run.jain is not None else ""
    c = r.condition
    who = " vs ".join(f"{n} {a}" for a, n in r.groups)
    rtt = c.get("rtt_ms")
    if rtt is None:  # a condition of one-way delays: their sum
        rtt = (c.get("delay_down_ms") or 0) + (c.get("delay_up_ms") or 0)
    ax.set_title(
        f"{who}: {c.get('rate_mbit')} Mbit/s, {rtt} ms, queue "
        f"{c.get('queue')}, repetition {run.rep}{jain_s}",
        fontsize=10,
    )
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    if run.queue:
        qa = axes[1][0]
        qs = [q for q in run.queue if q.t_s >= 0]
        qa.plot([q.t_s for q in qs], [q.bytes / 1e3 for q in qs], color="black", lw=0.9)
        if r.queue_limit_bytes:
            qa.axhline(r.queue_limit_bytes / 1e3, color="grey", lw=0.8, ls=":")
        qa.set_ylabel("queue (kB)")
        qa.set_ylim(bottom=0)
        qa.grid(alpha=0.3)
    axes[-1][0].set_xlabel("time (s)")
    fig.tight_layout()
    return save_figure(fig, base)


def plot_bulk(r: BulkResult, base: Path) -> list[Path]:
    """Each run's throughput over time (100 ms bins), one line per run, per arm."""
    import matplotlib.pyplot as plt

    from quicbed.report.plots import save_figure

    fig, ax = plt.subplots(figsize=(8, 4))
    transport = {a["name"]: a["transport"] for a in r.arms}
    first: set[str] = set()
    for run in r.runs:
        tl = run.flow.timeline(offset=False)
        color = _COLORS[transport.get(run.arm, "tcp")][sorted(transport).index(run.arm) % 6]
        ax.plot(
            [t for t, _ in tl],
            [v / 1e6 for _, v in tl],
            lw=0.8,
            alpha=0.7,
            color=color,
            label=None if run.arm in first else run.arm,
        )
        first.add(run.arm)
    if r.ideal_goodput_bps:
        ax.axhline(r.ideal_goodput_bps / 1e6, color="grey", lw=0.8, ls=":", label="ideal goodput")
    c = r.condition
    delay = (
        f"{c.get('rtt_ms')} ms"
        if c.get("rtt_ms") is not None
        else f"{c.get('delay_down_ms') or 0:g} ms down, {c.get('delay_up_ms') or 0:g} ms up"
    )
    ax.set_title(
        f"bulk {r.object}: {c.get('rate_mbit')} Mbit/s, {delay}, queue {c.get('queue')}",
        fontsize=10,
    )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, base)
