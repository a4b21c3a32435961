"""The report's transfer cells (bulk, compete): their table, figures and statistics.

A transfer cell's numbers are computed from its stored record (quicbed.analysis.transfers'
bulk_summary and compete_summary, the same functions ``quicbed bulk``/``compete``
print from), never kept beside it, so a package's verify recomputes them the same way.
``transfers.csv`` has one row per cell, arm and comparison (quicbed.report.transferrow),
``transfers.json`` the summaries and comparisons; each bulk cell has a throughput figure,
each compete repetition its flows' timelines and the queue.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

from quicbed.analysis.transfers import BulkSummary, CompeteSummary, stored_transfer
from quicbed.figsave import save_figure
from quicbed.model.link import LinkCondition
from quicbed.report import axes, windows
from quicbed.report.figure import Drawn
from quicbed.report.transfercell import TransferCell
from quicbed.report.transferplots import plot_bulk, plot_compete
from quicbed.report.transferrow import COLUMNS, TransferRow, transfer_rows
from quicbed.results.store import Store
from quicbed.results.transfers import link_line

FILE = "transfers.csv"

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


@dataclass(frozen=True, kw_only=True)
class SpeedupRow:
    """One row of speedups.csv (:func:`speedups`): a scenario's arm under one link and
    object against the reference scenario's, repetition by repetition."""

    scenario: str
    #: the reference scenario
    against: str
    rate_mbit: float | None
    rtt_ms: float | None
    loss_pct: float
    object: str
    arm: str
    #: repetitions compared (those both scenarios measured)
    n: int
    median_ratio: float | None
    #: the shares of repetitions faster (ratio > 1) and slower (< 1)
    faster: float | None
    slower: float | None
    #: per bin of :data:`SPEEDUP_BINS`, by its label, the share of repetitions in it:
    #: a label ("1.0-1.1") is a column's name, not a field's
    bins: dict[str, float | None]

    def columns(self) -> dict[str, Any]:
        """The row as speedups.csv holds it: its fields, then a column per bin."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "bins"}
        return own | self.bins


#: the columns of speedups.csv, in order: SpeedupRow's fields but its bins, then the bins
SPEEDUP_COLUMNS = [f.name for f in fields(SpeedupRow) if f.name != "bins"] + [
    label for _, _, label in SPEEDUP_BINS
]


@dataclass
class TransferSection:
    rows: list[TransferRow] = field(default_factory=list)
    cells: list[TransferCell] = field(default_factory=list)
    #: the transfer figures: the report makes them its figures
    drawn: list[Drawn] = field(default_factory=list)
    #: each bulk scenario's goodput against the spec's ``speedup_against`` scenario
    #: (:func:`speedups`), and that scenario's name
    speedups: list[SpeedupRow] = field(default_factory=list)
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
                cell.summary = r.summary
                cell.link_line = link_line(r, att.waited_s)
                cell.comparisons = r.comparisons
                if isinstance(r, CompeteSummary):
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
            sec.rows += transfer_rows(cell, alpha)
    finally:
        store.close()

    sec.drawn += axes.figures(sec.cells, out)
    if sec.cells:
        with open(out / FILE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            w.writerows(r.columns() for r in sec.rows)
        public = [c.public() for c in sec.cells]
        (out / "transfers.json").write_text(json.dumps(public, indent=1, sort_keys=True) + "\n")
    if speedup_against is not None:
        sec.drawn += goodput_cdfs(goodputs, out / "figures")
        sec.speedups = speedups(goodputs, speedup_against)
        if sec.speedups:
            with open(out / SPEEDUP_FILE, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=SPEEDUP_COLUMNS)
                w.writeheader()
                w.writerows(s.columns() for s in sec.speedups)
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


def goodput_cdfs(goodputs: list[Goodputs], figs: Path) -> list[Drawn]:
    """Per link, object and arm: the distribution of each scenario's goodput per
    repetition, one empirical CDF per scenario (the TCP-options study's throughput CDFs
    per option set), drawn where two or more scenarios share the link and object."""
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    links = {g.where()[0]: g.condition for g in goodputs}
    for g in goodputs:
        groups.setdefault(g.where(), {})[g.scenario] = sorted(v / 1e6 for v in g.got.values())
    drawn: list[Drawn] = []
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
        drawn.append(Drawn(title, paths, shows))
    return drawn


def speedups(goodputs: list[Goodputs], reference: str) -> list[SpeedupRow]:
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
        out.append(
            SpeedupRow(
                scenario=g.scenario,
                against=reference,
                rate_mbit=g.condition.rate_mbit,
                rtt_ms=g.condition.rtt_ms,
                loss_pct=g.condition.loss_pct,
                object=g.object,
                arm=g.arm,
                n=n,
                median_ratio=statistics.median(ratios) if ratios else None,
                faster=sum(r > 1 for r in ratios) / n if n else None,
                slower=sum(r < 1 for r in ratios) / n if n else None,
                bins={
                    label: sum(lo <= r < hi for r in ratios) / n if n else None
                    for lo, hi, label in SPEEDUP_BINS
                },
            )
        )
    return out


def _figures(
    r: BulkSummary | CompeteSummary, cid: str, out: Path, sec: TransferSection, root: Path
) -> list[str]:
    figs = out / "figures"
    shows: dict[str, Any] = {"cell_id": cid, "transfer": r.kind}
    drawn: list[Drawn] = []
    if isinstance(r, BulkSummary):
        title = f"bulk, cell {cid}: every run's throughput per arm"
        drawn.append(Drawn(title, plot_bulk(r, figs / f"bulk-{cid}"), shows | {"title": title}))
    else:
        for run in r.runs:
            title = f"compete, cell {cid}, repetition {run.rep}: throughput per flow, queue"
            drawn.append(
                Drawn(
                    title,
                    plot_compete(r, run, figs / f"compete-{cid}-{run.rep}"),
                    shows | {"rep": run.rep, "title": title},
                )
            )

    drawn += windows.figures(r, root, cid, figs)  # traced flows: their windows
    sec.drawn += drawn
    return [d.paths[0].name for d in drawn]
