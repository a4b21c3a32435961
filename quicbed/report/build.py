"""The report: statistics, tables, heatmaps and an HTML page, from the store only.

A pure function of the results folder: it never reads the memory of a run, so a
replication package can regenerate it. ``DIR/report/`` (or another folder) is
rebuilt from scratch. Per cell the latest attempt is used (the report says so and
counts attempts). ``figures.json`` holds what each heatmap shows, cell by cell, so
regenerated figures can be compared by their numbers as well as by their bytes.
"""

from __future__ import annotations

import csv
import functools
import itertools
import json
import shutil
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, select_autoescape

from quicbed import __version__
from quicbed.analysis.cells import compare_cell
from quicbed.analysis.explain import choose, traced, write
from quicbed.analysis.stats import Comparison, adjust, compare
from quicbed.backends import described
from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition, parse_queue
from quicbed.report import cputable, lines
from quicbed.report import profile as report_profile
from quicbed.report import transfers as report_transfers
from quicbed.report.cellrow import COLUMNS, CellRow, Compared, ModeCell
from quicbed.report.figure import Drawn, ReportFigure, ReportInput, entry, report_figures
from quicbed.report.plots import HeatCell, draw_heatmap, figure_data
from quicbed.report.transfers import is_transfer
from quicbed.results import advertised
from quicbed.results.folder import SWEEP_FILE
from quicbed.results.handshakes import arm_groups
from quicbed.results.linkload import background_share, cell_line, load_proof, shortfall
from quicbed.results.linkload import figures as link_figures
from quicbed.results.provenance import component_identity, measured_on, setup_identity
from quicbed.results.store import Store, check_metric
from quicbed.servers import get_stack
from quicbed.settings.certificate import DEFAULT as DEFAULT_CHAIN
from quicbed.spec import workloads
from quicbed.spec.arms import own_pairs, parse_pairs
from quicbed.spec.background import background_text
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.significance import DEFAULT_ALPHA, DEFAULT_METRIC
from quicbed.spec.sweepspec import SweepSpec, plan, stored_queue_warning

if TYPE_CHECKING:
    from quicbed.servers.webserver import WebServer

#: the per-group counts (groups.csv): per scenario, pair and mode, how many cells have
#: a number and how many are positive (the candidate faster), significantly or not
GROUP_COLUMNS = [
    "scenario",
    "pair",
    "mode",
    "cells",
    "with_number",
    "positive",
    "positive_significant",
    "negative_significant",
]
#: the pair of the reference study: its heatmaps keep the names they always had
CLASSIC_PAIR = "h2/h3"


@dataclass
class Report:
    out: Path
    rows: list[CellRow]
    figures: list[dict[str, Any]] = field(default_factory=list)
    #: the testbeds that measured the reported attempts, and what to beware of
    testbeds: list[dict[str, Any]] = field(default_factory=list)
    testbed_warnings: list[str] = field(default_factory=list)
    #: per scenario, pair and mode: how many cells favour the candidate (groups.csv)
    groups: list[dict[str, Any]] = field(default_factory=list)
    #: one line per small queue of the reported cells (quicbed.spec.sweepspec.queue_warning)
    queue_warnings: list[str] = field(default_factory=list)
    #: the bulk and compete cells (quicbed.report.transfers)
    transfers: report_transfers.TransferSection = field(
        default_factory=report_transfers.TransferSection
    )
    #: CPU per role, arm and cell (quicbed.report.cputable)
    cpu: cputable.CpuSection = field(default_factory=cputable.CpuSection)
    #: CPU profiles: flame graphs and component shares (quicbed.report.profile)
    profile: report_profile.ProfileSection = field(default_factory=report_profile.ProfileSection)
    #: per client and QUIC transport parameter: what it advertised (transport_params.csv)
    advertised: list[dict[str, Any]] = field(default_factory=list)


def testbeds(rows: list[CellRow]) -> tuple[list[dict[str, Any]], list[str]]:
    """The testbeds behind the reported attempts (each with a colour and its cells), and
    a warning for every link condition measured on more than one hardware type: its
    cells differ by machine as well as by arm, page or setting."""
    cells = [r for r in rows if r.first]
    found: dict[str, dict[str, Any]] = {}
    for r in cells:
        t = r.testbed
        entry = found.setdefault(t["id"], dict(t, cells=0))
        entry["cells"] += 1
    for i, t in enumerate(found.values()):
        t["colour"] = TESTBED_COLOURS[i % len(TESTBED_COLOURS)]
    for r in rows:
        r.testbed_colour = found[r.testbed["id"]]["colour"]
    by_cond: dict[str, dict[str, list[str]]] = {}
    for r in cells:
        by_cond.setdefault(r.condition, {}).setdefault(r.testbed["hardware"], []).append(r.cell_id)
    warnings = []
    for cond, hw in by_cond.items():
        if len(hw) > 1:
            c = json.loads(cond)
            what = (
                f"{_label_rate(c['rate_mbit'])}, RTT {_rtt(c)} ms, loss {c['loss_pct']} %"
                f", jitter {c['jitter_ms']} ms, queue {c['queue']}"
            )
            on = "; ".join(f"{h}: {len(ids)} cell(s)" for h, ids in hw.items())
            warnings.append(
                f"the condition {what} was measured on different hardware ({on}): "
                "compare its cells with care"
            )
    return list(found.values()), warnings


#: one background per testbed in the report's cell table (light, readable under text)
TESTBED_COLOURS = ("#e8f0fe", "#fce8e6", "#e6f4ea", "#fef7e0", "#f3e8fd", "#e4f7fb")


