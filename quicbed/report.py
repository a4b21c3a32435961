"""The report: statistics, tables, heatmaps and an HTML page, from the store only.

A pure function of the results folder: it never reads the memory of a run, so a
replication package can regenerate it. ``DIR/report/`` (or another folder) is
rebuilt from scratch. Per cell the latest attempt is used (the report says so and
counts attempts). ``figures.json`` holds what each heatmap shows, cell by cell, so
regenerated figures can be compared by their numbers as well as by their bytes.
"""

from __future__ import annotations

import base64
import csv
import functools
import itertools
import json
import shutil
import textwrap
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from quicbed import __version__
from quicbed.errors import QuicbedError
from quicbed.plots import HeatCell, draw_heatmap, figure_data
from quicbed.results import SWEEP_FILE, measured_on
from quicbed.stats import Comparison, adjust, compare
from quicbed.store import Store

COLUMNS = [
    "scenario", "cell_id", "attempt", "attempts", "status", "page", "rate_mbit", "rtt_ms",
    "loss_pct", "jitter_ms", "jitter_kind", "queue", "mode", "runs", "cc",
    "pair", "ref", "cand", "ref_stack", "cand_stack", "ref_cc", "cand_cc",
    "n_ref", "mean_ref", "sd_ref", "median_ref", "n_cand", "mean_cand", "sd_cand", "median_cand",
    "pct_diff", "welch_p", "mannwhitney_p", "p_used", "p_adjusted", "significant", "testable",
    "boot_diff_low", "boot_diff_high", "receipt_passed", "invalid_ref", "invalid_cand", "problem",
]  # fmt: skip
#: the pair of the reference study: its heatmaps keep the names they always had
CLASSIC_PAIR = "h2/h3"


@dataclass
class Report:
    out: Path
    rows: list[dict[str, Any]]
    figures: list[dict[str, Any]] = field(default_factory=list)
    #: the testbeds that measured the reported attempts, and what to beware of
    testbeds: list[dict[str, Any]] = field(default_factory=list)
    testbed_warnings: list[str] = field(default_factory=list)


