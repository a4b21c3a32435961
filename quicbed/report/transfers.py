"""The report's transfer cells (bulk, compete): their table, figures and statistics.

A transfer cell's numbers are computed from its stored record (quicbed.analysis.transfers'
bulk_summary and compete_summary, the same functions ``quicbed bulk``/``compete``
print from), never kept beside it, so a package's verify recomputes them the same way.
``transfers.csv`` has one row per cell, arm and comparison, ``transfers.json`` the summaries and
comparisons; each bulk cell has a throughput figure, each compete repetition its
flows' timelines and the queue.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from quicbed.analysis.transfers import stored_transfer
from quicbed.figsave import save_figure
from quicbed.model.link import LinkCondition
from quicbed.report import axes, windows
from quicbed.report.transfercell import TransferCell
from quicbed.report.transferplots import plot_bulk, plot_compete
from quicbed.results.store import Store
from quicbed.results.transfers import BulkResult, CompeteResult, link_line
from quicbed.roles import ROLES
from quicbed.settings import sockopts

FILE = "transfers.csv"
COLUMNS = [
    "kind",
    "scenario",
    "cell_id",
    "attempt",
    "status",
    "problem",
    "receipt_passed",
    "rate_mbit",
    "rtt_ms",
    "loss_pct",
    "loss_down_pct",
    "queue",
    "queue_warning",
    "object",
    "duration_s",
    "flows",
    "stagger_s",
    "runs",
    "arm",
    "stack",
    "cc",
    # the arm's host and socket knobs (quicbed.settings.sockopts), "key=value" joined by ";"
    "knobs",
    # the cell's interface offloads (quicbed.roles.offloads), "gro=on,gso=on"; "" unset
    "offloads",
    "n",
    # bulk
    "goodput_mbit_mean",
    "goodput_mbit_sd",
    "of_ideal",
    "completion_s_mean",
    "retransmissions_mean",
    "ce_marks_mean",
    # QUIC: packets the client sent per packet it received
    "ack_ratio_mean",
    # bulk: CPU per role (mean ms per flow, ms per MB), the endpoints' counters (totals)
    "cpu_server_ms",
    "cpu_client_ms",
    "cpu_bridge_ms",
    "cpu_server_ms_per_mb",
    "cpu_client_ms_per_mb",
    "cpu_bridge_ms_per_mb",
    "udp_rcvbuf_errors_server",
    "udp_rcvbuf_errors_client",
    "udp_in_errors_server",
    "udp_in_errors_client",
    "drops_server",
    "drops_client",
    "drops_bridge",
    # compete
    "fair_share",
    "share_mean",
    "share_sd",
    "per_flow_mbit_mean",
    "per_flow_mbit_sd",
    "jain_mean",
    "jain_sd",
    # against the reference arm (the first TCP arm): goodput (bulk), per-flow
    # throughput (compete)
    "reference",
    "metric",
    "pct_diff",
    "p",
    "welch_p",
    "mannwhitney_p",
    "significant",
]


#: the TCP-options study's speed-up bins (its table 2): the ratio of a configuration's
#: throughput to the reference configuration's, lower edge inclusive
SPEEDUP_BINS: tuple[tuple[float, float, str], ...] = (
    (0.0, 0.7, "< 0.7"),
    (0.7, 0.9, "0.7-0.9"),
    (0.9, 1.0, "0.9-1.0"),
    (1.0, 1.1, "1.0-1.1"),
    (1.1, 1.3, "1.1-1.3"),
    (1.3, 1.5, "1.3-1.5"),
    (1.5, 2.0, "1.5-2"),
    (2.0, math.inf, "> 2"),
)
SPEEDUP_FILE = "speedups.csv"


@dataclass
class TransferSection:
    rows: list[dict[str, Any]] = field(default_factory=list)
    cells: list[TransferCell] = field(default_factory=list)
    #: (title, [png, svg], what it shows): the report makes them its figures
    drawn: list[tuple[str, list[Path], dict[str, Any]]] = field(default_factory=list)
    #: each bulk scenario's goodput against the spec's ``speedup_against`` scenario
    #: (:func:`speedups`), and that scenario's name
    speedups: list[dict[str, Any]] = field(default_factory=list)
    speedup_reference: str | None = None


def is_transfer(config: dict[str, Any]) -> bool:
    return bool(config.get("kind", "page") != "page")


def build(
    root: Path,
    out: Path,
    alpha: float,
    test: str,
    pairs: list[tuple[str, str]] | None = None,
    speedup_against: str | None = None,
) -> TransferSection:
    """Every transfer cell's latest attempt: rows, per-cell summaries, figures (in
    ``out/figures``), ``out/transfers.csv`` and ``out/transfers.json``; with
    ``speedup_against``, the speed-ups against that scenario (``out/speedups.csv``)."""
    sec = TransferSection(speedup_reference=speedup_against)
    goodputs: list[Goodputs] = []
    store = Store.open_readonly(root)
    try:
        scenarios = store.cell_scenarios()
        latest = store.latest_attempts()
        for cid, cfg in store.cell_configs().items():
            if not is_transfer(cfg) or cid not in latest:
                continue
            att = latest[cid]
            cell = TransferCell.stored(cfg, cid, att, (scenarios.get(cid) or ["cells"])[0])
            if store.transfer(cid, att.attempt) is not None:
                r = stored_transfer(
                    store, cid, att.attempt, alpha=alpha, test=test, extra_pairs=pairs
                )
                cell.summary = {k: v.model_dump() for k, v in r.summary.items()}
                cell.link_line = link_line(r, att.waited_s)
                cell.comparisons = r.comparisons
                if isinstance(r, CompeteResult):
                    cell.jain_mean, cell.jain_sd = r.jain_mean, r.jain_sd
                else:
                    for arm in cell.arms:
                        got = {
                            x.rep: x.flow.goodput_bps
                            for x in r.runs
                            if x.arm == arm and x.flow.ok and x.flow.goodput_bps
                        }
                        for sc in scenarios.get(cid) or ["cells"]:
                            goodputs.append(Goodputs(sc, cell.condition, cell.object, arm, got))
                cell.figures = _figures(r, cid, out, sec, root)
            sec.cells.append(cell)
            sec.rows += _rows(cell, alpha)
    finally:
        store.close()

    sec.drawn += axes.figures(sec.cells, out)
    if sec.cells:
        with open(out / FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
            w.writeheader()
            w.writerows(sec.rows)
        public = [c.public() for c in sec.cells]
        (out / "transfers.json").write_text(json.dumps(public, indent=1, sort_keys=True) + "\n")
    if speedup_against is not None:
        sec.drawn += goodput_cdfs(goodputs, out / "figures")
        sec.speedups = speedups(goodputs, speedup_against)
        if sec.speedups:
            with open(out / SPEEDUP_FILE, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(sec.speedups[0]))
                w.writeheader()
                w.writerows(sec.speedups)
    return sec


class Goodputs(NamedTuple):
    """One bulk arm's goodput per repetition in one cell, by what it is compared across:
    the scenario, under one link and object."""

    scenario: str
    condition: LinkCondition
    object: str
    arm: str
    #: bit/s per repetition
    got: dict[int, float]

    def where(self) -> tuple[str, str, str]:
        """The link, object and arm: repetitions compare only within one such group."""
        return (self.condition.model_dump_json(), self.object, self.arm)


def goodput_cdfs(
    goodputs: list[Goodputs], figs: Path
) -> list[tuple[str, list[Path], dict[str, Any]]]:
    """Per link, object and arm: the distribution of each scenario's goodput per
    repetition, one empirical CDF per scenario (the TCP-options study's throughput CDFs
    per option set), drawn where two or more scenarios share the link and object."""
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    links = {g.where()[0]: g.condition for g in goodputs}
    for g in goodputs:
        groups.setdefault(g.where(), {})[g.scenario] = sorted(v / 1e6 for v in g.got.values())
    drawn = []
    for i, ((key, obj, arm), by_sc) in enumerate(sorted(groups.items())):
        if len(by_sc) < 2:
            continue
        link = links[key]
        where = f"{link.rate_mbit or 'unlimited'} Mbit/s, {link.rtt_ms} ms, loss {link.loss_pct} %"
        title = f"goodput per repetition, {arm}, {obj}: {where}"
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for sc, vals in by_sc.items():
            if vals:  # from 0 at the smallest value, so each step up is one repetition
                ys = [0.0] + [(k + 1) / len(vals) for k in range(len(vals))]
                ax.step([vals[0], *vals], ys, where="post", label=f"{sc} (n {len(vals)})")
        ax.set_xlabel("goodput [Mbit/s]")
        ax.set_ylabel("share of repetitions")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        paths = save_figure(fig, figs / f"goodput-cdf-{i}")
        shows = {
            "transfer": "goodput_cdf",
            "title": title,
            "arm": arm,
            "object": obj,
            "scenarios": {sc: [round(v, 3) for v in vals] for sc, vals in by_sc.items()},
        }
        drawn.append((title, paths, shows))
    return drawn


def speedups(goodputs: list[Goodputs], reference: str) -> list[dict[str, Any]]:
    """Per scenario, link, object and arm: the goodput of each repetition over the
    reference scenario's same repetition (same arm, link and object), binned as the
    TCP-options study binned its downloads (:data:`SPEEDUP_BINS`), with the shares
    faster (ratio > 1) and slower (< 1) and the median ratio. Repetition i against
    repetition i: one "target" here, so a share is a share of repetitions. An arm whose
    settings the scenarios do not change (h3 beside TCP options) shows the noise."""
    base = {g.where(): g.got for g in goodputs if g.scenario == reference}
    out = []
    for g in goodputs:
        ref = base.get(g.where())
        if g.scenario == reference or ref is None:
            continue
        got = g.got
        ratios = [got[i] / ref[i] for i in sorted(set(got) & set(ref)) if ref[i]]
        n = len(ratios)
        row: dict[str, Any] = {
            "scenario": g.scenario,
            "against": reference,
            "rate_mbit": g.condition.rate_mbit,
            "rtt_ms": g.condition.rtt_ms,
            "loss_pct": g.condition.loss_pct,
            "object": g.object,
            "arm": g.arm,
            "n": n,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "faster": sum(r > 1 for r in ratios) / n if n else None,
            "slower": sum(r < 1 for r in ratios) / n if n else None,
        }
        for lo, hi, label in SPEEDUP_BINS:
            row[label] = sum(lo <= r < hi for r in ratios) / n if n else None
        out.append(row)
    return out


def flat(summary: dict[str, Any]) -> dict[str, Any]:
    """A bulk arm's per-role figures as columns: ``cpu_ms_per_mb: {server: x}`` ->
    ``cpu_server_ms_per_mb``, ``drops: {client: n}`` -> ``drops_client``."""
    out: dict[str, Any] = {}
    for role in ROLES:
        for key, col in (("cpu_ms", f"cpu_{role}_ms"), ("cpu_ms_per_mb", f"cpu_{role}_ms_per_mb")):
            out[col] = (summary.get(key) or {}).get(role)
        for key in ("udp_rcvbuf_errors", "udp_in_errors", "drops"):
            out[f"{key}_{role}"] = (summary.get(key) or {}).get(role)
    return out


def _rows(cell: TransferCell, alpha: float) -> list[dict[str, Any]]:
    """One row per arm and comparison it is the candidate of (against the reference,
    then the spec's pairs), as table.csv has one per cell and pair; an arm compared
    with nothing (the reference) has one row without a comparison."""
    base = {k: getattr(cell, k) for k in COLUMNS if hasattr(cell, k)}
    out = []
    for arm in cell.arms:
        summary = cell.summary.get(arm) or {}
        row = dict.fromkeys(COLUMNS) | base | summary | flat(summary) | {"arm": arm}
        settings = cell.arm_settings(arm)
        row.update(stack=settings.get("stack") or "", cc=settings.get("cc") or cell.cc)
        row.update(knobs=sockopts.describe(settings))
        row.update(jain_mean=cell.jain_mean, jain_sd=cell.jain_sd)
        mine = [
            (pair.split("/")[0], metrics)
            for pair, metrics in cell.comparisons.items()
            if pair.split("/")[1] == arm
        ]
        for ref, metrics in mine:
            metric = "goodput_bps" if "goodput_bps" in metrics else "per_flow_bps"
            c = metrics[metric]
            out.append(
                row
                | dict(
                    reference=ref,
                    metric=metric,
                    pct_diff=c.get("pct_diff"),
                    p=c.get("p"),
                    welch_p=c.get("welch_p"),
                    mannwhitney_p=c.get("mannwhitney_p"),
                    significant=c.get("p") is not None and c["p"] < alpha,
                )
            )
        if not mine:
            out.append(row)
    return out


def _figures(
    r: BulkResult | CompeteResult, cid: str, out: Path, sec: TransferSection, root: Path
) -> list[str]:
    figs = out / "figures"
    shows: dict[str, Any] = {"cell_id": cid, "transfer": r.kind}
    if isinstance(r, BulkResult):
        title = f"bulk, cell {cid}: every run's throughput per arm"
        drawn = [(title, plot_bulk(r, figs / f"bulk-{cid}"), shows | {"title": title})]
    else:
        drawn = []
        for run in r.runs:
            title = f"compete, cell {cid}, repetition {run.rep}: throughput per flow, queue"
            drawn.append(
                (
                    title,
                    plot_compete(r, run, figs / f"compete-{cid}-{run.rep}"),
                    shows | {"rep": run.rep, "title": title},
                )
            )

    drawn += windows.figures(r, root, cid, figs)  # traced flows: their windows
    sec.drawn += drawn
    return [paths[0].name for _, paths, _ in drawn]