def comparison_columns(c: Comparison) -> dict[str, Any]:
    """The table's columns of one comparison (quicbed.analysis.stats.compare computed them all;
    ``p_adjusted`` and the final ``significant`` come per heatmap, in ``build``)."""
    out: dict[str, Any] = {}
    for key, s in (("ref", c.reference), ("cand", c.candidate)):
        out.update(
            {f"n_{key}": s.n, f"mean_{key}": s.mean, f"sd_{key}": s.sd, f"median_{key}": s.median}
        )
    # PLTC (the beta study's metric): the change relative to the reference arm,
    # (mean ref - mean cand) / mean ref x 100; from compare()'s summaries, and only where
    # compare() gave its own difference (enough valid runs)
    ref, cand = c.reference.mean, c.candidate.mean
    pltc = None
    if c.pct_diff is not None and ref is not None and cand is not None and ref > 0:
        pltc = (ref - cand) / ref * 100
    out.update(
        pct_diff=c.pct_diff,
        pltc=pltc,
        welch_p=c.welch_p,
        mannwhitney_p=c.mannwhitney_p,
        p_used=c.p,
        testable=c.testable,
        significant=c.significant,
        boot_diff_low=c.boot_diff_low,
        boot_diff_high=c.boot_diff_high,
    )
    return out


def _git_label(git: dict[str, Any]) -> str:
    """``abc123456789 (dirty)``, and where the checkout had moved to while it ran."""

    def one(g: dict[str, Any]) -> str:
        return (g.get("sha") or "?")[:12] + (" (dirty)" if g.get("dirty") else "")

    now = git.get("now")
    return one(git) + (f"; checkout at {one(now)} by then" if isinstance(now, dict) else "")


def _rtt(cond: dict[str, Any]) -> float:
    """A stored condition's base RTT: its rtt_ms as stored, or its one-way delays' sum."""
    if cond.get("rtt_ms") is not None:
        return cond["rtt_ms"]  # type: ignore[no-any-return]  # a stored number, kept as written
    return float((cond.get("delay_down_ms") or 0) + (cond.get("delay_up_ms") or 0))


def queue_warnings(rows: list[tuple[str, str | None, str]]) -> list[str]:
    """A line per link condition of the reported cells whose queue is small, from
    (condition as JSON, its queue warning, scenario) of every cell."""
    found: dict[str, list[str]] = {}
    for condition, warning, scenario in rows:
        if warning:
            found.setdefault(condition, [warning])
            if scenario not in found[condition]:
                found[condition].append(scenario)
    out = []
    for cond, (w, *scenarios) in found.items():
        c = json.loads(cond)
        loss = _label_loss(c["loss_pct"], c.get("loss_down_pct"), c.get("loss_up_pct"))
        out.append(
            f"small queue at {_label_rate(c['rate_mbit'])}, RTT {_rtt(c):g} ms, loss "
            f"{loss} ({', '.join(scenarios)}): {w}; its cells may say more "
            "about the buffer than about the transports"
        )
    return out


