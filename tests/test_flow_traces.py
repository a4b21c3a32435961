"""Transport traces of transfer flows (quicbed.results.flowtraces, quicbed.report.windows):
a scenario's ``traces`` is no condition, the window entries of the catalog plan with
traces on, and real traced flows on the suite's shared link (short: 10 Mbit/s, 36 ms,
1 MB or 3 s): each kind's cwnd series is plausible, a compete run draws its window
figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import TRANSFER_COND

from quicbed.results.flowtraces import flow_samples
from quicbed.results.linkload import spoiled_only
from quicbed.results.transfers import BulkResult, CompeteResult, FlowResult
from quicbed.spec.catalog import PRESETS, entry_spec, load_catalog
from quicbed.spec.sweepspec import SweepSpec, cell_traces, load_spec, plan
from quicbed.traces.qlog import RS, qlog_client_port

SPEC: dict[str, Any] = {
    "format": 1,
    "name": "t",
    "defaults": {"runs": 3},
    "scenarios": {
        "b": {"kind": "bulk", "rate": [10], "rtt": [20], "objects": ["1MB"]},
        "p": {"rate": [10], "rtt": [20], "pages": ["5kb"]},
    },
}


def test_qlog_client_port_is_quic_gos_connection_started() -> None:
    head = b'{"qlog_format":"JSON-SEQ"}\n'
    started = (
        b'{"time":0.9,"name":"transport:connection_started","data":{"local":{"address_v4":'
        b'{"ip":"10.10.1.1","port":443}},"remote":{"address_v4":{"ip":"10.10.1.2","port":58325}}}}\n'
    )
    assert qlog_client_port(RS + head + RS + started) == 58325
    assert qlog_client_port(RS + head + RS + b'{"time":1,"name":"x:y","data":{}}\n') is None
    # quiche logs no connection_started: quicbed's quiche server names the peer in the
    # qlog's description (issue 45: a compete cell's quiche flows went unmatched)
    for peer, port in (("10.10.1.2:40123", 40123), ("[::1]:5", 5)):
        quiche = (
            b'{"qlog_version":"0.3","qlog_format":"JSON-SEQ","title":"quicbed-quiche-server",'
            b'"description":"quicbed-quiche-server odcid=ab12 peer=' + peer.encode() + b'"}\n'
        )
        assert qlog_client_port(RS + quiche + RS + b'{"time":1,"name":"x:y","data":{}}\n') == port


def test_a_scenarios_traces_is_no_condition() -> None:
    """traces on a scenario changes neither its cells nor the spec's digest; the spec's
    level (--traces) wins, and unset leaves run_cell's default for the cell's kind."""
    plain = SweepSpec(**SPEC)
    body = json.loads(json.dumps(SPEC))
    body["scenarios"]["b"]["traces"] = "light"
    traced = SweepSpec(**body)
    assert traced.digest() == plain.digest()
    assert [c.config.cell_id() for c in plan(traced)] == [c.config.cell_id() for c in plan(plain)]
    assert cell_traces(traced, "b") == "light" and cell_traces(traced, "p") is None
    assert cell_traces(traced.model_copy(update={"traces": "none"}), "b") == "none"


def test_the_window_entries_plan_with_traces_on_their_presets_cells() -> None:
    cat = load_catalog()
    windows = [e for e in cat.entries if e.view == "windows"]
    want = {"4.2a", "4.2b", "4.2c", "4.2d", "4.3b", "4.3c", "4.4b", "4.4c", "4.10a", "4.10b"}
    want |= {"4.10c", "4.12a", "4.12b", "4.12c", "4.12d", "4.13"}
    assert {e.id.split("/fig")[1] for e in windows} == want
    for e in windows:
        assert e.status == "local" and e.differs, e.id
        spec = entry_spec(cat, e)
        cells = plan(spec)
        assert cells and all(c.config.kind in ("bulk", "compete") for c in cells), e.id
        assert all(cell_traces(spec, c.scenario) == "light" for c in cells), e.id
    # fig4.2a's cells are fig4.1a's: traces are no condition
    ids = {
        k: {c.config.cell_id() for c in plan(entry_spec(cat, cat.find(f"long-look-2024/{k}")[0]))}
        for k in ("fig4.1a", "fig4.2a")
    }
    assert ids["fig4.1a"] == ids["fig4.2a"]
    assert plan(load_spec(PRESETS / "windows.yaml"))


def test_a_made_up_traced_repetition_draws_its_windows_and_close_up(tmp_path: Path) -> None:
    """Two flows of a 20 s repetition, their rows in one load's transport.csv.gz each:
    flow_samples puts them on the run's clock (t0_ms), and the report draws the whole
    repetition and a 5 s close-up of its steady part, PNG and SVG."""
    from quicbed.report import windows
    from quicbed.results.transfers import CompeteResult, compete_run
    from quicbed.traces.tracer import write_samples

    flows = []
    for i, (arm, conn) in enumerate((("h3", "abcd"), ("h2", "50000"))):
        rel = f"traces/c/1/{arm}-000/transport.csv.gz"
        rows = [
            {"t_ms": 500.0 + 10 * k, "event": "sample", "conn": conn, "cwnd_bytes": 14480 + k}
            | {"in_flight_bytes": 10000, "srtt_ms": 22.0, "phase": "congestion_avoidance"}
            for k in range(2000)
        ]
        rows += [{"t_ms": 9000.0, "event": "lost", "conn": conn}]
        rows += [{"t_ms": 1.0, "event": "sample", "conn": "other", "cwnd_bytes": 1}]
        write_samples(tmp_path / rel, rows)
        flows.append(
            FlowResult(
                flow=f"{arm}-0",
                arm=arm,
                protocol=arm,
                ok=True,
                bytes=25_000_000,
                samples=[(0.1 * (k + 1), 125_000 * (k + 1)) for k in range(200)],
                completion_s=20.0,
                start_offset_s=0.01 * i,
                trace={"files": {"transport": rel}, "conn": conn, "t0_ms": 500.0}
                | {"facts": {"losses": 1, "spurious_losses": 0 if arm == "h3" else None}},
            )
        )
    got = flow_samples(tmp_path, flows[0])
    assert len(got) == 2001 and got[0]["t_s"] == 0.0  # its own connection, on the run's clock
    assert flow_samples(tmp_path, flows[1], offset=False)[0]["t_s"] == pytest.approx(-0.01)
    r = CompeteResult(
        created="now",
        condition={"rate_mbit": 10, "rtt_ms": 20, "queue": "2bdp"},
        groups=[("h3", 1), ("h2", 1)],
        arms=[{"name": "h3", "transport": "udp"}, {"name": "h2", "transport": "tcp"}],
        duration_s=20,
        stagger_s=0,
        object="bulk/10MB.bin",
        runs=[compete_run(0, flows, 20.0, [])],
    )
    drawn = windows.figures(r, tmp_path, "c", tmp_path / "figs")
    assert [p.name for d in drawn for p in d.paths] == [
        "windows-c-0.png",
        "windows-c-0.svg",
        "windows-c-0-closeup.png",
        "windows-c-0-closeup.svg",
    ]
    # 20 % of 20 s after the last flow started (0.01 s): its steady part, 5 s of it
    assert drawn[1].shows["span"] == pytest.approx((4.01, 9.01))


# --- real flows on the local testbed ---------------------------------------------------
def _plausible(f: FlowResult, out: Path, sent: int) -> list[dict[str, Any]]:
    """The flow's window series: non-empty, positive, bounded by what was sent."""
    assert f.ok, f.error
    assert f.trace is not None and f.trace["conn"], f.trace
    assert f.trace["facts"]["status"] == "ok", f.trace
    rows = flow_samples(out, f, offset=False)
    pts = [r for r in rows if r["event"] == "sample"]
    assert len(pts) > 20, f.trace
    assert all(r["cwnd_bytes"] and r["cwnd_bytes"] > 0 for r in pts)
    assert max(r["cwnd_bytes"] for r in pts) <= sent
    assert all(0 <= (r["in_flight_bytes"] or 0) <= sent for r in pts)
    delivered = max(r["delivered_bytes"] or 0 for r in pts)
    assert 0.5 * f.bytes <= delivered <= sent
    assert min(r["srtt_ms"] for r in pts if r["srtt_ms"]) >= 0.9 * TRANSFER_COND["rtt_ms"]
    assert all(-1 < r["t_s"] < (f.completion_s or 0) + 3 for r in pts)
    assert {r["phase"] for r in pts} & {"slow_start", "congestion_avoidance"}
    return pts


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.built
def test_a_traced_bulk_flow_per_kind_stores_a_plausible_window(traced_bulk: dict[str, Any]) -> None:
    r, out = traced_bulk["result"], traced_bulk["out"]
    assert isinstance(r, BulkResult)
    sources = set()
    for run in r.runs:
        if spoiled_only(run.link):
            continue  # kept, invalid, and replaced (conftest.traced_bulk)
        f = run.flow
        # headers, TLS records and retransmissions on top of the object: well under 1.5x
        pts = _plausible(f, out, int(f.bytes * 1.5))
        sources |= {p["source"] for p in pts}
        spurious = f.trace["facts"]["spurious_losses"] if f.trace else None
        # quic-go logs its spurious losses (0 is a count); tcp_probe cannot tell
        assert (spurious is None) == (run.arm == "h2")
    assert sources == {"tcp_probe", "qlog"}


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.built
def test_a_traced_compete_run_draws_its_window_figure(traced_compete: dict[str, Any]) -> None:
    from quicbed.report import build as report

    r, out = traced_compete["result"], traced_compete["out"]
    assert isinstance(r, CompeteResult)
    for run in r.runs:
        conns = set()
        for f in run.flows:
            _plausible(f, out, int(f.bytes * 1.5))
            conns.add(f.trace["conn"] if f.trace else None)
        assert len(conns) == 2  # each flow its own connection
    report.build(out)
    figs = out / "report" / "figures"
    cid = str((r.runs[0].flows[0].trace or {})["dir"]).split("/")[1]
    for rep in (0, 1):
        for ext in ("png", "svg"):
            p = figs / f"windows-{cid}-{rep}.{ext}"
            assert p.exists() and p.stat().st_size > 10_000, p


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.built
def test_a_compete_cells_quiche_flows_are_matched_to_their_connections(
    shared_links: Any, tmp_path: Path
) -> None:
    """Two Cloudflare quiche flows against one TCP flow for 3 s, traced at light: each
    quiche flow is matched to its own connection's qlog by its client port, which
    quicbed's quiche server writes into the qlog's description (issue 45: quiche's qlog
    has no connection_started, and its flows in a compete cell went unmatched)."""
    from made_rows import measured_transfer

    from quicbed.model.link import make_condition
    from quicbed.spec.bulkobjects import object_path
    from quicbed.spec.cellconfig import make_cell

    cfg = make_cell(
        condition=make_condition(**TRANSFER_COND),
        page=object_path("10MB"),
        warmup=0,
        runs=2,
        kind="compete",
        arms=("h3-quiche", "h2"),
        transfer={
            "size": "10MB",
            "duration_s": 3,
            "flows": (("h3-quiche", 2), ("h2", 1)),
            "stagger_s": 0,
        },
    )
    r = measured_transfer(cfg, tmp_path / "r", shared_links, traces="light")
    assert isinstance(r, CompeteResult)
    if sum(not run.spoiled for run in r.runs) < 2:
        from conftest import LinkNotHeld

        raise LinkNotHeld(f"compete repetitions spoiled on a busy host: {len(r.runs)} measured")
    checked = 0
    for run in r.runs:
        if run.spoiled:
            continue  # kept, invalid, and replaced
        quiche = [f for f in run.flows if f.arm == "h3-quiche"]
        assert len(quiche) == 2, run.flows
        conns = [(f.trace or {}).get("conn") for f in quiche]
        assert None not in conns and len(set(conns)) == 2, [f.trace for f in quiche]
        for f in quiche:  # its own connection's window samples, read back
            rows = [x for x in flow_samples(tmp_path / "r", f) if x["event"] == "sample"]
            assert len(rows) > 20 and all((x["cwnd_bytes"] or 0) > 0 for x in rows), f.trace
        checked += 1
    assert checked >= 2