def testbeds(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The testbeds behind the reported attempts (each with a colour and its cells), and
    a warning for every link condition measured on more than one hardware type: its
    cells differ by machine as well as by arm, page or setting."""
    cells = [r for r in rows if r["_first"]]
    found: dict[str, dict[str, Any]] = {}
    for r in cells:
        t = r["_testbed"]
        entry = found.setdefault(t["id"], dict(t, cells=0))
        entry["cells"] += 1
    for i, t in enumerate(found.values()):
        t["colour"] = TESTBED_COLOURS[i % len(TESTBED_COLOURS)]
    for r in rows:
        r["_testbed_colour"] = found[r["_testbed"]["id"]]["colour"]
    by_cond: dict[str, dict[str, list[str]]] = {}
    for r in cells:
        by_cond.setdefault(r["_condition"], {}).setdefault(r["_testbed"]["hardware"], []).append(
            r["cell_id"]
        )
    warnings = []
    for cond, hw in by_cond.items():
        if len(hw) > 1:
            c = json.loads(cond)
            what = (f"{_label_rate(c['rate_mbit'])}, RTT {c['rtt_ms']} ms, loss {c['loss_pct']} %"
                    f", jitter {c['jitter_ms']} ms, queue {c['queue']}")  # fmt: skip
            on = "; ".join(f"{h}: {len(ids)} cell(s)" for h, ids in hw.items())
            warnings.append(f"the condition {what} was measured on different hardware ({on}): "
                            "compare its cells with care")  # fmt: skip
    return list(found.values()), warnings


#: one background per testbed in the report's cell table (light, readable under text)
TESTBED_COLOURS = ("#e8f0fe", "#fce8e6", "#e6f4ea", "#fef7e0", "#f3e8fd", "#e4f7fb")


def comparison_columns(c: Comparison) -> dict[str, Any]:
    """The table's columns of one comparison (quicbed.stats.compare computed them all;
    ``p_adjusted`` and the final ``significant`` come per heatmap, in ``build``)."""
    out: dict[str, Any] = {}
    for key, s in (("ref", c.tcp), ("cand", c.quic)):
        out.update({f"n_{key}": s.n, f"mean_{key}": s.mean, f"sd_{key}": s.sd,
                    f"median_{key}": s.median})  # fmt: skip
    out.update(pct_diff=c.pct_diff, welch_p=c.welch_p, mannwhitney_p=c.mannwhitney_p,
               p_used=c.p, testable=c.testable, significant=c.significant,
               boot_diff_low=c.boot_diff_low, boot_diff_high=c.boot_diff_high)  # fmt: skip
    return out


def page_kind(page: str) -> str:
    """``single-object`` or ``multi-object``, by the page's object count in
    workloads/pages.yaml (``1mbx1`` is one object), as the reference study split them."""
    pages = _pages()
    if page not in pages:
        return "multi-object"  # not a page of ours (an old folder): the HAR-less default
    return "single-object" if pages[page].images == 1 else "multi-object"


@functools.cache
def _pages() -> dict[str, Any]:
    from quicbed import workloads

    return dict(workloads.load().pages)


def heat_state(row: dict[str, Any]) -> str:
    """How a heatmap draws a cell (quicbed.plots.cell_look): ``fail`` the attempt failed,
    ``n/a`` too few valid runs for a number, ``untested`` too few runs for the test to
    reach alpha, ``ok`` a number and a verdict."""
    if row["status"] == "failed":
        return "fail"
    if row["pct_diff"] is None:
        return "n/a"
    if row.get("testable") is False:
        return "untested"
    return "ok"


def correct(rows: list[dict[str, Any]], correction: str, alpha: float) -> None:
    """Adjust the p-values of one heatmap's rows and set their verdicts: a cell too small
    for its test is not a test and does not count in the correction."""
    adj = adjust([r["p_used"] if r.get("testable") else None for r in rows], correction)
    for r, p in zip(rows, adj, strict=True):
        r["p_adjusted"] = p
        r["significant"] = None if p is None else p < alpha


def _planned_scenarios(spec: dict[str, Any]) -> dict[str, list[str]]:
    """cell_id -> scenarios, by planning the folder's spec again (folders of schema 1).
    A spec this quicbed no longer accepts (a rule added since) plans nothing: its cells
    are reported under "cells" rather than not at all."""
    from pydantic import ValidationError

    from quicbed.spec import SweepSpec, plan

    out: dict[str, list[str]] = {}
    try:
        planned = plan(SweepSpec(**spec))
    except (ValidationError, QuicbedError):
        return out
    for pc in planned:
        out.setdefault(pc.config.cell_id(), []).append(pc.scenario)
    return out


def cell_rows(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One row per cell (latest attempt) and pair of arms compared in it (a cell of one
    arm: one row without a pair), with every statistic; corrections not yet applied."""
    from quicbed.arms import parse_pairs
    from quicbed.cellconfig import make_cell
    from quicbed.results import compare_cell

    sweep = json.loads((root / SWEEP_FILE).read_text()) if (root / SWEEP_FILE).exists() else None
    stats_cfg = (sweep or {}).get("spec", {}).get("statistics", {})
    alpha = stats_cfg.get("alpha", 0.01)
    test = stats_cfg.get("test", "welch")
    extra = parse_pairs(stats_cfg.get("pairs"))
    store = Store(root)
    rows: list[dict[str, Any]] = []
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
            att = latest[cid]
            cond = cfg["condition"]
            row: dict[str, Any] = {
                "scenario": (scenarios.get(cid) or ["cells"])[0], "cell_id": cid,
                "attempt": att["attempt"], "attempts": att["attempt"], "status": att["status"],
                "page": cfg["page"], "rate_mbit": cond["rate_mbit"],
                "rtt_ms": (cond["rtt_ms"] if cond["rtt_ms"] is not None else
                           (cond["delay_down_ms"] or 0) + (cond["delay_up_ms"] or 0)),
                "loss_pct": cond["loss_pct"], "jitter_ms": cond["jitter_ms"],
                "jitter_kind": cond["jitter_kind"], "queue": cond["queue"], "mode": cfg["mode"],
                "runs": cfg["runs"], "problem": att["problem"] or "",
            }  # fmt: skip
            receipt = att["receipt"]
            row["receipt_passed"] = None if receipt is None else receipt["passed"]
            runs = store.runs(cid, att["attempt"])
            cell = make_cell(**cfg)
            arms = {a.name: a for a in cell.resolved_arms()}
            row["cc"] = cell.tcp_cc()
            invalid = {a: sum(1 for r in runs if r["arm"] == a and not r["valid"]
                              and not r["warmup"]) for a in arms}  # fmt: skip
            row["_software"] = software_label((att["provenance"] or {}).get("components"),
                                              list(arms.values()))  # fmt: skip
            row.update(_runs=runs, _receipt=receipt, _invalid=invalid, _warnings=[], _arms=arms,
                       _first=True, pair="", _testbed=measured_on(att["provenance"]),
                       _condition=json.dumps(cond, sort_keys=True))  # fmt: skip
            comps = compare_cell(store, cid, att["attempt"], cell,
                                 [p for p in extra if set(p) <= set(arms)], alpha,
                                 test)  # fmt: skip
            if not comps:
                rows.append(row)
            for i, (pair, c) in enumerate(comps.items()):
                ref, cand = pair.split("/")
                prow = dict(row, _first=i == 0, pair=pair, ref=ref, cand=cand,
                            ref_stack=arms[ref].stack, cand_stack=arms[cand].stack,
                            ref_cc=arms[ref].cc, cand_cc=arms[cand].cc,
                            invalid_ref=invalid[ref], invalid_cand=invalid[cand],
                            _warnings=c.warnings)  # fmt: skip
                prow.update(comparison_columns(c))
                if att["status"] == "done" and c.problem:
                    prow["problem"] = c.problem
                rows.append(prow)
            # a cell two scenarios plan is in both (its heatmaps, table rows); its receipt,
            # testbed and explain page once (_first: the cell's first row)
            own = rows[first:]
            for r in own:
                r["_first_in_scenario"] = r["_first"]
            for other in (scenarios.get(cid) or [])[1:]:
                rows += [dict(r, scenario=other, _first=False) for r in own]
    finally:
        store.close()
    return rows, sweep