def group_counts(rows: list[CellRow]) -> list[dict[str, Any]]:
    """Per scenario, pair and mode: the cells, those with a number, and how many favour
    the candidate (PLTC and the difference > 0), significantly (after the heatmap's
    correction) or not, and how many favour the reference significantly."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        if not r.pair:
            continue
        g = groups.setdefault(
            (r.scenario, r.pair, r.mode),
            {
                "scenario": r.scenario,
                "pair": r.pair,
                "mode": r.mode,
                "cells": 0,
                "with_number": 0,
                "positive": 0,
                "positive_significant": 0,
                "negative_significant": 0,
            },
        )
        g["cells"] += 1
        if r.status != "done" or r.pltc is None:
            continue
        g["with_number"] += 1
        g["positive"] += int(r.pltc > 0)
        g["positive_significant"] += int(r.pltc > 0 and r.significant is True)
        g["negative_significant"] += int(r.pltc < 0 and r.significant is True)
    return list(groups.values())


def page_kind(page: str) -> str:
    """``single-object`` or ``multi-object``, by the page's object count in
    workloads/pages.yaml (``1mbx1`` is one object), as the reference study split them."""
    pages = _pages()
    if page not in pages:
        return "multi-object"  # not a page of ours (an old folder): the HAR-less default
    return "single-object" if pages[page].images == 1 else "multi-object"


@functools.cache
def _pages() -> dict[str, Any]:

    return dict(workloads.load().pages)


def heat_state(row: Compared) -> str:
    """How a heatmap draws a cell (quicbed.report.plots.cell_look): ``fail`` the attempt failed,
    ``n/a`` too few valid runs for a number, ``untested`` too few runs for the test to
    reach alpha, ``ok`` a number and a verdict."""
    if row.status == "failed":
        return "fail"
    if row.pct_diff is None:
        return "n/a"
    if row.testable is False:
        return "untested"
    return "ok"


def correct(rows: Sequence[Compared], correction: str, alpha: float) -> None:
    """Adjust the p-values of one heatmap's rows and set their verdicts: a cell too small
    for its test is not a test and does not count in the correction."""
    adj = adjust([r.p_used if r.testable else None for r in rows], correction)
    for r, p in zip(rows, adj, strict=True):
        r.p_adjusted = p
        r.significant = None if p is None else p < alpha


def _planned_scenarios(spec: dict[str, Any]) -> dict[str, list[str]]:
    """cell_id -> scenarios, by planning the folder's spec again (folders of schema 1).
    A spec this quicbed no longer accepts (a rule added since) plans nothing: its cells
    are reported under "cells" rather than not at all."""
    from pydantic import ValidationError

    out: dict[str, list[str]] = {}
    try:
        planned = plan(SweepSpec(**spec))
    except (ValidationError, QuicbedError):
        return out
    for pc in planned:
        out.setdefault(pc.config.cell_id(), []).append(pc.scenario)
    return out


def cell_rows(
    root: Path, metric: str = DEFAULT_METRIC
) -> tuple[list[CellRow], dict[str, Any] | None]:
    """One row per cell (latest attempt) and pair of arms compared in it (a cell of one
    arm: one row without a pair), with every statistic of ``metric`` (PLT unless asked:
    quicbed.analysis.cells); corrections not yet applied."""

    sweep = json.loads((root / SWEEP_FILE).read_text()) if (root / SWEEP_FILE).exists() else None
    stats_cfg = (sweep or {}).get("spec", {}).get("statistics", {})
    alpha = stats_cfg.get("alpha", DEFAULT_ALPHA)
    test = stats_cfg.get("test", "welch")
    extra = parse_pairs(stats_cfg.get("pairs"))
    store = Store(root)
    rows: list[CellRow] = []
    try:
        scenarios = store.cell_scenarios()
        if sweep and not scenarios:  # a folder of schema 1: its scenarios were not stored
            scenarios = _planned_scenarios(sweep["spec"])
        latest = store.latest_attempts()
        for cid in store.cells():
            if cid not in latest:
                continue
            first = len(rows)
            cfg = store.cell_config(cid)
            if is_transfer(cfg):  # bulk and compete cells: quicbed.report.transfers
                continue
            att = latest[cid]
            cond = cfg["condition"]
            receipt = att.receipt
            runs = store.runs(cid, att.attempt)
            cell = make_cell(**cfg)
            arms = {a.name: a for a in cell.resolved_arms()}
            components = (att.provenance or {}).get("components")
            invalid = {
                a: sum(1 for r in runs if r.arm == a and not r.valid and not r.warmup) for a in arms
            }
            row = CellRow(
                scenario=(scenarios.get(cid) or ["cells"])[0],
                cell_id=cid,
                attempt=att.attempt,
                attempts=att.attempt,
                status=att.status,
                page=cfg["page"],
                rate_mbit=cond["rate_mbit"],
                rtt_ms=(
                    cond["rtt_ms"]
                    if cond["rtt_ms"] is not None
                    else (cond["delay_down_ms"] or 0) + (cond["delay_up_ms"] or 0)
                ),
                loss_pct=cond["loss_pct"],
                loss_down_pct=cond.get("loss_down_pct"),
                loss_up_pct=cond.get("loss_up_pct"),
                jitter_ms=cond["jitter_ms"],
                jitter_kind=cond["jitter_kind"],
                queue=cond["queue"],
                background=background_text(cell.background),
                certificate=cell.certificate,
                origin_rtt=cell.origin_rtt or "",
                server_time=cell.server_time or "",
                link=cell.condition.rate_label() if cell.condition.varying() else "",
                mode=cfg["mode"],
                runs=cfg["runs"],
                problem=att.problem or "",
                queue_warning=stored_queue_warning(cond),
                receipt_passed=None if receipt is None else receipt["passed"],
                cc=cell.tcp_cc(),
                software=software_label(components, list(arms.values())),
                loads=runs,
                receipt=receipt,
                invalid=invalid,
                arms=arms,
                testbed=measured_on(att.provenance),
                condition=json.dumps(cond, sort_keys=True),
            )
            comps = compare_cell(
                store, cid, att.attempt, cell, own_pairs(extra, arms), alpha, test, metric
            )
            if not comps:
                rows.append(row)
            for i, (pair, c) in enumerate(comps.items()):
                ref, cand = pair.split("/")
                prow = replace(
                    row,
                    first=i == 0,
                    pair=pair,
                    ref=ref,
                    cand=cand,
                    ref_stack=arms[ref].stack,
                    cand_stack=arms[cand].stack,
                    ref_cc=arms[ref].cc,
                    cand_cc=arms[cand].cc,
                    ref_browser=browser_label(components, arms[ref]),
                    cand_browser=browser_label(components, arms[cand]),
                    ref_groups=arm_groups(runs, ref),
                    cand_groups=arm_groups(runs, cand),
                    invalid_ref=invalid[ref],
                    invalid_cand=invalid[cand],
                    bg_share_ref=background_share(runs, ref),
                    bg_share_cand=background_share(runs, cand),
                    warnings=c.warnings,
                    **comparison_columns(c),
                )
                if att.status == "done" and c.problem:
                    prow.problem = c.problem
                rows.append(prow)
            # a cell two scenarios plan is in both (its heatmaps, table rows); its receipt,
            # testbed and explain page once (first: the cell's first row)
            own = rows[first:]
            for r in own:
                r.first_in_scenario = r.first
            for other in (scenarios.get(cid) or [])[1:]:
                rows += [replace(r, scenario=other, first=False) for r in own]
    finally:
        store.close()
    return rows, sweep


class LinePlots(ReportFigure):
    """Per heatmap group whose cells vary loss, RTT or jitter enough: its line plot
    (quicbed.report.lines)."""

    name = "lines"
    order = 20

    def draw(self, data: ReportInput) -> list[Drawn]:
        figs = []
        for (scenario, pair, mode, kind), group in sorted(_heat_groups(data.rows).items()):
            title = f"{scenario}: {pair.replace('/', ' vs ')}, {mode}, {kind}"
            name = f"lines-{_slug(scenario)}-{pair.replace('/', '-vs-')}-{mode}-{kind}"
            drawn = lines.draw(group, title, data.figures_dir / name)
            if drawn is not None:
                paths, shows = drawn
                figs.append(Drawn(title, paths, shows))
        return figs


def _heat_groups(
    rows: list[CellRow],
) -> dict[tuple[str, str, str, str], list[CellRow]]:
    """(scenario, pair, mode, single|multi) -> its rows: one heatmap each."""
    groups: dict[tuple[str, str, str, str], list[CellRow]] = {}
    for r in rows:
        if not r.pair:
            continue
        kind = page_kind(r.page)
        groups.setdefault((r.scenario, r.pair, r.mode, kind), []).append(r)
    return groups


def _stack(name: str) -> type[WebServer] | None:
    """A stored arm's stack, if this quicbed has it (a folder may come from another)."""

    try:
        return get_stack(name)
    except QuicbedError:
        return None


def _records(row: CellRow) -> list[str]:
    """Per arm whose stack keeps one, what its measured loads ran under (the gQUIC
    server's handshake round trips, window limit and flight: WebServer.record_line)."""

    cond = LinkCondition.model_validate(json.loads(row.condition)) if row.condition else None
    out = []
    for name, arm in row.arms.items():
        stack = _stack(arm.stack)
        loads = [x.detail.get("server") or {} for x in row.loads if x.arm == name and not x.warmup]
        line = stack.record_line(loads, cond) if stack is not None and loads else None
        if line:
            out.append(f"{name}: {line}")
    return out


