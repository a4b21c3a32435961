"""The report from a store with known runs: numbers, heatmaps, CSV, HTML."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from quicbed.model.link import make_condition
from quicbed.report.build import build
from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.spec.cellconfig import make_cell


def _fill(root: Path, mode: str, h2: list[float], h3: list[float], runs: int = 0) -> str:
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36),
        page="5kb",
        runs=runs or len(h3),
        warmup=0,
        mode=mode,
    )
    store = Store(root, create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    att = store.new_attempt(cid, {"git": {"sha": "x"}})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    seq = 0
    for arm, values in (("h2", h2), ("h3", h3)):
        for rep, v in enumerate(values):
            store.add_run(
                RunRow(
                    cell_id=cid,
                    attempt=att,
                    arm=arm,
                    rep=rep,
                    seq=seq,
                    warmup=False,
                    valid=True,
                    plt_ms=v,
                ),
                None,
            )
            seq += 1
    store.add_run(
        RunRow(
            cell_id=cid,
            attempt=att,
            arm="h3",
            rep=99,
            seq=seq,
            warmup=False,
            valid=False,
            reason="protocol h2 on the h3 arm",
            plt_ms=1.0,
        ),
        None,
    )
    store.finish_attempt(cid, att, "done")
    store.close()
    return cid


def test_report_numbers_figures_and_html(tmp_path: Path) -> None:
    _fill(tmp_path, "0rtt", [200.0, 210, 220, 230], [100.0, 101, 102, 103])
    _fill(tmp_path, "1rtt", [200.0, 210, 220, 230], [150.0, 151, 152, 153])
    rep = build(tmp_path)
    rows = list(csv.DictReader((tmp_path / "report" / "table.csv").read_text().splitlines()))
    assert len(rows) == 2
    r0 = next(r for r in rows if r["mode"] == "0rtt")
    assert float(r0["pct_diff"]) == pytest.approx((215 - 101.5) / 101.5 * 100)
    # the invalid run is counted, not used
    assert r0["n_cand"] == "4" and r0["invalid_cand"] == "1" and r0["pair"] == "h2/h3"
    assert r0["significant"] == "True"
    titles = [f["title"] for f in rep.figures]
    assert len(titles) == 3 and any("1-RTT vs 0-RTT" in t for t in titles)
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count('<figure class="heatmap">') == 3
    assert "protocol h2 on the h3 arm" in html and "quicbed cell --from" in html
    assert "http://" not in html and "https://" not in html  # self-contained, no CDN
    mode_svg = tmp_path / "report" / "figures" / "heatmap-cells-h3-0rtt-vs-1rtt-single-object.svg"
    # the colour bar says what the colour is: 1-RTT against 0-RTT, not TCP against QUIC
    # (matplotlib's SVG keeps each text as a comment beside its paths)
    svg = mode_svg.read_text()
    assert "(1-RTT - 0-RTT) / 0-RTT [%]" in svg and "(TCP - QUIC)" not in svg
    protocol_svg = mode_svg.with_name("heatmap-cells-0rtt-single-object.svg")
    assert "(TCP - QUIC) / QUIC [%]" in protocol_svg.read_text()


def test_report_row_and_heatmap_per_pair(tmp_path: Path) -> None:
    """Three arms: each QUIC arm against the TCP reference, plus a pair asked for by name;
    one table row and one heatmap per pair, each saying which stacks it compares."""
    import json

    from quicbed.results.folder import SWEEP_FILE
    from quicbed.spec.arms import ArmSettings

    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36),
        page="5kb",
        runs=4,
        warmup=0,
        arms=("h2", "h3", "h3-n2"),
        arm_settings={"h3-n2": ArmSettings(stack="quic-go", cubic_n=2)},
    )
    store = Store(tmp_path, create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    att = store.new_attempt(cid, {"git": {"sha": "x"}})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    plts = {"h2": [200.0, 210, 220, 230], "h3": [100.0, 101, 102, 103], "h3-n2": [90.0, 91, 92, 93]}
    seq = 0
    for arm, values in plts.items():
        for rep, v in enumerate(values):
            store.add_run(
                RunRow(
                    cell_id=cid,
                    attempt=att,
                    arm=arm,
                    rep=rep,
                    seq=seq,
                    warmup=False,
                    valid=True,
                    plt_ms=v,
                ),
                None,
            )
            seq += 1
    store.finish_attempt(cid, att, "done")
    store.close()
    spec = {
        "format": 1,
        "name": "p",
        "statistics": {"pairs": ["h3/h3-n2"]},
        "defaults": {
            "runs": 4,
            "warmup": 0,
            "arms": {"h2": None, "h3": None, "h3-n2": {"stack": "quic-go", "cubic_n": 2}},
        },
        "scenarios": {"cells": {"rate": [10], "rtt": [36], "pages": ["5kb"]}},
    }
    (tmp_path / SWEEP_FILE).write_text(json.dumps({"spec": spec}))
    rep = build(tmp_path)
    rows = list(csv.DictReader((tmp_path / "report" / "table.csv").read_text().splitlines()))
    assert [r["pair"] for r in rows] == ["h2/h3", "h2/h3-n2", "h3/h3-n2"]
    third = rows[2]
    assert (third["ref_stack"], third["cand_stack"]) == ("quic-go", "quic-go")
    assert float(third["pct_diff"]) == pytest.approx((101.5 - 91.5) / 91.5 * 100)
    titles = [f["title"] for f in rep.figures]
    assert len(titles) == 3
    assert any("h2 (TCP) vs h3 (QUIC)" in t for t in titles)
    assert any("h3 (QUIC) vs h3-n2 (quic-go, cubic)" in t for t in titles)
    figs = sorted(p.name for p in (tmp_path / "report" / "figures").glob("*.svg"))
    assert "heatmap-cells-h3-vs-h3-n2-0rtt-single-object.svg" in figs
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count("<h3>cells / 5kb") == 1  # the cell's receipt once, not per pair
    assert "h3-n2 0" in html  # invalid loads named per arm


def _spec(tmp_path: Path, statistics: dict) -> None:
    import json

    from quicbed.results.folder import SWEEP_FILE

    spec = {
        "format": 1,
        "name": "s",
        "statistics": statistics,
        "defaults": {"warmup": 0},
        "scenarios": {"cells": {"rate": [10], "rtt": [36], "pages": ["5kb"]}},
    }
    (tmp_path / SWEEP_FILE).write_text(json.dumps({"spec": spec}))


def test_too_few_runs_for_the_test_is_untested_not_white(tmp_path: Path) -> None:
    """3 + 3 runs that do not overlap at all: Welch's test finds them different, but the
    best Mann-Whitney p from 3 + 3 runs is 0.1, so under the spec's Mann-Whitney the cell
    says "too few runs to test" (grey ``untested``), not "not significant" (white), and
    the same numbers feed the table, the heatmap and the 0-RTT/1-RTT heatmap."""
    import json

    from quicbed.analysis.stats import compare

    _fill(tmp_path, "0rtt", [200.0, 210, 220], [100.0, 101, 102])
    _fill(tmp_path, "1rtt", [200.0, 210, 220], [150.0, 151, 152])
    _spec(tmp_path, {"test": "mannwhitney", "correction": "holm", "alpha": 0.01})
    build(tmp_path)
    rows = list(csv.DictReader((tmp_path / "report" / "table.csv").read_text().splitlines()))
    assert {r["testable"] for r in rows} == {"False"}
    assert {r["significant"] for r in rows} == {""} and {r["p_adjusted"] for r in rows} == {""}
    assert all("too few runs to test" in r["problem"] for r in rows)
    shown = json.loads((tmp_path / "report" / "figures.json").read_text())
    states = {f["png"]: {c["state"] for c in f["shows"]["cells"]} for f in shown}
    assert len(states) == 3 and all(s == {"untested"} for s in states.values()), states
    mode = next(f for f in shown if "0rtt-vs-1rtt" in f["png"])["shows"]["cells"][0]
    c = compare([150.0, 151, 152], [100.0, 101, 102], planned=3, test="mannwhitney")
    assert mode["pct"] == pytest.approx(c.pct_diff) and mode["text"] == "untested"


def test_mode_heatmap_uses_the_valid_share_rule_and_welch(tmp_path: Path) -> None:
    """The 1-RTT vs 0-RTT heatmap: Welch on the two h3 samples, and "n/a" where a cell
    has fewer valid runs than the valid-share rule asks (here 2 of 8)."""
    import json

    _fill(tmp_path, "0rtt", [200.0, 210, 220, 230], [100.0, 101, 102, 103])
    _fill(tmp_path, "1rtt", [200.0, 210, 220, 230], [150.0, 151, 152, 153])
    build(tmp_path)
    shown = json.loads((tmp_path / "report" / "figures.json").read_text())
    mode = next(f for f in shown if "0rtt-vs-1rtt" in f["png"])["shows"]["cells"][0]
    assert mode["state"] == "ok" and mode["significant"] is True
    assert mode["pct"] == pytest.approx((151.5 - 101.5) / 101.5 * 100)
    # fewer valid runs than planned: runs=8 planned, 4 valid -> below 80 %
    other = tmp_path / "short"
    _fill(other, "0rtt", [200.0, 210, 220, 230], [100.0, 101, 102, 103])
    _fill(other, "1rtt", [200.0, 210, 220, 230], [150.0, 151, 152, 153], runs=8)
    build(other)
    shown = json.loads((other / "report" / "figures.json").read_text())
    mode = next(f for f in shown if "0rtt-vs-1rtt" in f["png"])["shows"]["cells"][0]
    assert mode["state"] == "n/a"


def test_page_kind_counts_objects() -> None:
    from quicbed.report.build import page_kind

    assert page_kind("1mbx1") == "single-object" and page_kind("5kb") == "single-object"
    assert page_kind("10kbx100") == "multi-object"


def test_provenance_of_every_attempt_at_the_top(tmp_path: Path) -> None:
    """Two attempts measured by different set-ups: the report's top names both, with the
    cells each measured, and provenance.json keeps them in full."""
    import json

    _fill(tmp_path, "0rtt", [200.0, 210, 220, 230], [100.0, 101, 102, 103])
    cid = _fill(tmp_path, "1rtt", [200.0, 210, 220, 230], [150.0, 151, 152, 153])
    store = Store(tmp_path)
    store.db.execute(
        "UPDATE attempts SET provenance=? WHERE cell_id=?",
        (
            json.dumps(
                {"git": {"sha": "y" * 40, "dirty": True}, "collected": "2026-11-24T10:00:00"}
            ),
            cid,
        ),
    )
    store.db.commit()
    store.close()
    build(tmp_path)
    groups = json.loads((tmp_path / "report" / "provenance.json").read_text())
    assert [len(g["attempts"]) for g in groups] == [1, 1]
    assert {g["git"] for g in groups} == {"x", "yyyyyyyyyyyy (dirty)"}
    html = (tmp_path / "report" / "index.html").read_text()
    top = html.index('id="provenance-summary"')
    assert top < html.index('id="heatmaps"') and "2 different set-ups" in html
    assert f"{cid}#1" in html


def test_a_cell_two_scenarios_plan_is_in_both(tmp_path: Path) -> None:
    """The scenario is stored per cell (schema 2): a cell planned by two scenarios has
    a row and a heatmap in each, and its receipt once; the spec is not re-planned."""
    cid = _fill(tmp_path, "0rtt", [200.0, 210, 220, 230], [100.0, 101, 102, 103])
    store = Store(tmp_path)
    store.add_scenarios([(cid, "baseline"), (cid, "latency")])
    store.close()
    rep = build(tmp_path)
    rows = list(csv.DictReader((tmp_path / "report" / "table.csv").read_text().splitlines()))
    assert [r["scenario"] for r in rows] == ["baseline", "latency"]
    assert rows[0]["pct_diff"] == rows[1]["pct_diff"]
    assert sorted(t.split(":")[0] for t in (f["title"] for f in rep.figures)) == [
        "baseline",
        "latency",
    ]
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count(f"cell <code>{cid}</code>") == 1  # one receipt section


def _beta_cell(
    root: Path,
    scenario: str,
    rate: float,
    rtt: float,
    loss_down: float,
    page: str,
    plts: dict[str, list[float]],
) -> str:
    """A cell of the beta study's kind: two quic-go arms, beta 0.7 (reference) and 0.6,
    loss on the downlink only."""
    from quicbed.spec.arms import ArmSettings

    cond = make_condition(rate_mbit=rate, rtt_ms=rtt, loss_down_pct=loss_down, loss_up_pct=0)
    settings = {
        "h3-b07": ArmSettings(stack="quic-go", cubic_n=2, cubic_beta=0.7),
        "h3-b06": ArmSettings(stack="quic-go", cubic_n=2, cubic_beta=0.6),
    }
    cfg = make_cell(
        condition=cond,
        page=page,
        runs=4,
        warmup=0,
        arms=("h3-b07", "h3-b06"),
        arm_settings=settings,
    )
    store = Store(root, create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    store.add_scenarios([(cid, scenario)])
    att = store.new_attempt(cid, {"git": {"sha": "x"}})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    seq = 0
    for arm, values in plts.items():
        for rep, v in enumerate(values):
            store.add_run(
                RunRow(
                    cell_id=cid,
                    attempt=att,
                    arm=arm,
                    rep=rep,
                    seq=seq,
                    warmup=False,
                    valid=True,
                    plt_ms=v,
                ),
                None,
            )
            seq += 1
    store.finish_attempt(cid, att, "done")
    store.close()
    return cid


def test_report_of_the_beta_study(tmp_path: Path) -> None:
    """Arm A vs arm B of one protocol: PLTC = (mean ref - mean cand) / mean ref x 100 beside
    every row, positive cells counted per group, RTT x loss heatmaps whose cells do not
    collide, downlink loss named, and the small queue of 10 Mbit/s x 10 ms warned about."""
    import json

    slow, fast = [200.0, 201, 202, 203], [150.0, 151, 152, 153]
    same = [200.0, 230, 170, 201]
    _beta_cell(tmp_path, "delay", 100, 5, 0.2, "bme-3.3mb", {"h3-b07": slow, "h3-b06": fast})
    _beta_cell(tmp_path, "delay", 100, 5, 5, "bme-3.3mb", {"h3-b07": fast, "h3-b06": slow})
    _beta_cell(tmp_path, "delay", 100, 400, 0.2, "bme-3.3mb", {"h3-b07": slow, "h3-b06": same})
    _beta_cell(tmp_path, "delay", 100, 400, 5, "bme-3.3mb", {"h3-b07": slow, "h3-b06": fast})
    _beta_cell(tmp_path, "page-size", 10, 10, 1, "bme-1mb", {"h3-b07": slow, "h3-b06": fast})
    rep = build(tmp_path)
    rows = list(csv.DictReader((tmp_path / "report" / "table.csv").read_text().splitlines()))
    assert {r["pair"] for r in rows} == {"h3-b07/h3-b06"}
    first = next(r for r in rows if r["rtt_ms"] == "5.0" and r["loss_down_pct"] == "0.2")
    assert float(first["pltc"]) == pytest.approx((201.5 - 151.5) / 201.5 * 100)
    assert float(first["pct_diff"]) == pytest.approx((201.5 - 151.5) / 151.5 * 100)
    assert (first["loss_pct"], first["loss_up_pct"]) == ("0.0", "0.0")
    groups = list(csv.DictReader((tmp_path / "report" / "groups.csv").read_text().splitlines()))
    delay = next(g for g in groups if g["scenario"] == "delay")
    assert (delay["cells"], delay["with_number"], delay["positive"]) == ("4", "4", "3")
    assert (delay["positive_significant"], delay["negative_significant"]) == ("2", "1")
    shows = json.loads((tmp_path / "report" / "figures.json").read_text())
    heat = next(
        f
        for f in shows
        if f["svg"] == "heatmap-delay-h3-b07-vs-h3-b06-0rtt-multi-object-rtt-by-loss.svg"
    )
    assert heat["shows"]["rows"] == ["5 ms", "400 ms"]
    assert heat["shows"]["cols"] == ["0.2 % down", "5 % down"]
    assert sorted(c["text"] for c in heat["shows"]["cells"]) == ["+1", "+33", "+33", "-25"]
    assert "delay: rate 100 Mbit/s" not in heat["shows"]["title"]
    assert heat["shows"]["title"].startswith("delay: 100 Mbit/s, queue 2bdp, bme-3.3mb\n")
    assert len(rep.queue_warnings) == 1 and "10 Mbit/s, RTT 10 ms" in rep.queue_warnings[0]
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count('class="warn queue-warning"') == 1 and 'id="group-counts"' in html
    assert "1.0↓ 0.0↑" in html


def test_heat_axes_follow_what_a_scenario_varies() -> None:
    """Rates x pages where only they vary (the reference study's heatmaps); else loss
    across, the first other varying dimension down, and any further one splits."""
    from made_rows import cell_row

    from quicbed.report.build import heat_axes

    base = cell_row()

    def grid(**values: list[Any]) -> list[Any]:
        rows = [base]
        for k, vs in values.items():
            rows = [replace(r, **{k: v}) for r in rows for v in vs]
        return rows

    assert heat_axes(grid(rate_mbit=[10, 50], page=["5kb", "1mb"])) == ("rate", "page", [])
    assert heat_axes(grid()) == ("rate", "page", [])
    assert heat_axes(grid(rtt_ms=[5, 400], loss_down_pct=[0.2, 5])) == ("rtt", "loss", [])
    assert heat_axes(grid(queue=["32KiB", "64KiB"], loss_down_pct=[1, 2])) == ("queue", "loss", [])
    assert heat_axes(grid(page=["bme-1mb", "bme-300kb"], loss_down_pct=[1, 2])) == (
        "page",
        "loss",
        [],
    )
    assert heat_axes(grid(rate_mbit=[10, 50], rtt_ms=[36, 112], page=["5kb", "1mb"])) == (
        "rate",
        "page",
        ["rtt"],
    )


def test_a_scenario_varying_loss_gets_a_line_per_other_setting(tmp_path: Path) -> None:
    """The beta study's figures: PLTC against loss, one line per RTT, hollow where not
    significant; a scenario of rates x pages gets none."""
    import json

    slow, fast = [200.0, 201, 202, 203], [150.0, 151, 152, 153]
    same = [200.0, 230, 170, 201]
    for rtt, arms in (
        (5, {"h3-b07": slow, "h3-b06": fast}),
        (400, {"h3-b07": slow, "h3-b06": same}),
    ):
        for loss in (0.2, 1, 5):
            _beta_cell(tmp_path, "delay", 100, rtt, loss, "bme-3.3mb", arms)
    build(tmp_path)
    shows = json.loads((tmp_path / "report" / "figures.json").read_text())
    (fig,) = [f for f in shows if f["svg"].startswith("lines-delay-")]
    assert fig["shows"]["line_plot"] == "loss"
    lines = fig["shows"]["lines"]
    assert sorted(lines) == ["400 ms", "5 ms"]
    assert [p["x"] for p in lines["5 ms"]] == [0.2, 1.0, 5.0]
    assert all(p["significant"] for p in lines["5 ms"])
    assert lines["5 ms"][0]["pltc"] == pytest.approx((201.5 - 151.5) / 201.5 * 100, abs=1e-3)
    assert not any(p["significant"] for p in lines["400 ms"])
    assert (tmp_path / "report" / "figures" / fig["png"]).stat().st_size > 0