def _heat_groups(
    rows: list[dict[str, Any]],
) -> dict[tuple[str, str, str, str], list[dict[str, Any]]]:
    """(scenario, pair, mode, single|multi) -> its rows: one heatmap each."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if not r["pair"]:
            continue
        kind = page_kind(r["page"])
        groups.setdefault((r["scenario"], r["pair"], r["mode"], kind), []).append(r)
    return groups


def _arm_label(row: dict[str, Any], key: str) -> str:
    """``h2 (TCP)``, ``h3 (QUIC)`` as the reference study wrote them; other arms by stack
    and CC, so a figure says what it compares."""
    arm, stack = row[key], row[f"{key}_stack"]
    if arm == "h2" and stack == "apache":
        return "h2 (TCP)"
    if arm == "h3" and stack == "quic-go":
        return "h3 (QUIC)"
    return f"{arm} ({stack}, {row[f'{key}_cc']})"


def software_label(components: dict[str, Any] | None, arms: list[Any]) -> str:
    """The browser, each arm's server and its protocol version, as one caption line: a
    heatmap says what software produced it (Chrome 72 with gQUIC Q039 is not Chromium
    of today with QUIC v1)."""
    from quicbed.servers.gquic import VERSIONS as GQUIC_VERSIONS

    comp = components or {}
    parts = [str(comp.get("browser") or "browser ?").replace("HeadlessChrome/", "Chrome ")]
    for a in arms:
        c = comp.get(a.name) or {}
        start = c.get("start") or {}
        if c.get("version"):  # Apache: "Server version: Apache/2.4.71 (Debian)"
            server = str(c["version"]).split(": ")[-1].split(" ")[0]
        elif start.get("quic_go_version"):
            server = f"quic-go {start['quic_go_version']}" + (
                " patched" if start.get("quic_go_patch") else ""
            )
        else:
            server = str(start.get("server") or c.get("server") or a.stack)
        if a.transport == "tcp":
            proto = f"TLS {a.params.get('tls', '1.3')}"
        else:
            proto = (
                f"gQUIC {a.params.get('quic_version', GQUIC_VERSIONS[0])}"
                if a.protocol == "gquic"
                else "QUIC v1"
            )
        parts.append(f"{a.name}: {server}, {proto}")
    return "; ".join(parts)


def _label_rate(v: float | None) -> str:
    return "unlimited" if v is None else f"{v:g} Mbit/s"


def build(root: Path, out: Path | None = None, source: str | None = None) -> Report:
    """Rebuild the report of the results folder ``root`` into ``out`` (default
    ``root/report``). ``source`` is how the report names the results in its text and
    its rerun commands (default: the folder's path; a package names its archive)."""
    root = Path(root)
    rows, sweep = cell_rows(root)
    if not rows:
        raise QuicbedError(f"{root} has no measured cells to report")
    stats_cfg = (sweep or {}).get("spec", {}).get("statistics", {})
    alpha = stats_cfg.get("alpha", 0.01)
    correction = stats_cfg.get("correction", "none")
    from quicbed import workloads

    page_order = list(workloads.load().pages)
    out = Path(out) if out else root / "report"
    if out.exists() and not out.is_dir():
        raise QuicbedError(f"{out} is a file; the report is a folder (move the file away)")
    if out.exists():
        shutil.rmtree(out)
    (out / "figures").mkdir(parents=True)
    report = Report(out=out, rows=rows)
    for (scenario, pair, mode, kind), grp in sorted(_heat_groups(rows).items()):
        correct(grp, correction, alpha)
        rates = sorted({r["rate_mbit"] for r in grp}, key=lambda v: (v is None, v or 0))
        pages = [p for p in page_order if any(r["page"] == p for r in grp)]
        cells = {
            (_label_rate(r["rate_mbit"]), r["page"]): HeatCell(
                pct=r["pct_diff"], significant=r["significant"], state=heat_state(r)
            )
            for r in grp
        }
        cond = grp[0]
        title = (f"{scenario}: {cond['rtt_ms']:g} ms, loss {cond['loss_pct']:g} %"
                 + (f", jitter {cond['jitter_ms']:g} ms {cond['jitter_kind']}"
                    if cond["jitter_ms"] else "")
                 + f"\n{_arm_label(cond, 'ref')} vs {_arm_label(cond, 'cand')}, {mode}, "
                 f"{kind}; white: p >= {alpha:g}"
                 + "\n" + textwrap.fill(" | ".join(sorted({r["_software"] for r in grp})),
                                         78))  # fmt: skip
        tag = "" if pair == CLASSIC_PAIR else f"{pair.replace('/', '-vs-')}-"
        base = out / "figures" / f"heatmap-{scenario}-{tag}{mode}-{kind}"
        labels = [_label_rate(v) for v in rates]
        paths = draw_heatmap(labels, pages, cells, title, base)
        report.figures.append(_figure(title, paths, figure_data(labels, pages, cells, title)))
    test = stats_cfg.get("test", "welch")
    report.figures += _mode_heatmaps(root, rows, page_order, alpha, test, correction, out)
    _explain_pages(root, rows, out)
    with open(out / "table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    report.testbeds, report.testbed_warnings = testbeds(rows)
    with open(out / "testbeds.csv", "w", newline="") as f:
        tw = csv.writer(f)
        tw.writerow(["cell_id", "attempt", "testbed", "hardware", "kernel", "image"])
        for r in rows:
            if r["_first"]:
                t = r["_testbed"]
                tw.writerow([r["cell_id"], r["attempt"], t["label"], t["hardware"], t["kernel"],
                            t["image"]])  # fmt: skip
    shown = [{k: f[k] for k in ("png", "svg", "shows")} for f in report.figures]
    (out / "figures.json").write_text(json.dumps(shown, indent=1) + "\n")
    _write_html(report, sweep, root, alpha, correction, source or str(root))
    return report


def _figure(title: str, paths: list[Path], shows: dict[str, Any]) -> dict[str, Any]:
    """A figure of the HTML report: the PNG inlined (works offline, in a package)."""
    data = base64.b64encode(paths[0].read_bytes()).decode()
    return {"title": title, "png": paths[0].name, "svg": paths[1].name, "data": data,
            "shows": shows}  # fmt: skip


def _mode_heatmaps(
    root: Path, rows: list[dict[str, Any]], page_order: list[str], alpha: float, test: str,
    correction: str, out: Path,
) -> list[dict[str, Any]]:  # fmt: skip
    """QUIC 0-RTT against QUIC 1-RTT where a scenario ran both modes.

    Colour = (mean 1-RTT - mean 0-RTT) / mean 0-RTT x 100 (red: 0-RTT faster): the
    comparison of the two cells' samples of one QUIC arm by quicbed.stats.compare, with
    the spec's test, alpha and correction and the same masking as the protocol heatmaps.
    """
    by_key: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if not r["_first_in_scenario"]:
            continue
        key = (r["scenario"], r["rate_mbit"], r["rtt_ms"], r["loss_pct"], r["jitter_ms"], r["page"])
        by_key.setdefault(key, {})[r["mode"]] = r
    pairs = {k: v for k, v in by_key.items() if {"0rtt", "1rtt"} <= set(v)}
    if not pairs:
        return []
    store = Store(root)
    figures = []
    try:
        quic = sorted({a.name for v in pairs.values() for r in v.values()
                       for a in r["_arms"].values() if a.transport == "udp"})  # fmt: skip
        for scenario, arm, kind in itertools.product(
            sorted({k[0] for k in pairs}), quic, ("single-object", "multi-object")
        ):
            keys = [k for k in pairs if k[0] == scenario and page_kind(k[5]) == kind
                    and all(arm in pairs[k][m]["_arms"] for m in ("0rtt", "1rtt"))]  # fmt: skip
            if not keys:
                continue
            grp = []
            for k in keys:
                zero, one = pairs[k]["0rtt"], pairs[k]["1rtt"]
                c = compare(store.plts(one["cell_id"], one["attempt"], arm),
                            store.plts(zero["cell_id"], zero["attempt"], arm),
                            planned=(one["runs"], zero["runs"]), alpha=alpha, test=test,
                            tcp_arm=f"{arm} 1-RTT", quic_arm=f"{arm} 0-RTT")  # fmt: skip
                failed = "failed" in (zero["status"], one["status"])
                grp.append({"_key": k, "status": "failed" if failed else "done",
                            **comparison_columns(c)})  # fmt: skip
            correct(grp, correction, alpha)
            cells = {(_label_rate(g["_key"][1]), g["_key"][5]): HeatCell(
                        pct=g["pct_diff"], significant=g["significant"], state=heat_state(g))
                     for g in grp}  # fmt: skip
            rates = sorted({k[1] for k in keys}, key=lambda v: (v is None, v or 0))
            pages = [p for p in page_order if any(k[5] == p for k in keys)]
            who = "QUIC" if arm == "h3" else arm
            title = (f"{scenario}: {who} 1-RTT vs 0-RTT, {kind}\n(1-RTT - 0-RTT) / 0-RTT; "
                     f"red: 0-RTT faster; white: p >= {alpha:g}")  # fmt: skip
            base = out / "figures" / f"heatmap-{scenario}-{arm}-0rtt-vs-1rtt-{kind}"
            labels = [_label_rate(v) for v in rates]
            paths = draw_heatmap(labels, pages, cells, title, base)
            figures.append(_figure(title, paths, figure_data(labels, pages, cells, title)))
    finally:
        store.close()
    return figures


def _explain_pages(root: Path, rows: list[dict[str, Any]], out: Path) -> None:
    """``out/explain/<cell>/``: the explain page (quicbed.explain, default loads) of
    every finished cell whose loads were traced, so the report's links always resolve
    and need nothing but the results folder. Drawn deterministically; verify does not
    compare them (they are not heatmaps, and traces may be left out of a package)."""
    from quicbed.explain import choose, traced, write

    store = Store(root)
    try:
        for r in rows:
            if not r["_first"] or r["status"] != "done" or not traced(r["_runs"]):
                continue
            try:
                loads, attempt, cfg = choose(store, r["cell_id"], None)
            except QuicbedError as exc:  # e.g. an arm without a valid load
                r["_explain_problem"] = str(exc)
                continue
            write(out / "explain" / r["cell_id"], r["cell_id"], attempt, cfg, loads)
            for other in rows:
                if other["cell_id"] == r["cell_id"]:
                    other["_explain"] = f"explain/{r['cell_id']}/index.html"
    finally:
        store.close()


def _fmt(v: Any, digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


#: provenance keys that differ between attempts of one set-up (when, and the command)
PER_ATTEMPT = ("collected", "argv")


def provenance_groups(provs: dict[tuple[str, int], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """The provenance of every attempt the report uses, grouped by set-up: attempts whose
    provenance is the same but for when they were collected and the command that ran
    them share a group. Each group says what matters first (quicbed's commit, testbed,
    kernel, browser and servers) and which cells it measured; a report drawn from
    attempts of different set-ups shows that at its top (Pantheon puts it there)."""
    groups: dict[str, dict[str, Any]] = {}
    for (cid, attempt), prov in provs.items():
        p = prov or {}
        same = {k: v for k, v in p.items() if k not in PER_ATTEMPT}
        key = json.dumps(same, sort_keys=True, default=str)
        g = groups.get(key)
        if g is None:
            sw, git = p.get("software") or {}, p.get("git") or {}
            tb = measured_on(prov)
            g = groups[key] = {
                "id": f"P{len(groups) + 1}", "provenance": same, "attempts": [],
                "collected": [], "commands": [],
                "quicbed": sw.get("quicbed"),
                "git": (git.get("sha") or "?")[:12] + (" (dirty)" if git.get("dirty") else ""),
                "testbed": tb["label"], "hardware": tb["hardware"], "kernel": tb["kernel"],
                "browser": (p.get("components") or {}).get("browser") or sw.get("chromium"),
            }  # fmt: skip
        g["attempts"].append(f"{cid}#{attempt}")
        if p.get("collected"):
            g["collected"].append(p["collected"])
        cmd = " ".join(map(str, p.get("argv") or []))
        if cmd and cmd not in g["commands"]:
            g["commands"].append(cmd)
    out = list(groups.values())
    for g in out:
        g["collected"] = [min(g["collected"]), max(g["collected"])] if g["collected"] else []
    return out


def _write_html(
    report: Report, sweep: dict[str, Any] | None, root: Path, alpha: float, correction: str,
    source: str,
) -> None:  # fmt: skip
    env = Environment(
        loader=PackageLoader("quicbed", "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["f"] = _fmt
    env.filters["p"] = lambda v: "-" if v is None else f"{v:.3g}"
    store = Store(root)
    try:
        provs: dict[tuple[str, int], dict[str, Any] | None] = {}
        for r in report.rows:
            att = store.attempt(r["cell_id"], r["attempt"])
            provs[(r["cell_id"], r["attempt"])] = att["provenance"]
            r["_invalid_reasons"] = sorted({x["reason"] for x in r["_runs"]
                                            if not x["valid"] and not x["warmup"]})  # fmt: skip
            r["_rerun"] = f"quicbed cell --from {source} --cell {r['cell_id']}"
            tb = (att["provenance"] or {}).get("testbed") or {}
            if tb.get("kind") == "ssh":  # measured on hosts: rerun on the same kind
                r["_rerun"] += f" --testbed ssh --hosts {tb.get('source') or 'HOSTS'}"
    finally:
        store.close()
    groups = provenance_groups(provs)
    (report.out / "provenance.json").write_text(json.dumps(groups, indent=1, sort_keys=True) + "\n")
    for g in groups:
        g["json"] = json.dumps(g["provenance"], indent=1, sort_keys=True)
    html = env.get_template("report.html.j2").render(
        rows=report.rows, figures=report.figures, sweep=sweep, alpha=alpha,
        correction=correction, provenances=groups,
        testbeds=report.testbeds, testbed_warnings=report.testbed_warnings,
        version=__version__, created=datetime.now(UTC).isoformat(timespec="seconds"),
        root=source,
    )  # fmt: skip
    (report.out / "index.html").write_text(html)