def _arm_label(row: CellRow, key: str, params: bool = False) -> str:
    """A built-in arm by its transport, as the reference study wrote them (``h2 (TCP)``,
    ``h3 (QUIC)``: its stack's ``label``); other arms by stack and CC, so a figure says
    what it compares; with ``params`` also the arm's settings
    (``h3-b06 (quic-go, cubic) [cubic_n 2, cubic_beta 0.6]``)."""
    arm, stack = getattr(row, key), getattr(row, f"{key}_stack")
    cls = _stack(stack)
    if cls is not None and cls.label and arm in cls.arms:
        return f"{arm} ({cls.label})"
    label = f"{arm} ({stack}, {getattr(row, f'{key}_cc')})"
    a = (row.arms or {}).get(arm)
    if params and a is not None and a.params:
        label += (
            " ["
            + ", ".join(
                f"{k} {str(v).lower()}"
                if isinstance(v, bool)
                else f"{k} {v:g}"
                if isinstance(v, float)
                else f"{k} {v}"
                for k, v in a.params.items()
            )
            + "]"
        )
    return label


def browser_label(components: dict[str, Any] | None, arm: Any) -> str | None:
    """The browser an arm loaded in, as its driver named its build (``Chrome 156.0...``,
    ``Firefox 153.8.0``), from what the attempt recorded; None for an arm of no browser
    (a transfer cell's). An attempt of an older quicbed recorded one browser for all."""
    if getattr(arm, "browser", None) is None:
        return None
    comp = components or {}
    seen = (comp.get("browsers") or {}).get(arm.name) or comp.get("browser")
    if not seen:
        return str(arm.browser)
    return str(seen).replace("HeadlessChrome/", "Chrome ").replace("/", " ")


def software_label(components: dict[str, Any] | None, arms: list[Any]) -> str:
    """The browser, each arm's server and its protocol version, as one caption line: a
    heatmap says what software produced it (Chrome 72 with gQUIC Q039 is not Chromium
    of today with QUIC v1). Each stack words its own part; where the arms loaded in
    different browsers, each arm names its own."""
    comp = components or {}
    shown = list(dict.fromkeys(browser_label(comp, a) or "browser ?" for a in arms))
    one = len(shown) <= 1
    parts = [shown[0] if shown else "browser ?"] if one else []
    for a in arms:
        cls = _stack(a.stack)
        c = comp.get(a.name) or {}
        text = cls.caption(a, c) if cls else f"{c.get('server') or a.stack}"
        where = "" if one else f" in {browser_label(comp, a)}"
        parts.append(f"{a.name}: {text}{where}")
    return "; ".join(parts)


def _label_rate(v: float | None) -> str:
    return "unlimited" if v is None else f"{v:g} Mbit/s"


def _label_loss(loss: float, down: float | None, up: float | None) -> str:
    """``1 %`` (end to end, split evenly), ``1 % down`` (the downlink only) or
    ``1/0.5 % down/up``."""
    if down is None and up is None:
        return f"{loss:g} %"
    d = loss / 2 if down is None else down
    u = loss / 2 if up is None else up
    return f"{d:g} % down" if not u else f"{d:g}/{u:g} % down/up"


def _sort_queue(q: str) -> tuple[str, float]:

    try:
        return parse_queue(q)
    except QuicbedError:
        return ("~", 0.0)


#: what a heatmap's rows or columns may be: (axis label, cell label, sort key); the
#: reference study's heatmaps are rates x pages, a scenario varying more gets other axes
_DIMS: dict[str, tuple[str, Any, Any]] = {
    "rate": (  # a varying link's trace or schedule stands where its rate would
        "rate",
        lambda r: r.link or _label_rate(r.rate_mbit),
        lambda r: (r.link != "", r.rate_mbit is None, r.rate_mbit or 0, r.link),
    ),
    "rtt": ("RTT", lambda r: f"{r.rtt_ms:g} ms", lambda r: r.rtt_ms),
    "loss": (
        "loss",
        lambda r: _label_loss(r.loss_pct, r.loss_down_pct, r.loss_up_pct),
        lambda r: (r.loss_pct, r.loss_down_pct or 0, r.loss_up_pct or 0),
    ),
    "jitter": (
        "jitter",
        lambda r: f"{r.jitter_ms:g} ms {r.jitter_kind}",
        lambda r: (r.jitter_kind, r.jitter_ms),
    ),
    "queue": ("queue", lambda r: r.queue, lambda r: _sort_queue(r.queue)),
    "background": ("background", lambda r: r.background, lambda r: (r.background != "none",)),
    "certificate": (
        "certificate",
        lambda r: r.certificate,
        lambda r: (r.certificate != DEFAULT_CHAIN, r.certificate),
    ),
    "origins": (
        "origins",
        lambda r: _label_origins(r.origin_rtt, r.server_time),
        lambda r: (r.origin_rtt != "", r.origin_rtt == "recorded", r.origin_rtt, r.server_time),
    ),
    "page": ("page", lambda r: r.page, lambda r: _page_index(r.page)),
}


def _label_origins(origin_rtt: str, server_time: str) -> str:
    """A replayed page's origins as a heatmap names them: their distance beyond the
    link's RTT (the cell's ``origin_rtt``) and whether responses wait their recorded
    server time."""
    where = {"": "origins at the link's RTT", "recorded": "origins at their recorded RTTs"}
    text = where.get(origin_rtt, f"origins +{origin_rtt} ms")
    return text + (", recorded server time" if server_time else "")


def _page_index(page: str) -> int:
    order = list(_pages())
    return order.index(page) if page in order else len(order)


def heat_axes(grp: list[CellRow]) -> tuple[str, str, list[str]]:
    """(rows, columns, the dimensions left that vary) of one heatmap group: rates x pages
    where nothing else varies (the reference study's); else loss (or the page) across
    and the first other dimension that varies down; any further one splits the group."""
    varying = [d for d, (_, label, _) in _DIMS.items() if len({label(r) for r in grp}) > 1]
    if set(varying) <= {"rate", "page"}:
        return "rate", "page", []
    cols = next((d for d in ("loss", "page") if d in varying), varying[-1])
    rest = [d for d in varying if d != cols]
    rows = rest[0] if rest else "rate"
    return rows, cols, rest[1:]


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "." else "-" for ch in text).strip("-")


