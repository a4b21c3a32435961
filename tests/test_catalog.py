"""The catalog of the studies' figures and tables (sweeps/catalog/catalog.yaml) and
``quicbed reproduce``: every numbered figure and table of ../shared/studies.md has an
entry, every local entry plans into the preset's own cells, bad names are refused by
name, the speed-up bins, and a small entry run end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from quicbed.cli.reproduce import write_index
from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.report.transfers import SPEEDUP_BINS, Goodputs, speedups
from quicbed.spec.catalog import PRESETS, entries_spec, entry_spec, load_catalog
from quicbed.spec.sweepspec import load_spec, plan

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT.parent / "shared" / "studies.md"
QB = [sys.executable, "-m", "quicbed"]


def _study_ids() -> list[str]:
    ids = []
    for line in STUDIES.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and re.fullmatch(r"[a-z0-9-]+/(fig|table)[\w.]+", cells[0]):
            ids.append(cells[0])
    return ids


def test_every_figure_and_table_of_the_studies_has_an_entry() -> None:
    ids = _study_ids()
    assert len(ids) > 150  # the five studies' numbered figures and tables
    cat = load_catalog()
    assert [e.id for e in cat.entries] == ids  # all, in the studies' order, nothing else
    assert {e.status for e in cat.entries} <= {"local", "testbed", "not here"}
    assert all(e.why for e in cat.entries if e.status == "not here")


def test_every_local_entry_plans_into_its_presets_cells() -> None:
    """A figure's cells are its preset's own where the entry changes nothing but the
    pages it takes, so a full preset run and a reproduced figure share results."""
    cat = load_catalog()
    local = [e for e in cat.entries if e.status == "local"]
    assert len(local) >= 60
    for e in local:
        cells = plan(entry_spec(cat, e))
        assert cells, e.id
    ll = {pc.config.cell_id() for pc in plan(load_spec(PRESETS / "long-look.yaml"))}
    (fig46a,) = cat.find("long-look-2024/fig4.6a")
    ids = {pc.config.cell_id() for pc in plan(entry_spec(cat, fig46a))}
    assert len(ids) == 3 * 7 and ids <= ll  # 3 rates x the single grid, long-look's own
    # a figure's panels: fig4.7 is a, b and c, one sweep of 0-RTT and 1-RTT cells
    panels = cat.find("long-look-2024/fig4.7")
    assert [e.id[-1] for e in panels] == ["a", "b", "c"]
    spec = entries_spec(cat, panels)
    both = plan(spec)  # the panels' scenarios are one grid: each cell measured once
    assert {pc.config.mode for pc in both} == {"0rtt", "1rtt"} and len(both) == 2 * 21
    assert list(spec.scenarios) == ["fig4.7a: baseline", "fig4.7b: baseline", "fig4.7c: baseline"]


def test_bad_names_and_entries_that_do_not_run_here_are_refused() -> None:
    cat = load_catalog()
    with pytest.raises(QuicbedError, match="no figure, table or study 'long-look-2024/fig9'"):
        cat.find("long-look-2024/fig9")
    # an entry that does not run here (checked first: should it ever run here, this test
    # must fail, not start a sweep)
    assert cat.find("quic-limits-2022/fig5.7")[0].status == "not here"
    cp = subprocess.run(
        [*QB, "reproduce", "quic-limits-2022/fig5.7", "--out", "/nonexistent/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode != 0 and "needs LSQUIC built three ways" in cp.stderr, cp.stderr
    assert not Path("/nonexistent/x").exists()


def test_a_local_entry_says_how_it_differs_from_the_study(tmp_path: Path) -> None:
    """Every local entry carries its ``differs`` (issue 43: fifteen long-look entries
    printed "nothing beyond quicbed itself" while their QUIC was Envoy's, not the study's
    quic_server); a catalog with one that does not is refused, naming it."""
    import yaml

    from quicbed.spec.catalog import CATALOG

    cat = load_catalog()
    assert all((e.differs or "").strip() for e in cat.entries if e.status == "local")
    data = yaml.safe_load(CATALOG.read_text())
    entry = next(e for e in data["entries"] if e["id"] == "long-look-2024/fig4.6a")
    entry.pop("differs")
    bad = tmp_path / "catalog.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(QuicbedError, match=r"fig4\.6a: a local entry says how its run differs"):
        load_catalog(bad)
    # the loss scenario's entries name the placement they run and the variant preset
    for key in ("long-look-2024/fig4.6b", "long-look-2024/fig4.9c"):
        (e,) = cat.find(key)
        assert "0.5 % each way" in str(e.differs) and "long-look-loss-per-pipe" in str(e.differs)


def test_the_per_pipe_loss_variant_differs_from_the_loss_scenario_in_loss_alone() -> None:
    """sweeps/long-look-loss-per-pipe.yaml is the long-look loss scenario with 1 % on each
    direction (Emulab's per-pipe rule, docs/link.md): the same rates, RTT, pages, arms
    and runs, and nothing else changed."""
    ll = [pc.config for pc in plan(load_spec(PRESETS / "long-look.yaml")) if pc.scenario == "loss"]
    pp = [pc.config for pc in plan(load_spec(PRESETS / "long-look-loss-per-pipe.yaml"))]
    assert len(pp) == len(ll) == 39
    for a, b in zip(ll, pp, strict=True):
        assert (a.condition.loss_down(), a.condition.loss_up()) == (0.005, 0.005)
        assert (b.condition.loss_down(), b.condition.loss_up()) == (0.01, 0.01)
        same = {"loss_pct": 0.0, "loss_down_pct": None, "loss_up_pct": None}
        assert b.model_copy(update={"condition": b.condition.model_copy(update=same)}) == (
            a.model_copy(update={"condition": a.condition.model_copy(update=same)})
        )


def test_fig5_1a_runs_each_set_as_the_study_and_scaled_to_this_link() -> None:
    """transport-params fig5.1a: its delay scenario with the study's windows, and
    delay-scaled with every window (both ends) scaled by 100 / 519.03, the rest of each
    set unchanged; the per-scenario change reaches that scenario alone."""
    cat = load_catalog()
    entry = next(e for e in cat.entries if e.id == "transport-params-2023/fig5.1a")
    cells = plan(entry_spec(cat, entry))
    by = {sc: [pc.config for pc in cells if pc.scenario == sc] for sc in ("delay", "delay-scaled")}
    assert len(by["delay"]) == len(by["delay-scaled"]) == 8
    plain = {a.name: a.params for a in by["delay"][0].resolved_arms()}
    scaled = {a.name: a.params for a in by["delay-scaled"][0].resolved_arms()}
    assert set(scaled) == {"h3", *(f"h3-s-{n[3:]}" for n in plain if n != "h3")}
    for name, params in plain.items():
        if name == "h3":
            continue
        other = scaled[f"h3-s-{name[3:]}"]
        for key, value in params.items():
            window = "initial_max_data" in key or "initial_max_stream_data" in key
            want = value if not window or value == 2**32 - 1 else round(value * 100 / 519.03)
            assert other[key] == want, (name, key, value, other[key])
    bad = entry.model_copy(update={"set": {**(entry.set or {}), "per_scenario": {"lossy": {}}}})
    with pytest.raises(QuicbedError, match="per_scenario names lossy, not among its scenarios"):
        entry_spec(cat, bad)


def test_speedups_are_binned_per_repetition_against_the_reference() -> None:
    cond = LinkCondition(rate_mbit=50, rtt_ms=36)
    base = {0: 100.0, 1: 100.0, 2: 100.0, 3: 100.0}
    rows = speedups(
        [
            Goodputs("BL", cond, "20MB", "h2", base),
            Goodputs("WS", cond, "20MB", "h2", {0: 250.0, 1: 105.0, 2: 95.0, 3: 60.0}),
            Goodputs("WS", cond, "20MB", "h3", {0: 1.0}),  # no BL cell for h3: no row
        ],
        "BL",
    )
    assert len(rows) == 1
    (r,) = rows
    assert (r.scenario, r.arm, r.n, r.rate_mbit) == ("WS", "h2", 4, 50)
    b = r.bins
    assert (b["> 2"], b["1.0-1.1"], b["0.9-1.0"], b["< 0.7"]) == (0.25, 0.25, 0.25, 0.25)
    assert r.faster == r.slower == 0.5
    assert sum(b[label] for _, _, label in SPEEDUP_BINS) == pytest.approx(1.0)


def test_a_speedup_reference_must_be_a_bulk_scenario(tmp_path: Path) -> None:
    spec = (PRESETS / "tcp-options.yaml").read_text()
    bad = tmp_path / "s.yaml"
    bad.write_text(spec.replace("speedup_against: BL", "speedup_against: XX"))
    with pytest.raises(QuicbedError, match="speedup_against: no scenario 'XX'"):
        load_spec(bad)


def test_the_study_index_links_each_entry_or_says_why_not(tmp_path: Path) -> None:
    cat = load_catalog()
    entries = cat.find("cubic-beta")
    folders = {e.id: tmp_path / "beta" for e in entries if e.status == "local"}
    page = write_index(tmp_path, "cubic-beta", entries, folders).read_text()
    assert page.count("<tr>") == len(entries) + 1
    assert 'href="beta/report/index.html"' in page and "a diagram: nothing to measure" in page


@pytest.mark.root
@pytest.mark.slow
def test_reproduce_a_fairness_figure_end_to_end(tmp_path: Path) -> None:
    """fig4.1a: one QUIC (N = 2) against one TCP flow on the study's 5 Mbit/s, 36 ms,
    30 kB bottleneck, run by name, its compete figures in the report."""
    out = tmp_path / "r"
    cp = subprocess.run(
        [*QB, "reproduce", "long-look-2024/fig4.1a", "--out", str(out), "--prefix", "trp"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert "differs from the study: QUIC is quic-go CUBIC with N = 2" in " ".join(cp.stdout.split())
    figures = sorted((out / "report" / "figures").glob("compete-*.png"))
    # one per repetition: the study's 3, and one per repetition the busy host spoiled
    # (kept, drawn, replaced: quicbed.run.bulk)
    cells = json.loads((out / "report" / "transfers.json").read_text())
    assert [c["kind"] for c in cells] == ["compete"]
    replaced = re.search(r"(\d+) measured in their place", cells[0]["link_line"])
    assert replaced is not None, cells[0]["link_line"]
    assert len(figures) == 3 + int(replaced.group(1))
    rows = (out / "report" / "transfers.csv").read_text()
    assert "h3-n2x1,h2x1" in rows and ",done," in rows


def test_goodput_cdfs_per_scenario_where_scenarios_share_a_link(tmp_path: Path) -> None:
    from quicbed.report.transfers import goodput_cdfs

    cond = LinkCondition(rate_mbit=50, rtt_ms=36)
    drawn = goodput_cdfs(
        [
            Goodputs("BL", cond, "20MB", "h2", {0: 40e6, 1: 42e6}),
            Goodputs("ECN", cond, "20MB", "h2", {0: 45e6, 1: 44e6, 2: 46e6}),
            Goodputs("BL", cond, "20MB", "h3", {0: 47e6}),  # one scenario only: no figure
        ],
        tmp_path,
    )
    assert len(drawn) == 1
    title, paths, shows = drawn[0].title, drawn[0].paths, drawn[0].shows
    assert shows["arm"] == "h2" and shows["scenarios"] == {
        "BL": [40.0, 42.0],
        "ECN": [44.0, 45.0, 46.0],
    }
    assert all(p.stat().st_size > 0 for p in paths) and "h2, 20MB" in title


# --- the studies' numbers beside quicbed's (issue 43) ------------------------------------
def test_not_here_reasons_state_what_is_missing_not_a_ticket() -> None:
    """A reason that cites an issue, or says a knob is "not built yet", goes stale the day
    the knob lands (the cipher and UDP-buffer entries said so for weeks after): a reason
    states what is missing, as of the catalog, in words that stay true or fail here."""
    stale = re.compile(r"\bissue \d+|not built yet|cannot set QUIC transport parameters", re.I)
    bad = [e.id for e in load_catalog().entries if e.why and stale.search(e.why)]
    assert bad == []


def test_entries_that_compare_name_study_values_with_a_rule_and_a_source() -> None:
    cat = load_catalog()
    (fig54,) = cat.find("transport-params-2023/fig5.4")
    (t41,) = cat.find("quic-limits-2022/table4.1")
    assert len(fig54.compare) >= 3 and len(t41.compare) >= 6
    for e in (fig54, t41):
        for v in e.compare:
            assert v.source and v.unit and v.what, v
    beta = fig54.compare[0]
    assert (beta.study, beta.rule.below, beta.relative_to) == (6.15, 10, {"arm": "h3-s-15728640"})
    # every arm a comparison names is an arm of the entry's sweep
    arms = {a.name for pc in plan(entry_spec(cat, fig54)) for a in pc.config.resolved_arms()}
    assert {str(v.where["arm"]) for v in fig54.compare} <= arms


def test_a_study_value_is_judged_by_its_rule_against_the_reports_table(tmp_path: Path) -> None:
    """The verdicts from a report's CSV: a share scaled to %, a sum of columns, a row as a
    percentage of another, a row the report lacks, and rows that disagree."""
    from quicbed.report import studyvalues
    from quicbed.spec.catalog import Entry

    (tmp_path / "profile.csv").write_text(
        "cell_id,attempt,arm,role,program,sampled_ms,packet_io,crypto\n"
        "c1,1,h3,server,quicbed-h3server,900,0.55,0.12\n"
        "c1,1,h3,client,quicbed-bulk,800,0.40,0.10\n"
    )
    (tmp_path / "transfers.csv").write_text(
        "arm,rtt_ms,goodput_mbit_mean\nh3-s-small,30,5.0\nh3-s-ref,30,80.0\nh3-s-ref,30,80.0\n"
        "twice,30,1\ntwice,30,2\n"
    )
    base = {"unit": "%", "source": "Table 4.1", "rule": {"within": 10}}
    entry = Entry(
        id="quic-limits-2022/table4.1",
        what="t",
        kind="table",
        status="local",
        preset="implementation.yaml",
        scenarios=["goodput"],
        view="cpu",
        differs="(a test's entry)",
        compare=[
            {
                **base,
                "what": "io",
                "study": 60.31,
                "table": "profile.csv",
                "where": {"arm": "h3", "role": "server"},
                "column": "packet_io",
                "scale": 100,
            },
            {
                **base,
                "what": "io+crypto",
                "study": 77.91,
                "table": "profile.csv",
                "where": {"arm": "h3", "role": "server"},
                "column": ["packet_io", "crypto"],
                "scale": 100,
            },
            {
                **base,
                "what": "rel",
                "study": 6.15,
                "table": "transfers.csv",
                "where": {"arm": "h3-s-small", "rtt_ms": 30},
                "column": "goodput_mbit_mean",
                "relative_to": {"arm": "h3-s-ref"},
                "rule": {"below": 10},
            },
            {
                **base,
                "what": "gone",
                "study": 1,
                "table": "transfers.csv",
                "where": {"arm": "nowhere"},
                "column": "goodput_mbit_mean",
            },
        ],
    )
    got = studyvalues.judge(entry, tmp_path)
    assert [(round(v.quicbed, 2) if v.quicbed is not None else None, v.verdict) for v in got] == [
        (55.0, "agrees"),  # 55 % within 10 of 60.31
        (67.0, "differs"),  # 67 % is 10.91 from 77.91
        (6.25, "agrees"),  # 5 / 80: below 10 %
        (None, "not measured"),
    ]
    assert "no row with arm nowhere" in got[3].problem
    path = studyvalues.write(tmp_path, got)
    assert path is not None and path.read_text().count("\n") == 5
    table = studyvalues.markdown(got)
    assert "| io+crypto | 77.91 % | 67 % | -10.91 | within ±10 % | differs |" in table
    twice = entry.model_copy(
        update={"compare": [entry.compare[3].model_copy(update={"where": {"arm": "twice"}})]}
    )
    with pytest.raises(QuicbedError, match="2 rows with arm twice differ in goodput_mbit_mean"):
        studyvalues.judge(twice, tmp_path)


def test_reproduce_lists_how_many_study_values_each_local_entry_compares() -> None:
    cp = subprocess.run(
        [*QB, "reproduce", "--list", "quic-limits-2022"], capture_output=True, text=True, timeout=60
    )
    assert cp.returncode == 0, cp.stderr
    line = next(x for x in cp.stdout.splitlines() if x.split()[0] == "quic-limits-2022/table4.1")
    assert line.rstrip().endswith(" 14 study values"), line
    described = subprocess.run(
        [*QB, "reproduce", "transport-params-2023/fig5.4"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "compares: goodput with set beta's initial_max_data" in " ".join(
        described.stdout.split()
    ), described.stdout


#: phrases that claim quicbed agrees with a study; each needs the two numbers beside it
AGREEMENT = re.compile(
    r"as the study found|the study's finding holds|agrees with the study|as the study's "
    r"fig|as in the study|matches the study|confirms the study|the study's finding",
    re.I,
)


def test_no_doc_claims_agreement_with_a_study_without_both_numbers() -> None:
    """A paragraph of the docs that says quicbed agrees with a study carries numbers for
    both (at least two figures in it); otherwise it says what it compares or nothing."""
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for para in re.split(r"\n\s*\n", doc.read_text()):
            if AGREEMENT.search(para) and len(re.findall(r"\d+(?:\.\d+)?", para)) < 2:
                bad.append(f"{doc.relative_to(ROOT)}: {AGREEMENT.search(para).group(0)!r}")
    assert bad == []
