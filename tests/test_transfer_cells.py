"""Bulk and compete cells as cells (issue 14): configs, sweep specs, the store, the
report and verify's recomputation, from made-up records (the real transfers are in
tests/test_bulk.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from quicbed.analysis.transfers import bulk_summary, compete_summary, stored_transfer
from quicbed.errors import QuicbedError
from quicbed.model.link import LinkCondition
from quicbed.report import build as report
from quicbed.report import transfers as report_transfers
from quicbed.results.cpuuse import CpuTime, CpuUse
from quicbed.results.folder import SWEEP_FILE
from quicbed.results.netcounters import RoleCounters
from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.results.transfers import BulkResult, BulkRun, CompeteResult, FlowResult, compete_run
from quicbed.spec.cellconfig import make_cell, parse_flows
from quicbed.spec.sweepspec import SweepSpec, estimate_seconds, load_spec, plan

COND = LinkCondition(rate_mbit=10, rtt_ms=36)
#: transfers.csv and speedups.csv as quicbed wrote them at d31bcd9, before the report's
#: transfer rows were typed, from the folder _known_good_folder makes
KNOWN_GOOD = Path(__file__).parent / "fixtures" / "transfers-report"


def _flow(name: str, arm: str, rate_bps: float, dur: float, start: float = 0.0) -> FlowResult:
    n = round(dur / 0.1)
    samples = [(round(0.1 * (i + 1), 3), int(rate_bps / 8 * 0.1 * (i + 1))) for i in range(n)]
    return FlowResult(
        flow=name,
        arm=arm,
        protocol="h2" if arm.startswith("h2") else "h3",
        ok=True,
        bytes=samples[-1][1],
        start_offset_s=start,
        samples=samples,
        completion_s=dur,
        goodput_bps=rate_bps,
    )


def test_flows_are_spelled_one_way() -> None:
    assert parse_flows("h3x1,h2x4") == (("h3", 1), ("h2", 4))
    assert parse_flows("h3, h2") == (("h3", 1), ("h2", 1))
    for bad, why in (
        ("h3x0", "N >= 1"),
        ("h3xtwo", "ARMxN"),
        ("x2", "ARMxN"),
        ("h3x1,h3x2", "named twice"),
    ):
        with pytest.raises(QuicbedError, match=why):
            parse_flows(bad)


def test_a_transfer_cell_says_everything_it_needs() -> None:
    ok = make_cell(
        condition=COND,
        page="bulk/10MB.bin",
        kind="compete",
        runs=2,
        warmup=0,
        arms=("h3", "h2"),
        transfer={"size": "10MB", "duration_s": 20, "flows": "h3x1,h2x2"},
    )
    assert ok.transfer is not None and ok.transfer.flows == (("h3", 1), ("h2", 2))
    page = make_cell(condition=COND, page="5kb")
    assert "kind" not in page.model_dump(exclude_defaults=True)
    base = {"condition": COND, "page": "bulk/10MB.bin", "runs": 2, "warmup": 0}
    bad = [
        ({"kind": "bulk"}, "needs its transfer"),
        ({"kind": "bulk", "transfer": {"size": "10MB"}, "warmup": 1}, "no warm-up"),
        (
            {"kind": "bulk", "transfer": {"size": "10MB", "flows": "h3x1,h2x1"}},
            "flows and stagger are for compete",
        ),
        ({"kind": "bulk", "transfer": {"size": "11MB"}}, "page is its object 'bulk/11MB.bin'"),
        ({"kind": "bulk", "transfer": {"size": "10TB"}}, "10TB"),
        (
            {
                "kind": "compete",
                "transfer": {"size": "10MB", "flows": "h3x1,h2x1"},
                "arms": ("h3", "h2"),
            },
            "needs a duration",
        ),
        (
            {
                "kind": "compete",
                "transfer": {"size": "10MB", "duration_s": 5, "flows": "h3x1"},
                "arms": ("h3",),
            },
            "2 to 32 flows",
        ),
        (
            {
                "kind": "compete",
                "transfer": {"size": "10MB", "duration_s": 5, "flows": "h3x1,h2x1"},
            },
            "flows' arms in order",
        ),
        ({"page": "5kb", "transfer": {"size": "10MB"}}, "for bulk and compete cells"),
    ]
    for extra, why in bad:
        with pytest.raises(QuicbedError, match=why):
            make_cell(**(base | extra))


SPEC = {
    "name": "t",
    "defaults": {
        "runs": 3,
        "arms": {"h2": None, "h3": None, "h3-n1": {"stack": "quic-go", "cubic_n": 1}},
    },
    "scenarios": {
        "pages": {"rate": [10], "rtt": [36], "pages": ["5kb"]},
        "goodput": {"kind": "bulk", "rate": [10, 50], "rtt": [36], "objects": ["10MB"]},
        "fair": {
            "kind": "compete",
            "rate": [5],
            "rtt": [36],
            "queue": ["30kB", "2bdp"],
            "objects": ["100MB"],
            "duration": [20],
            "flows": ["h3x1,h2x1", {"h3-n1": 1, "h2": 4}],
            "runs": 2,
        },
    },
}


def test_a_spec_plans_transfer_cells_beside_page_cells() -> None:
    spec = SweepSpec(**SPEC)
    cells = plan(spec)
    kinds = [(pc.scenario, pc.config.kind) for pc in cells]
    assert kinds.count(("pages", "page")) == 1
    assert kinds.count(("goodput", "bulk")) == 2 and kinds.count(("fair", "compete")) == 4
    bulk = next(pc.config for pc in cells if pc.config.kind == "bulk")
    assert bulk.arms == ("h2", "h3", "h3-n1") and bulk.warmup == 0 and bulk.runs == 3
    assert bulk.page == "bulk/10MB.bin"
    mixes = {pc.config.arms for pc in cells if pc.config.kind == "compete"}
    assert mixes == {("h3", "h2"), ("h3-n1", "h2")}
    n1 = next(pc.config for pc in cells if pc.config.arms == ("h3-n1", "h2"))
    assert set(n1.arm_settings) == {"h3-n1"}  # only the settings of its flows' arms
    # a compete cell's time: its repetitions of the duration, not pages
    est = estimate_seconds([pc for pc in cells if pc.scenario == "fair"], 10)
    assert 4 * 2 * 20 < est < 4 * 2 * 40 + 40
    # the stored spec (sweep.json writes every key) reads back to the same digest
    assert SweepSpec(**spec.model_dump(mode="json")).digest() == spec.digest()
    # a spec with no transfer scenario keeps its digest (no new keys in it)
    only_pages = SweepSpec(**(SPEC | {"scenarios": {"pages": SPEC["scenarios"]["pages"]}}))
    explicit = {"pages": {"rate": [10], "rtt": [36], "pages": ["5kb"], "kind": "page"}}
    assert only_pages.digest() == SweepSpec(**(SPEC | {"scenarios": explicit})).digest()


@pytest.mark.parametrize(
    ("scenario", "why"),
    [
        (
            {"kind": "bulk", "rate": [10], "rtt": [36], "pages": ["5kb"], "objects": ["1MB"]},
            "pages: for page loads, not a bulk scenario",
        ),
        ({"kind": "bulk", "rate": [10], "rtt": [36]}, "objects: a bulk scenario needs"),
        (
            {"kind": "compete", "rate": [10], "rtt": [36], "objects": ["1MB"], "flows": ["h3,h2"]},
            "needs flows .* and duration",
        ),
        (
            {"rate": [10], "rtt": [36], "pages": ["5kb"], "objects": ["1MB"]},
            "objects: for kind bulk or compete",
        ),
        (
            {
                "kind": "compete",
                "rate": [10],
                "rtt": [36],
                "objects": ["1MB"],
                "duration": [5],
                "flows": ["h3x1,h9x1"],
            },
            "h9",
        ),
        (
            {
                "kind": "compete",
                "rate": [10],
                "rtt": [36],
                "objects": ["1MB"],
                "duration": [5],
                "flows": ["h3x1,h2x1"],
                "warmup": 2,
            },
            "no warm-up",
        ),
        (
            {
                "kind": "compete",
                "rate": [10],
                "rtt": [36],
                "objects": ["1MB"],
                "duration": [5],
                "flows": yaml.safe_load("[h3x1,h2x1]"),
            },
            "'h3x1' is one flow.*quote it in YAML",
        ),
    ],
)
def test_bad_transfer_scenarios_name_the_key(scenario: dict, why: str, tmp_path: Path) -> None:
    """Each error names the key; a YAML list that split a mix at its comma says so."""

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"name": "t", "scenarios": {"x": scenario}}))
    with pytest.raises(QuicbedError, match=why):
        load_spec(f)


def _compete_record() -> CompeteResult:
    runs = []
    for rep, (q, t) in enumerate([(6e6, 3e6), (6.4e6, 2.8e6), (5.8e6, 3.1e6)]):
        flows = [_flow("h3-0", "h3", q, 8.0), _flow("h2-0", "h2", t, 8.0)]
        runs.append(compete_run(rep, flows, 8.0, []))
    return CompeteResult(
        created="now",
        condition=COND.model_dump(mode="json"),
        groups=[("h3", 1), ("h2", 1)],
        arms=[{"name": "h3", "transport": "udp"}, {"name": "h2", "transport": "tcp"}],
        duration_s=8,
        stagger_s=0,
        object="bulk/10MB.bin",
        runs=runs,
    )


def _bulk_record() -> BulkResult:
    runs = [
        BulkRun(arm=arm, rep=rep, seq=i, flow=_flow(f"{arm}-{rep}", arm, rate, 4.0))
        for i, (arm, rep, rate) in enumerate(
            [
                ("h2", 0, 9.1e6),
                ("h3", 0, 8.0e6),
                ("h3", 1, 8.2e6),
                ("h2", 1, 9.3e6),
                ("h2", 2, 9.0e6),
                ("h3", 2, 7.9e6),
            ]
        )
    ]
    return BulkResult(
        created="now",
        condition=COND.model_dump(mode="json"),
        arms=[{"name": "h2", "transport": "tcp"}, {"name": "h3", "transport": "udp"}],
        object="bulk/10MB.bin",
        object_bytes=10**7,
        duration_s=None,
        reps=3,
        ideal_goodput_bps=10e6 * 1448 / 1514,
        runs=runs,
    )


def test_compete_summary_from_its_repetitions() -> None:
    r = compete_summary(_compete_record())
    h3, h2 = r.summary["h3"], r.summary["h2"]
    assert h3.fair_share == h2.fair_share == 0.5 and h3.n == 3
    assert h3.share_mean == pytest.approx((6 / 9 + 6.4 / 9.2 + 5.8 / 8.9) / 3, rel=1e-3)
    assert h3.share_mean + h2.share_mean == pytest.approx(1.0)
    assert h3.per_flow_mbit_mean == pytest.approx(6.0667, rel=1e-3)
    assert 0.8 < r.jain_mean < 1.0 and r.jain_sd is not None
    c = r.comparisons["h2/h3"]["per_flow_bps"]
    assert c.reference.n == c.candidate.n == 3 and c.p is not None and c.p < 0.01


def _store_cell(
    root: Path,
    kind: str,
    record: BulkResult | CompeteResult,
    cond: LinkCondition = COND,
    **cfg: Any,
) -> str:
    t = (
        {"size": "10MB"}
        if kind == "bulk"
        else {"size": "10MB", "duration_s": 8, "flows": "h3x1,h2x1"}
    )
    arms = ("h2", "h3") if kind == "bulk" else ("h3", "h2")
    config = make_cell(
        condition=cond,
        page="bulk/10MB.bin",
        kind=kind,
        runs=3,
        warmup=0,
        arms=arms,
        transfer=t,
        **cfg,
    )
    store = Store(root, create=True)
    cid = config.cell_id()
    store.add_cell(cid, config.model_dump(mode="json"))
    att = store.new_attempt(cid, {"quicbed": "test"})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    store.set_transfer(cid, att, kind, record.model_dump(mode="json"))
    store.finish_attempt(cid, att, "done")
    store.close()
    return cid


def test_the_report_shows_transfer_cells_from_the_store(tmp_path: Path) -> None:
    root = tmp_path / "res"
    bulk = _store_cell(root, "bulk", _bulk_record())
    comp = _store_cell(root, "compete", _compete_record())
    store = Store.open_readonly(root)
    read = stored_transfer(store, bulk, 1)
    store.close()
    assert isinstance(read, BulkResult) and read.summary["h2"].n == 3
    rep = report.build(root)
    assert rep.rows == []  # no page cells: no heatmaps, yet a report
    with open(rep.out / "transfers.csv") as f:
        rows = list(csv.DictReader(f))
    by = {(r["cell_id"], r["arm"]): r for r in rows}
    assert set(by) == {(bulk, "h2"), (bulk, "h3"), (comp, "h3"), (comp, "h2")}
    assert float(by[(bulk, "h2")]["goodput_mbit_mean"]) == pytest.approx(9.1333, rel=1e-3)
    assert float(by[(bulk, "h2")]["of_ideal"]) == pytest.approx(
        9.1333e6 / (10e6 * 1448 / 1514), rel=1e-3
    )
    assert by[(bulk, "h3")]["reference"] == "h2" and by[(bulk, "h3")]["significant"] == "True"
    assert by[(bulk, "h2")]["reference"] == ""  # the reference has no comparison of its own
    assert by[(comp, "h3")]["flows"] == "h3x1,h2x1" and float(by[(comp, "h3")]["share_mean"]) > 0.6
    shown = json.loads((rep.out / "figures.json").read_text())
    assert sum(f["shows"].get("transfer") == "compete" for f in shown) == 3  # one per repetition
    assert sum(f["shows"].get("transfer") == "bulk" for f in shown) == 1
    assert all((rep.out / "figures" / f["png"]).stat().st_size > 1000 for f in shown)
    html = (rep.out / "index.html").read_text()
    assert 'id="transfer-cells"' in html and "h3x1,h2x1" in html
    saved = json.loads((rep.out / "transfers.json").read_text())
    assert {c["cell_id"] for c in saved} == {bulk, comp}
    # a second build gives the same numbers (verify recomputes it so)
    again = report.build(root, out=tmp_path / "again")
    assert (again.out / "transfers.csv").read_text() == (rep.out / "transfers.csv").read_text()


def _rich_bulk_record(cond: LinkCondition) -> BulkResult:
    """_bulk_record on ``cond`` with every bulk column filled: each flow's CPU per role,
    the endpoints' counters, retransmissions, the QUIC client's packet counts and the
    link's CE marks; goodput off _bulk_record's by repetition, so speed-ups fill bins."""
    base = _bulk_record()
    runs = []
    for i, x in enumerate(base.runs):
        cpu = CpuUse(
            wall_ms=4000,
            roles={
                "server": CpuTime(total_ms=300 + i, user_ms=200, system_ms=100 + i),
                "client": CpuTime(total_ms=150, user_ms=100, system_ms=50),
            },
            missing={"bridge": "not measured"},
        )
        counters = {
            "client": RoleCounters(udp_rcvbuf_errors=i, udp_in_errors=i + 1, rx_dropped=1),
            "server": RoleCounters(tx_dropped=i),
            "bridge": RoleCounters(rx_dropped=2),
        }
        more = {
            "cpu": cpu,
            "counters": counters,
            "retransmissions": 10 + i,
            "quic_client": {"packets_sent": 100 + i, "packets_received": 900}
            if x.arm == "h3"
            else None,
            "goodput_bps": (x.flow.goodput_bps or 0) * (1.1, 0.95, 1.0)[x.rep],
        }
        flow = x.flow.model_copy(update=more)
        runs.append(x.model_copy(update={"flow": flow, "bottleneck": {"ce_marked": 3 * i}}))
    return base.model_copy(update={"runs": runs, "condition": cond.model_dump(mode="json")})


def _known_good_folder(root: Path) -> None:
    """A results folder with every column of transfers.csv and speedups.csv filled
    somewhere: the bulk and compete cells above (scenario BL), a bulk cell of another
    CC with CPU, counters and ACK counts against BL (WS), one more on an ECN-marking
    link (ECN), one whose h3 has too few valid flows to compare (SHORT), and a cell
    whose attempt failed before it stored a record."""
    ecn = LinkCondition(rate_mbit=20, rtt_ms=20, ecn_threshold="20kB")
    short = _bulk_record()
    for x in short.runs:
        x.flow.ok = not (x.arm == "h3" and x.rep < 2)
    other = LinkCondition(rate_mbit=30, rtt_ms=20)
    # cells as they were made before key_exchange (each stack's own group): the
    # known-good files name them by those IDs
    old = {"key_exchange": "stack"}
    cells = {
        _store_cell(root, "bulk", _bulk_record(), **old): "BL",
        _store_cell(root, "compete", _compete_record(), **old): "BL",
        _store_cell(root, "bulk", _rich_bulk_record(COND), cc="reno", **old): "WS",
        _store_cell(root, "bulk", _rich_bulk_record(ecn), cond=ecn, **old): "ECN",
        _store_cell(root, "bulk", short, cond=other, **old): "SHORT",
    }
    cfg = make_cell(
        **old,
        condition=LinkCondition(rate_mbit=40, rtt_ms=20),
        page="bulk/10MB.bin",
        kind="bulk",
        runs=3,
        warmup=0,
        arms=("h2", "h3"),
        transfer={"size": "10MB"},
    )
    store = Store(root)
    store.add_cell(cfg.cell_id(), cfg.model_dump(mode="json"))
    att = store.new_attempt(cfg.cell_id(), {"quicbed": "test"})
    store.set_receipt(cfg.cell_id(), att, {"passed": False, "checks": []})
    store.finish_attempt(cfg.cell_id(), att, "failed", "the receipt failed")
    store.add_scenarios([*cells.items(), (cfg.cell_id(), "BL")])
    store.close()
    spec = {"name": "known good", "description": "", "statistics": {"speedup_against": "BL"}}
    (root / SWEEP_FILE).write_text(json.dumps({"digest": "0" * 12, "spec": spec}))


def test_typed_rows_write_the_csvs_the_dict_rows_wrote(tmp_path: Path) -> None:
    """The report's transfer rows typed (quicbed.report.transferrow, SpeedupRow) write
    transfers.csv and speedups.csv as the dicts before them did: verify compares a
    package's CSV with one rebuilt from its store, so a package built before must still
    verify. Every cell as text, but the p-values to 1e-9 (scipy's last digits)."""
    _known_good_folder(tmp_path / "res")
    rep = report.build(tmp_path / "res")

    def cells(path: Path) -> list[list[str]]:
        with open(path, newline="") as f:
            return list(csv.reader(f))

    got, want = cells(rep.out / "transfers.csv"), cells(KNOWN_GOOD / "transfers.csv")
    assert got[0] == report_transfers.COLUMNS
    # columns added since go last: the known-good file is the rebuilt one's prefix
    assert got[0][: len(want[0])] == want[0] and got[0][len(want[0]) :] == [
        "client_packets_mean",
        "server_packets_mean",
    ]
    got = [g[: len(want[0])] for g in got]
    scipy = {want[0].index(c) for c in ("p", "welch_p", "mannwhitney_p")}
    assert len(got) == len(want) == 13
    for g, w in zip(got, want, strict=True):
        assert [v for i, v in enumerate(g) if i not in scipy] == [
            v for i, v in enumerate(w) if i not in scipy
        ]
        for i in scipy:
            assert g[i] == w[i] or float(g[i]) == pytest.approx(float(w[i]), rel=1e-9)
    speedups = (KNOWN_GOOD / "speedups.csv").read_text()
    assert (rep.out / "speedups.csv").read_text() == speedups and speedups.count("\n") == 3


def test_a_package_made_before_a_column_was_added_still_verifies(tmp_path: Path) -> None:
    """verify's CSV comparison takes the package's own columns where a newer quicbed
    appends some; columns in another order or a changed value still differ."""
    from quicbed.package.verify import csv_diff

    old, new, moved = (tmp_path / n for n in ("old.csv", "new.csv", "moved.csv"))
    old.write_text("cell_id,arm,goodput\nc,h3,9.5\n")
    new.write_text("cell_id,arm,goodput,client_packets_mean\nc,h3,9.5,1200\n")
    moved.write_text("cell_id,goodput,arm\nc,9.5,h3\n")
    assert csv_diff(old, new, ("cell_id", "arm")) == []
    assert csv_diff(new, old, ("cell_id", "arm"))[0].startswith("columns differ")
    assert csv_diff(old, moved, ("cell_id", "arm"))[0].startswith("columns differ")
    new.write_text("cell_id,arm,goodput,client_packets_mean\nc,h3,9.4,1200\n")
    assert csv_diff(old, new, ("cell_id", "arm")) == [
        "row c:h3 goodput: packaged '9.5', recomputed '9.4'"
    ]


def test_a_specs_pairs_compare_two_settings_of_one_protocol(tmp_path: Path) -> None:
    """Arm A vs arm B (issue 14): a bulk cell of TCP and two QUIC stacks. Each arm is
    compared with the TCP reference, and the spec's pair (the two QUIC stacks) too, as
    for page cells; a pair naming an arm the cell lacks is another cell's."""
    rates = {
        "h2": (9.1e6, 9.3e6, 9.0e6),
        "h3": (8.5e6, 8.6e6, 8.4e6),
        "h3-quiche": (8.0e6, 8.1e6, 7.9e6),
    }
    runs = [
        BulkRun(arm=arm, rep=rep, seq=i * 3 + rep, flow=_flow(f"{arm}-{rep}", arm, v, 4))
        for i, (arm, vals) in enumerate(rates.items())
        for rep, v in enumerate(vals)
    ]
    rec = BulkResult(
        created="now",
        condition=COND.model_dump(mode="json"),
        arms=[
            {"name": "h2", "transport": "tcp"},
            {"name": "h3", "transport": "udp"},
            {"name": "h3-quiche", "transport": "udp"},
        ],
        object="bulk/10MB.bin",
        object_bytes=10**7,
        duration_s=None,
        reps=3,
        ideal_goodput_bps=10e6 * 1448 / 1514,
        runs=runs,
    )
    assert set(bulk_summary(rec).comparisons) == {"h2/h3", "h2/h3-quiche"}
    both = bulk_summary(rec, extra_pairs=[("h3", "h3-quiche"), ("h3", "h3-n2")])
    assert set(both.comparisons) == {"h2/h3", "h2/h3-quiche", "h3/h3-quiche"}
    c = both.comparisons["h3/h3-quiche"]["goodput_bps"]
    assert c.reference.arm == "h3" and c.candidate.arm == "h3-quiche"
    assert c.p is not None and c.p < 0.01
    # the report: one row per arm and comparison, the spec's pair among them
    root = tmp_path / "res"
    cfg = make_cell(
        condition=COND,
        page="bulk/10MB.bin",
        kind="bulk",
        runs=3,
        warmup=0,
        arms=("h2", "h3", "h3-quiche"),
        transfer={"size": "10MB"},
    )
    store = Store(root, create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    att = store.new_attempt(cid, {"quicbed": "test"})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    store.set_transfer(cid, att, "bulk", rec.model_dump(mode="json"))
    store.finish_attempt(cid, att, "done")
    store.close()
    (tmp_path / "out" / "figures").mkdir(parents=True)
    sec = report_transfers.build(root, tmp_path / "out", 0.01, "welch", [("h3", "h3-quiche")])
    pairs = sorted((r.reference or "", r.arm) for r in sec.rows)
    assert pairs == [("", "h2"), ("h2", "h3"), ("h2", "h3-quiche"), ("h3", "h3-quiche")]


def test_a_transfer_cell_prints_its_flows_not_plts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``quicbed cell`` (a rerun of a bulk cell) prints what ``quicbed bulk`` prints:
    goodput per arm and the comparisons, not an empty page-load table."""
    from types import SimpleNamespace

    from quicbed.run.console import print_cell
    from quicbed.spec.cellconfig import CellConfig

    root = tmp_path / "res"
    cid = _store_cell(root, "bulk", _bulk_record())
    store = Store.open_readonly(root)
    cfg = CellConfig(**store.cell_config(cid))
    store.close()
    done = SimpleNamespace(cell_id=cid, attempt=1, out=root, status="done", problem="")
    print_cell(done, cfg)
    text = " ".join(capsys.readouterr().out.split())
    assert "h2: n 3, goodput 9.13 Mbit/s (95.5 % of ideal)" in text, text
    assert "h2/h3 (goodput_bps): +" in text and "mean ms" not in text
    assert ", bulk, results in" in text  # its kind, not a page's 0-RTT mode
    comp = _store_cell(tmp_path / "c", "compete", _compete_record())
    store = Store.open_readonly(tmp_path / "c")
    cfg = CellConfig(**store.cell_config(comp))
    store.close()
    print_cell(
        SimpleNamespace(cell_id=comp, attempt=1, out=tmp_path / "c", status="done", problem=""), cfg
    )
    text = " ".join(capsys.readouterr().out.split())
    assert "h3 x1: share 67" in text and "(fair 50 %)" in text and "Jain's index 0.89" in text


def test_a_small_queue_of_a_transfer_cell_is_flagged_in_the_report(tmp_path: Path) -> None:
    """The seeds' warning (issue 14): 10 Mbit/s x 10 ms is a BDP of 8.3 packets; a
    compete cell there says more about the buffer than the transports, and the report
    says so, as for page cells (quicbed.spec.sweepspec.queue_warning)."""
    root = tmp_path / "res"
    small = LinkCondition(rate_mbit=10, rtt_ms=10)
    cid = _store_cell(root, "compete", _compete_record(), cond=small)
    _store_cell(root, "bulk", _bulk_record())  # 36 ms: no warning
    rep = report.build(root)
    assert len(rep.queue_warnings) == 1 and "10 Mbit/s x 10 ms" in rep.queue_warnings[0]
    with open(rep.out / "transfers.csv") as f:
        flagged = {r["cell_id"] for r in csv.DictReader(f) if r["queue_warning"]}
    assert flagged == {cid}
    assert "queue-warning" in (rep.out / "index.html").read_text()


def test_the_fairness_preset_plans_the_long_look_grid() -> None:
    """sweeps/fairness.yaml: 1 QUIC flow (N = 1, N = 2) against 1 and 4 TCP flows, at
    the long look's 5 Mbit/s, 36 ms, 30 kB bottleneck and around it; a small sweep."""
    spec = load_spec(Path(__file__).resolve().parent.parent / "sweeps" / "fairness.yaml")
    cells = plan(spec)
    assert {pc.config.kind for pc in cells} == {"compete"}
    mixes = {pc.config.transfer.flows for pc in cells if pc.config.transfer}
    assert mixes == {(("h3", 1), ("h2", 1)), (("h3-n2", 1), ("h2", 1)), (("h3", 1), ("h2", 4))}
    conds = {(pc.config.condition.rate_mbit, pc.config.condition.queue) for pc in cells}
    assert (5, "30kB") in conds and len(conds) == 4
    n2 = next(pc.config for pc in cells if pc.config.arms[0] == "h3-n2")
    assert n2.resolved_arms()[0].params == {"cubic_n": 2}
    assert estimate_seconds(cells, spec.receipt_tcp_seconds) < 30 * 60


def test_a_package_of_transfer_cells_verifies(tmp_path: Path) -> None:
    """Packaged, its README lists the transfer cells with their rerun commands, and
    verify recomputes transfers.csv from the packaged store alone."""
    from quicbed.package.build import build_package
    from quicbed.package.verify import lines, verify

    root = tmp_path / "res"
    bulk = _store_cell(root, "bulk", _bulk_record())
    comp = _store_cell(root, "compete", _compete_record())
    pkg = build_package(root, tmp_path / "p.tar.gz")
    res = verify(pkg.path)
    text = "\n".join(lines(res))
    assert res.ok, text
    assert "2 transfer cells recomputed" in text
    import tarfile

    with tarfile.open(pkg.path) as tar:
        readme = next(m for m in tar.getmembers() if m.name.endswith("/README.md"))
        body = tar.extractfile(readme).read().decode()  # type: ignore[union-attr]
    assert f"--cell {bulk}" in body and f"--cell {comp}" in body
    assert "h3 share 6" in body and "Mbit/s" in body


@pytest.mark.root
@pytest.mark.parallel  # refuses bad input: times nothing
def test_bad_compete_options_are_refused_before_anything_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "o"
    # an error names the option as typed, not the cell's field behind it
    for cmd, args, why in (
        ("compete", ["--flows", "h3x0"], "'h3x0' is not ARMxN"),
        ("compete", ["--size", "10TB"], "'10TB' is not like 10MB"),
        ("compete", ["--reps", "1"], "error: --reps: runs must be >= 2"),
        ("compete", ["--duration", "0"], "error: --duration: "),
        ("compete", ["--stagger", "-1"], "error: --stagger: "),
        ("bulk", ["--reps", "0"], "error: --reps: runs must be >= 2"),
        ("bulk", ["--duration", "-3"], "error: --duration: "),
    ):
        cp = subprocess.run(
            [
                sys.executable,
                "-m",
                "quicbed",
                cmd,
                "--out",
                str(out),
                "--rate",
                "10",
                "--rtt",
                "36",
                "--prefix",
                "tbad",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cp.returncode == 2 and why in cp.stderr, (args, cp.stderr)
        assert "transfer." not in cp.stderr and "cell:" not in cp.stderr, cp.stderr
    assert not out.exists()


def test_an_arm_with_no_valid_run_fails_the_attempt(tmp_path: Path) -> None:
    """An attempt that ends with an arm at 0 valid runs has measured nothing it can
    compare: the runner's rule (cell.arms_without_valid_runs) names that arm, for a
    transfer cell (every flow of h3 failed) and for a page cell (only h3's warm-up and
    an invalid load), and passes one with a valid run per arm."""
    from quicbed.run.cell import arms_without_valid_runs

    rec = _bulk_record()
    bad = rec.model_copy(
        update={
            "runs": [
                r.model_copy(
                    update={"flow": r.flow.model_copy(update={"ok": False, "error": "stalled"})}
                )
                if r.arm == "h3"
                else r
                for r in rec.runs
            ]
        }
    )
    cfg = make_cell(
        condition=COND,
        page="bulk/10MB.bin",
        kind="bulk",
        runs=3,
        warmup=0,
        arms=("h2", "h3"),
        transfer={"size": "10MB"},
    )
    store = Store(tmp_path / "t", create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    for record, want in ((rec, {}), (bad, {"h3": ["stalled"]})):
        att = store.new_attempt(cid, {"quicbed": "test"})
        store.set_transfer(cid, att, "bulk", record.model_dump(mode="json"))
        assert arms_without_valid_runs(store, cid, att, cfg) == want
    store.close()

    page = make_cell(condition=COND, page="5kb", runs=2, warmup=1)
    store = Store(tmp_path / "p", create=True)
    cid = page.cell_id()
    store.add_cell(cid, page.model_dump(mode="json"))
    att = store.new_attempt(cid, {"quicbed": "test"})
    rows = [("h2", 0, 1, 0), ("h2", 1, 0, 1), ("h3", 0, 1, 1), ("h3", 1, 0, 0)]
    for seq, (arm, rep, warmup, valid) in enumerate(rows):
        store.add_run(
            RunRow(
                cell_id=cid,
                attempt=att,
                arm=arm,
                rep=rep,
                seq=seq,
                warmup=warmup,
                valid=valid,
                reason="" if valid else "protocol h2 on the h3 arm",
                plt_ms=100.0,
            ),
            None,
        )
    # the arm with each distinct reason of its measured runs (the warm-up's is not one)
    assert arms_without_valid_runs(store, cid, att, page) == {"h3": ["protocol h2 on the h3 arm"]}
    store.close()