def build(
    root: Path, out: Path | None = None, source: str | None = None, metrics: Sequence[str] = ()
) -> Report:
    """Rebuild the report of the results folder ``root`` into ``out`` (default
    ``root/report``). ``source`` is how the report names the results in its text and
    its rerun commands (default: the folder's path; a package names its archive).
    ``metrics``: per-load figures besides PLT to compare and draw (METRICS), beside the
    spec's own ``statistics.metrics``; an unknown one is refused before anything is
    written."""
    root = Path(root)
    for m in metrics:
        check_metric(m)
    rows, sweep = cell_rows(root)
    stats_cfg = (sweep or {}).get("spec", {}).get("statistics", {})
    also = tuple(
        m for m in dict.fromkeys([*stats_cfg.get("metrics", []), *metrics]) if m != DEFAULT_METRIC
    )
    alpha = stats_cfg.get("alpha", DEFAULT_ALPHA)
    correction = stats_cfg.get("correction", "none")
    test = stats_cfg.get("test", "welch")
    store = Store.open_readonly(root)
    try:
        transfer_cells = any(is_transfer(c) for c in store.cell_configs().values())
    finally:
        store.close()
    if not rows and not transfer_cells:
        raise QuicbedError(f"{root} has no measured cells to report")

    page_order = list(workloads.load().pages)
    out = Path(out) if out else root / "report"
    if out.exists() and not out.is_dir():
        raise QuicbedError(f"{out} is a file; the report is a folder (move the file away)")
    if out.exists():
        shutil.rmtree(out)
    (out / "figures").mkdir(parents=True)
    report = Report(out=out, rows=rows)
    data = ReportInput(root, out, rows, alpha, test, correction, page_order, also)
    for kind in report_figures():
        report.figures += [entry(d) for d in kind().draw(data)]
    _explain_pages(root, rows, out)

    report.transfers = report_transfers.build(
        root,
        out,
        alpha,
        test,
        parse_pairs(stats_cfg.get("pairs")),
        speedup_against=stats_cfg.get("speedup_against"),
    )
    report.figures += [entry(d) for d in report.transfers.drawn]
    report.cpu = cputable.build(root, out)
    report.profile = report_profile.build(root, out)
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r.columns())
    report.testbeds, report.testbed_warnings = testbeds(rows)
    report.queue_warnings = queue_warnings(
        [(r.condition, r.queue_warning, r.scenario) for r in rows]
        + [(c.link_key(), c.queue_warning, c.scenario) for c in report.transfers.cells]
    )

    report.advertised = advertised.by_client(advertised.rows(root))
    if report.advertised:
        with open(out / "transport_params.csv", "w", newline="") as f:
            aw = csv.DictWriter(f, fieldnames=list(report.advertised[0]))
            aw.writeheader()
            aw.writerows(report.advertised)
    report.groups = group_counts(rows)
    with open(out / "groups.csv", "w", newline="") as f:
        gw = csv.DictWriter(f, fieldnames=GROUP_COLUMNS)
        gw.writeheader()
        gw.writerows(report.groups)
    with open(out / "testbeds.csv", "w", newline="") as f:
        tw = csv.writer(f)
        tw.writerow(["cell_id", "attempt", "testbed", "hardware", "kernel", "image"])
        for r in rows:
            if r.first:
                t = r.testbed
                tw.writerow(
                    [r.cell_id, r.attempt, t["label"], t["hardware"], t["kernel"], t["image"]]
                )
    shown = [{k: f[k] for k in ("png", "svg", "shows")} for f in report.figures]
    (out / "figures.json").write_text(json.dumps(shown, indent=1) + "\n")
    _write_html(report, sweep, root, alpha, correction, source or str(root))
    return report


class PairHeatmaps(ReportFigure):
    """The reference study's heatmaps: per scenario, pair of arms, mode and kind of page,
    rates x pages (or the axes ``heat_axes`` chooses), one per value of the rest."""

    name = "heatmaps"
    order = 10

    def draw(self, data: ReportInput) -> list[Drawn]:
        return _pair_heatmaps(data.rows, data)


def _pair_heatmaps(
    rows: list[CellRow], data: ReportInput, metric: str = DEFAULT_METRIC
) -> list[Drawn]:
    """Every heatmap of ``rows`` compared on ``metric``: one per scenario, pair, mode and
    kind of page (``_heat_groups``), split by what else its cells vary (``heat_axes``).
    A group none of whose loads has the metric draws nothing (Chromium 72's LCP)."""
    out = []
    for (scenario, pair, mode, kind), group in sorted(_heat_groups(rows).items()):
        if metric != DEFAULT_METRIC and not any(r.n_ref or r.n_cand for r in group):
            continue
        rdim, cdim, split = heat_axes(group)
        parts: dict[tuple[str, ...], list[CellRow]] = {}
        for r in sorted(group, key=lambda r: tuple(_DIMS[d][2](r) for d in split)):
            parts.setdefault(tuple(_DIMS[d][1](r) for d in split), []).append(r)
        for values, grp in parts.items():
            axes = (rdim, cdim, values)
            out.append(
                _pair_heatmap(
                    grp,
                    scenario,
                    pair,
                    mode,
                    kind,
                    axes,
                    data.alpha,
                    data.correction,
                    data.out,
                    split=tuple(split),
                    metric=metric,
                )
            )
    return out


class MetricHeatmaps(ReportFigure):
    """The same heatmaps as :class:`PairHeatmaps` for each per-load figure asked for
    besides PLT (``ReportInput.metrics``: LCP, FCP, TTFB, ...), each cell's arms compared
    on the valid loads that have it, named and titled with the metric; their rows in
    ``metrics.csv`` (table.csv's columns and the metric). A paint metric and PLT side by
    side say whether a protocol's gain reaches what the user sees."""

    name = "metric-heatmaps"
    order = 11

    def draw(self, data: ReportInput) -> list[Drawn]:
        out: list[Drawn] = []
        table: list[dict[str, Any]] = []
        for metric in data.metrics:
            rows, _ = cell_rows(data.root, metric)
            out += _pair_heatmaps(rows, data, metric)
            table += [{"metric": metric, **r.columns()} for r in rows if r.pair]
        if table:
            with open(data.out / "metrics.csv", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=["metric", *COLUMNS], extrasaction="ignore")
                w.writeheader()
                w.writerows(table)
        return out


