"""A row of the report's transfer table: one transfer cell (its latest attempt), one arm
and one comparison it is the candidate of, as quicbed.report.cellrow's CellRow is a page
cell's and pair's.

One definition for what ``transfers.csv`` holds (:data:`COLUMNS`: the row's fields, in
that order) and what the HTML table shows, built from the typed cell (TransferCell),
its arms' summaries (ArmBulk, ArmCompete) and its comparisons (Comparison), so a column
is a field the type checker sees, not a key that a dict may or may not have.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from quicbed.analysis.stats import Comparison
from quicbed.report.transfercell import TransferCell
from quicbed.results.transfers import ArmBulk, ArmCompete
from quicbed.settings import sockopts


@dataclass(frozen=True, kw_only=True)
class TransferRow:
    """One row of transfers.csv; see the module's docstring. A column a cell's kind does
    not have (a compete cell's goodput, a bulk cell's share), or an arm without a summary
    (an attempt that stored no record), is None: an empty cell of the CSV."""

    # the cell, its link and what it transferred
    kind: str
    scenario: str
    cell_id: str
    attempt: int
    status: str
    problem: str
    receipt_passed: bool | None
    rate_mbit: float | None
    rtt_ms: float
    loss_pct: float
    loss_down_pct: float | None
    queue: str
    queue_warning: str | None
    object: str
    duration_s: float | None
    flows: str
    stagger_s: float
    runs: int
    # the arm
    arm: str
    stack: str
    cc: str | None
    #: the arm's host and socket knobs (quicbed.settings.sockopts), "key=value" joined by ";"
    knobs: str
    #: the cell's interface offloads (quicbed.roles.offloads), "gro=on,gso=on"; "" unset
    offloads: str
    n: int | None = None
    # bulk
    goodput_mbit_mean: float | None = None
    goodput_mbit_sd: float | None = None
    of_ideal: float | None = None
    completion_s_mean: float | None = None
    retransmissions_mean: float | None = None
    ce_marks_mean: float | None = None
    #: QUIC: packets the client sent per packet it received
    ack_ratio_mean: float | None = None
    # bulk: CPU per role (mean ms per flow, ms per MB), the endpoints' counters (totals)
    cpu_server_ms: float | None = None
    cpu_client_ms: float | None = None
    cpu_bridge_ms: float | None = None
    cpu_server_ms_per_mb: float | None = None
    cpu_client_ms_per_mb: float | None = None
    cpu_bridge_ms_per_mb: float | None = None
    udp_rcvbuf_errors_server: int | None = None
    udp_rcvbuf_errors_client: int | None = None
    udp_in_errors_server: int | None = None
    udp_in_errors_client: int | None = None
    drops_server: int | None = None
    drops_client: int | None = None
    drops_bridge: int | None = None
    # compete
    fair_share: float | None = None
    share_mean: float | None = None
    share_sd: float | None = None
    per_flow_mbit_mean: float | None = None
    per_flow_mbit_sd: float | None = None
    jain_mean: float | None = None
    jain_sd: float | None = None
    # against the reference arm (the first TCP arm), or a spec's pair: goodput (bulk),
    # per-flow throughput (compete); None on an arm's row without a comparison
    reference: str | None = None
    metric: str | None = None
    pct_diff: float | None = None
    p: float | None = None
    welch_p: float | None = None
    mannwhitney_p: float | None = None
    #: p below the report's alpha (not Comparison.significant, which also asks testable)
    significant: bool | None = None
    # columns added after packages were first built go last, so that a package's own
    # transfers.csv is a prefix of a rebuilt one (quicbed.package.verify.csv_diff)
    #: QUIC bulk: packets the client and the server sent per flow, mean
    client_packets_mean: float | None = None
    server_packets_mean: float | None = None

    @classmethod
    def arm_of(cls, cell: TransferCell, arm: str) -> TransferRow:
        """The arm's row without a comparison: the cell, the arm's settings (its own CC,
        else the cell's) and its summary's columns."""
        settings = cell.arm_settings(arm)
        row = cls(
            kind=cell.kind,
            scenario=cell.scenario,
            cell_id=cell.cell_id,
            attempt=cell.attempt,
            status=cell.status,
            problem=cell.problem,
            receipt_passed=cell.receipt_passed,
            rate_mbit=cell.rate_mbit,
            rtt_ms=cell.rtt_ms,
            loss_pct=cell.loss_pct,
            loss_down_pct=cell.loss_down_pct,
            queue=cell.queue,
            queue_warning=cell.queue_warning,
            object=cell.object,
            duration_s=cell.duration_s,
            flows=cell.flows,
            stagger_s=cell.stagger_s,
            runs=cell.runs,
            arm=arm,
            stack=settings.get("stack") or "",
            cc=settings.get("cc") or cell.cc,
            knobs=sockopts.describe(settings),
            offloads=cell.offloads,
            jain_mean=cell.jain_mean,
            jain_sd=cell.jain_sd,
        )
        s = cell.summary.get(arm)
        if isinstance(s, ArmBulk):
            return row.bulk(s)
        if isinstance(s, ArmCompete):
            return row.compete(s)
        return row

    def bulk(self, s: ArmBulk) -> TransferRow:
        """With a bulk arm's summary, its per-role figures one column per role."""
        return replace(
            self,
            n=s.n,
            goodput_mbit_mean=s.goodput_mbit_mean,
            goodput_mbit_sd=s.goodput_mbit_sd,
            of_ideal=s.of_ideal,
            completion_s_mean=s.completion_s_mean,
            retransmissions_mean=s.retransmissions_mean,
            ce_marks_mean=s.ce_marks_mean,
            ack_ratio_mean=s.ack_ratio_mean,
            client_packets_mean=s.client_packets_mean,
            server_packets_mean=s.server_packets_mean,
            cpu_server_ms=s.cpu_ms.get("server"),
            cpu_client_ms=s.cpu_ms.get("client"),
            cpu_bridge_ms=s.cpu_ms.get("bridge"),
            cpu_server_ms_per_mb=s.cpu_ms_per_mb.get("server"),
            cpu_client_ms_per_mb=s.cpu_ms_per_mb.get("client"),
            cpu_bridge_ms_per_mb=s.cpu_ms_per_mb.get("bridge"),
            udp_rcvbuf_errors_server=s.udp_rcvbuf_errors.get("server"),
            udp_rcvbuf_errors_client=s.udp_rcvbuf_errors.get("client"),
            udp_in_errors_server=s.udp_in_errors.get("server"),
            udp_in_errors_client=s.udp_in_errors.get("client"),
            drops_server=s.drops.get("server"),
            drops_client=s.drops.get("client"),
            drops_bridge=s.drops.get("bridge"),
        )

    def compete(self, s: ArmCompete) -> TransferRow:
        """With a compete arm's summary: its share of the bottleneck and per-flow rate."""
        return replace(
            self,
            n=s.n,
            ack_ratio_mean=s.ack_ratio_mean,
            fair_share=s.fair_share,
            share_mean=s.share_mean,
            share_sd=s.share_sd,
            per_flow_mbit_mean=s.per_flow_mbit_mean,
            per_flow_mbit_sd=s.per_flow_mbit_sd,
        )

    def against(self, reference: str, metric: str, c: Comparison, alpha: float) -> TransferRow:
        """The arm's row for one comparison it is the candidate of."""
        return replace(
            self,
            reference=reference,
            metric=metric,
            pct_diff=c.pct_diff,
            p=c.p,
            welch_p=c.welch_p,
            mannwhitney_p=c.mannwhitney_p,
            significant=c.p is not None and c.p < alpha,
        )

    def columns(self) -> dict[str, Any]:
        """The row as transfers.csv holds it."""
        return {k: getattr(self, k) for k in COLUMNS}


#: the columns of transfers.csv, in order: TransferRow's fields
COLUMNS = [f.name for f in fields(TransferRow)]


def transfer_rows(cell: TransferCell, alpha: float) -> list[TransferRow]:
    """One row per arm and comparison it is the candidate of (against the reference,
    then the spec's pairs), as table.csv has one per cell and pair; an arm compared
    with nothing (the reference) has one row without a comparison. A bulk pair's row
    compares goodput, a compete pair's the per-flow throughput."""
    out = []
    for arm in cell.arms:
        row = TransferRow.arm_of(cell, arm)
        mine = [
            (pair.split("/")[0], metrics)
            for pair, metrics in cell.comparisons.items()
            if pair.split("/")[1] == arm
        ]
        for ref, metrics in mine:
            metric = "goodput_bps" if "goodput_bps" in metrics else "per_flow_bps"
            out.append(row.against(ref, metric, metrics[metric], alpha))
        if not mine:
            out.append(row)
    return out