#: how a heatmap names a per-load figure (quicbed.spec.significance.METRICS)
METRIC_LABELS = {
    "plt_ms": "PLT",
    "fcp_ms": "FCP",
    "lcp_ms": "LCP",
    "speed_index_ms": "Speed Index",
    "visual_complete_ms": "visually complete",
    "ttfb_ms": "TTFB",
    "nav_load_ms": "navigation load",
    "onload_ms": "onLoad",
}


def _pair_heatmap(
    grp: list[CellRow],
    scenario: str,
    pair: str,
    mode: str,
    kind: str,
    axes: tuple[str, str, tuple[str, ...]],
    alpha: float,
    correction: str,
    out: Path,
    split: tuple[str, ...] = (),
    metric: str = DEFAULT_METRIC,
) -> Drawn:
    """One heatmap of one pair's cells (its correction across them): rates x pages with
    the reference study's title and name, or the axes ``heat_axes`` chose (``split``:
    the dimensions its group was split by, named in the title whatever their value).
    ``metric``: the per-load figure compared (PLT's heatmaps keep their names and titles;
    another's are named and titled with it)."""
    rdim, cdim, values = axes
    correct(grp, correction, alpha)
    classic = (rdim, cdim) == ("rate", "page")

    def ordered(dim: str) -> list[str]:
        label, key = _DIMS[dim][1], _DIMS[dim][2]
        return [label(r) for r in sorted({label(r): r for r in grp}.values(), key=key)]

    rows_, cols = ordered(rdim), ordered(cdim)
    cells = {
        (_DIMS[rdim][1](r), _DIMS[cdim][1](r)): HeatCell(
            pct=r.pct_diff, significant=r.significant, state=heat_state(r)
        )
        for r in grp
    }
    cond = grp[0]
    if classic:
        loss = _label_loss(cond.loss_pct, cond.loss_down_pct, cond.loss_up_pct)
        where = f"{cond.rtt_ms:g} ms, loss {loss}" + (
            f", jitter {cond.jitter_ms:g} ms {cond.jitter_kind}" if cond.jitter_ms else ""
        )
        if cond.background != "none":
            where += f", background {cond.background}"
        if cond.certificate != DEFAULT_CHAIN:
            where += f", certificate {cond.certificate}"
        if cond.origin_rtt or cond.server_time:
            where += f", {_label_origins(cond.origin_rtt, cond.server_time)}"
    else:  # what every cell of it shares
        fixed = [d for d in _DIMS if d not in (rdim, cdim)]
        where = ", ".join(
            (
                f"{_DIMS[d][0]} "
                if d in ("loss", "queue", "jitter", "background", "certificate")
                else ""
            )
            + _DIMS[d][1](cond)
            for d in fixed
            if (d != "jitter" or cond.jitter_ms)
            and (d != "background" or cond.background != "none" or d in split)
            and (d != "certificate" or cond.certificate != DEFAULT_CHAIN or d in split)
            and (d != "origins" or cond.origin_rtt or cond.server_time or d in split)
        )
    # a pair of browsers says which side loaded in which
    two = cond.ref_browser != cond.cand_browser
    in_ref, in_cand = (f" in {cond.ref_browser}", f" in {cond.cand_browser}") if two else ("", "")
    arms = f"{_arm_label(cond, 'ref')}{in_ref} vs {_arm_label(cond, 'cand')}{in_cand}"
    if not classic:  # arms of one stack differ by their settings: name them, and wrap
        arms = (
            f"{_arm_label(cond, 'ref', True)}{in_ref} vs {_arm_label(cond, 'cand', True)}{in_cand}"
        )
        where = textwrap.fill(where, 70, break_on_hyphens=False)
        arms = textwrap.fill(arms, 70, break_on_hyphens=False)
    label = METRIC_LABELS[metric]
    title = (
        (f"{label}: " if metric != DEFAULT_METRIC else "")
        + f"{scenario}: {where}"
        + f"\n{arms}, {mode}, {kind}; white: p >= {alpha:g}"
        + "\n"
        + textwrap.fill(" | ".join(sorted({r.software for r in grp})), 78)
    )
    tag = "" if pair == CLASSIC_PAIR else f"{pair.replace('/', '-vs-')}-"
    name = f"heatmap-{scenario}-{tag}{mode}-{kind}"
    of = "" if metric == DEFAULT_METRIC else f" {label}"
    if classic:
        name += "" if metric == DEFAULT_METRIC else f"-{metric}"
        extra = {} if metric == DEFAULT_METRIC else {"cbar": f"(TCP - QUIC) / QUIC{of} [%]"}
        paths = draw_heatmap(rows_, cols, cells, title, out / "figures" / name, **extra)
    else:
        name += f"-{rdim}-by-{cdim}" + "".join(f"-{_slug(v)}" for v in values)
        name += "" if metric == DEFAULT_METRIC else f"-{metric}"
        ref, cand = pair.split("/")
        paths = draw_heatmap(
            rows_,
            cols,
            cells,
            title,
            out / "figures" / name,
            xlabel=_DIMS[cdim][0],
            ylabel=_DIMS[rdim][0],
            cbar=f"({ref} - {cand}) / {cand}{of} [%]",
        )
    return Drawn(title, paths, figure_data(rows_, cols, cells, title), against_study(grp))


def against_study(rows: list[CellRow]) -> list[str]:
    """Per QUIC arm of a heatmap's cells, how it differs from the reference study's QUIC
    (each stack words its own; quicbed.servers.webserver.WebServer.against_study)."""
    notes: dict[str, str] = {}
    for r in rows:
        for name, a in (r.arms or {}).items():
            if name not in (r.ref, r.cand):
                continue
            cls = _stack(a.stack)
            text = cls.against_study(a) if cls is not None else None
            if text:
                notes.setdefault(name, text)
    return [f"{name}: {text}" for name, text in sorted(notes.items())]


class ModeHeatmaps(ReportFigure):
    """QUIC 0-RTT against QUIC 1-RTT where a scenario ran both modes."""

    name = "mode-heatmaps"
    order = 30

    def draw(self, data: ReportInput) -> list[Drawn]:
        return _mode_heatmaps(
            data.root,
            data.rows,
            data.page_order,
            data.alpha,
            data.test,
            data.correction,
            data.out,
        )


def _mode_heatmaps(
    root: Path,
    rows: list[CellRow],
    page_order: list[str],
    alpha: float,
    test: str,
    correction: str,
    out: Path,
) -> list[Drawn]:
    """QUIC 0-RTT against QUIC 1-RTT where a scenario ran both modes.

    Colour = (mean 1-RTT - mean 0-RTT) / mean 0-RTT x 100 (red: 0-RTT faster): the
    comparison of the two cells' samples of one QUIC arm by quicbed.analysis.stats.compare, with
    the spec's test, alpha and correction and the same masking as the protocol heatmaps.
    """
    by_key: dict[tuple[Any, ...], dict[str, CellRow]] = {}
    for r in rows:
        if not r.first_in_scenario:
            continue
        key = (r.scenario, r.rate_mbit, r.rtt_ms, r.loss_pct, r.jitter_ms, r.page)
        by_key.setdefault(key, {})[r.mode] = r
    pairs = {k: v for k, v in by_key.items() if {"0rtt", "1rtt"} <= set(v)}
    if not pairs:
        return []
    store = Store(root)
    figures = []
    try:
        quic = sorted(
            {
                a.name
                for v in pairs.values()
                for r in v.values()
                for a in r.arms.values()
                if a.transport == "udp"
            }
        )
        for scenario, arm, kind in itertools.product(
            sorted({k[0] for k in pairs}), quic, ("single-object", "multi-object")
        ):
            keys = [
                k
                for k in pairs
                if k[0] == scenario
                and page_kind(k[5]) == kind
                and all(arm in pairs[k][m].arms for m in ("0rtt", "1rtt"))
            ]
            if not keys:
                continue
            grp: list[ModeCell] = []
            for k in keys:
                zero, one = pairs[k]["0rtt"], pairs[k]["1rtt"]
                c = compare(
                    store.plts(one.cell_id, one.attempt, arm),
                    store.plts(zero.cell_id, zero.attempt, arm),
                    planned=(one.runs, zero.runs),
                    alpha=alpha,
                    test=test,
                    reference_arm=f"{arm} 1-RTT",
                    candidate_arm=f"{arm} 0-RTT",
                )
                failed = "failed" in (zero.status, one.status)
                grp.append(
                    ModeCell(key=k, status="failed" if failed else "done", **comparison_columns(c))
                )
            correct(grp, correction, alpha)
            cells = {
                (_label_rate(g.key[1]), g.key[5]): HeatCell(
                    pct=g.pct_diff, significant=g.significant, state=heat_state(g)
                )
                for g in grp
            }
            rates = sorted({k[1] for k in keys}, key=lambda v: (v is None, v or 0))
            pages = [p for p in page_order if any(k[5] == p for k in keys)]
            who = "QUIC" if arm == "h3" else arm
            title = (
                f"{scenario}: {who} 1-RTT vs 0-RTT, {kind}\n(1-RTT - 0-RTT) / 0-RTT; "
                f"red: 0-RTT faster; white: p >= {alpha:g}"
            )
            base = out / "figures" / f"heatmap-{scenario}-{arm}-0rtt-vs-1rtt-{kind}"
            labels = [_label_rate(v) for v in rates]
            paths = draw_heatmap(
                labels, pages, cells, title, base, cbar="(1-RTT - 0-RTT) / 0-RTT [%]"
            )
            figures.append(Drawn(title, paths, figure_data(labels, pages, cells, title)))
    finally:
        store.close()
    return figures


def _explain_pages(root: Path, rows: list[CellRow], out: Path) -> None:
    """``out/explain/<cell>/``: the explain page (quicbed.analysis.explain, default loads) of
    every finished cell whose loads were traced, so the report's links always resolve
    and need nothing but the results folder. Drawn deterministically; verify does not
    compare them (they are not heatmaps, and traces may be left out of a package)."""

    store = Store(root)
    try:
        for r in rows:
            if not r.first or r.status != "done" or not traced(r.loads):
                continue
            try:
                loads, attempt, cfg = choose(store, r.cell_id, None)
            except QuicbedError as exc:  # e.g. an arm without a valid load
                r.explain_problem = str(exc)
                continue
            write(out / "explain" / r.cell_id, r.cell_id, attempt, cfg, loads)
            for other in rows:
                if other.cell_id == r.cell_id:
                    other.explain = f"explain/{r.cell_id}/index.html"
    finally:
        store.close()


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _set_only(v: Any) -> Any:
    """``v`` without the keys and items that hold nothing (None): what a reader of the
    page needs, without a ``null`` standing where a word should."""
    if isinstance(v, dict):
        return {k: _set_only(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_set_only(x) for x in v if x is not None]
    return v


#: provenance keys that say when and how an attempt ran, not what measured it: the group's
#: record shown in full is its first attempt's, without them
PER_ATTEMPT = ("collected", "argv")


def provenance_groups(
    provs: dict[tuple[str, int], dict[str, Any] | None],
    receipts: dict[tuple[str, int], dict[str, Any] | None] | None = None,
) -> list[dict[str, Any]]:
    """The provenance of every attempt the report uses, grouped by set-up: attempts of
    one set-up identity (quicbed.results.provenance.setup_identity: software builds, kernel,
    hardware, sysctls, offloads, shaper; never PIDs, times or paths) share a group, its
    record shown in full being its first attempt's. An attempt without a receipt or
    without its instruments' record (it failed before its link was measured, or before
    its loads began: nothing of it is compared) joins the first set-up that agrees on
    everything else. Each group says what matters first
    (quicbed's commit, testbed, kernel, browser and servers) and which cells it
    measured; a report drawn from attempts of different set-ups shows that at its top
    (Pantheon puts it there), with what tells them apart (setup_differences)."""
    receipts = receipts or {}
    idents = {k: setup_identity(p, receipts.get(k)) for k, p in provs.items()}

    def key(ident: dict[str, Any]) -> str:
        return json.dumps(ident, sort_keys=True, default=str)

    # the parts only an attempt that got so far records: its link's (from its receipt)
    # and its instruments' (recorded as its loads begin; none at trace level none)
    later = [k for k in ("link", "traces") if any(k in i for i in idents.values())]

    def rest(ident: dict[str, Any]) -> str:
        return key({k: v for k, v in ident.items() if k not in later})

    measured: dict[str, str] = {}  # identity without those parts -> the first one with both
    for ident in idents.values():
        if all(k in ident for k in later):
            measured.setdefault(rest(ident), key(ident))
    groups: dict[str, dict[str, Any]] = {}
    for (cid, attempt), prov in provs.items():
        p = prov or {}
        ident = idents[(cid, attempt)]
        whole = all(k in ident for k in later)
        gk = key(ident) if whole else measured.get(rest(ident), key(ident))
        g = groups.get(gk)
        if g is None:
            sw, git = p.get("software") or {}, p.get("git") or {}
            tb = measured_on(prov)
            g = groups[gk] = {
                "id": f"P{len(groups) + 1}",
                "provenance": {k: v for k, v in p.items() if k not in PER_ATTEMPT},
                "setup": ident,
                "attempts": [],
                "collected": [],
                "commands": [],
                "quicbed": sw.get("quicbed"),
                "git": _git_label(git),
                "testbed": tb["label"],
                "hardware": tb["hardware"],
                "kernel": tb["kernel"],
                "browser": None,
                "browser_said": False,
            }
        if g["browser"] is None or (not g["browser_said"] and p.get("components")):
            # one source for the whole set-up: the build the browser's driver reported
            # where any attempt of it loaded a page, else the installed version (an
            # attempt that failed before its loads has only that)
            g["browser"], g["browser_said"] = _browser_label(p), bool(p.get("components"))
        g["attempts"].append(f"{cid}#{attempt}")
        if p.get("collected"):
            g["collected"].append(p["collected"])
        cmd = " ".join(map(str, p.get("argv") or []))
        if cmd and cmd not in g["commands"]:
            g["commands"].append(cmd)
    out = list(groups.values())
    for g in out:
        g["collected"] = [min(g["collected"]), max(g["collected"])] if g["collected"] else []
        g.pop("browser_said", None)
    return out


def _browser_label(p: dict[str, Any]) -> str | None:
    """The browser builds an attempt's provenance names: each arm's, as its driver
    reported it, else the installed Chromium's version."""
    comp = p.get("components") or {}
    said = ", ".join(dict.fromkeys((comp.get("browsers") or {}).values())) or comp.get("browser")
    if said:
        return str(said)
    version = (component_identity((p.get("software") or {}).get("chromium")) or {}).get("version")
    return None if version is None else str(version)


def setup_differences(groups: list[dict[str, Any]]) -> list[str]:
    """What tells the set-ups of ``groups`` apart, by part of the set-up identity and its
    first level (``software quicbed-quiche-server``, ``machine kernel``, ``sysctls
    net.ipv4.tcp_ecn``): the warning says where to look, not only that they differ."""
    idents = [g["setup"] for g in groups]
    out: dict[str, None] = {}
    for part in dict.fromkeys(k for i in idents for k in i):
        vals = [i.get(part) for i in idents]
        if all(v == vals[0] for v in vals):
            continue
        subs = [v for v in vals if isinstance(v, dict)]
        if len(subs) != len(vals):
            out[part] = None
            continue
        for sub in dict.fromkeys(k for v in subs for k in v):
            if any(v.get(sub) != subs[0].get(sub) for v in subs):
                out[f"{part} {sub}"] = None
    return list(out)


def _write_html(
    report: Report,
    sweep: dict[str, Any] | None,
    root: Path,
    alpha: float,
    correction: str,
    source: str,
) -> None:
    env = Environment(
        loader=PackageLoader("quicbed", "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["f"] = _fmt
    env.filters["p"] = lambda v: "-" if v is None else f"{v:.3g}"
    store = Store(root)
    try:
        provs: dict[tuple[str, int], dict[str, Any] | None] = {}
        for r in report.rows:
            att = store.attempt(r.cell_id, r.attempt)
            provs[(r.cell_id, r.attempt)] = att.provenance
            r.invalid_reasons = sorted({x.reason for x in r.loads if not x.valid and not x.warmup})
            r.records = _records(r)
            measured = [(x.arm, x.valid, load_proof(x.detail)) for x in r.loads if not x.warmup]
            r.link_line = cell_line(
                [p for _, _, p in measured], att.waited_s, shortfall(measured, r.runs)
            )
            r.load_proofs = [
                {"arm": x.arm, "rep": x.rep, "plt_ms": x.plt_ms, "valid": x.valid}
                | link_figures(load_proof(x.detail))
                for x in sorted(r.loads, key=lambda x: x.seq)
                if not x.warmup and load_proof(x.detail)
            ]
            r.rerun = f"quicbed cell --from {source} --cell {r.cell_id}"
            tb = (att.provenance or {}).get("testbed") or {}
            r.rerun += described(tb.get("kind")).rerun_options(tb)  # on the same kind
        for c in report.transfers.cells:
            key = (c.cell_id, c.attempt)
            provs[key] = store.attempt(*key).provenance
        receipts = {key: store.attempt(*key).receipt for key in provs}
    finally:
        store.close()
    groups = provenance_groups(provs, receipts)
    (report.out / "provenance.json").write_text(json.dumps(groups, indent=1, sort_keys=True) + "\n")
    for g in groups:  # the page leaves out what is unset: provenance.json has every key
        g["json"] = json.dumps(_set_only(g["provenance"]), indent=1, sort_keys=True)
    html = env.get_template("report.html.j2").render(
        rows=report.rows,
        figures=report.figures,
        sweep=sweep,
        alpha=alpha,
        correction=correction,
        provenances=groups,
        setup_differences=setup_differences(groups),
        testbeds=report.testbeds,
        testbed_warnings=report.testbed_warnings,
        queue_warnings=report.queue_warnings,
        groups=report.groups,
        transfers=report.transfers,
        cpu=report.cpu,
        profile=report.profile,
        speedup_bins=[label for _, _, label in report_transfers.SPEEDUP_BINS],
        advertised=report.advertised,
        version=__version__,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        root=source,
        default_chain=DEFAULT_CHAIN,
    )
    (report.out / "index.html").write_text(html)
