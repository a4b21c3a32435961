"""QUIC transport parameters as arm settings (quicbed.settings.tparams): RFC 9000's ranges,
what each stack and client refuses by name, how they reach the server and the bulk
client, and the evidence from what each side advertised. Real transfers are in
tests/test_transfer_cells.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SharedLinks, reads_well

from quicbed.errors import QuicbedError
from quicbed.run.bulk import client_transport_argv
from quicbed.servers.gquiche import transport_parameters
from quicbed.servers.quic_go import QuicGoServer
from quicbed.servers.webserver import ServeSpec
from quicbed.settings import tparams
from quicbed.spec.arms import parse_cli, resolve
from quicbed.testbed.lifecycle import RPath


def arm(text: str, kind: str = "bulk") -> dict[str, object]:
    (a,) = resolve(*parse_cli(text), "cubic", kind)  # type: ignore[arg-type]
    return a.params


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h3:max_udp_payload_size=1199", "max_udp_payload_size 1199: RFC 9000 allows 1200..65527"),
        ("h3:ack_delay_exponent=21", "ack_delay_exponent 21: RFC 9000 allows 0..20"),
        ("h3:max_ack_delay=16384", "max_ack_delay 16384: RFC 9000 allows 0..16383"),
        ("h3:active_connection_id_limit=1", "active_connection_id_limit 1: RFC 9000 allows 2"),
        ("h3:initial_max_data=-1", r"initial_max_data -1: RFC 9000 allows 0..2\^62-1"),
        ("h3:initial_max_data=4611686018427387904", "initial_max_data 4611686018427387904"),
        (
            "h3:initial_max_streams_bidi=1152921504606846977",
            "RFC 9000 allows 0..1152921504606846976",
        ),
        ("h3:client_max_ack_delay=20000", "client_max_ack_delay 20000: RFC 9000 allows"),
        ("h3:initial_max_data=lots", "initial_max_data 'lots'"),
        ("h3:flow_control_autotune=maybe", "flow_control_autotune 'maybe'"),
    ],
)
def test_rfc_ranges_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(QuicbedError, match=message):
        arm(text)


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        # quic-go's constants and its "0 is the default"
        ("h3:max_udp_payload_size=1300", "bulk", "quic-go's constant MaxPacketBufferSize, 1452"),
        ("h3:max_ack_delay=10", "bulk", "quic-go's constant 26 ms"),
        ("h3:ack_delay_exponent=4", "bulk", "quic-go's constant AckDelayExponent, 3"),
        ("h3:active_connection_id_limit=8", "bulk", "MaxActiveConnectionIDs, 4"),
        ("h3:initial_max_data=0", "bulk", "quic-go takes 0 as its default"),
        ("h3:max_idle_timeout=0", "bulk", "quic-go takes 0 as its default"),
        # one stream window: all three, equal
        ("h3:initial_max_stream_data_uni=65536", "bulk", "one stream window for all three"),
        (
            "h3:initial_max_stream_data_bidi_local=1:initial_max_stream_data_bidi_remote=1:"
            "initial_max_stream_data_uni=2",
            "bulk",
            "one stream window",
        ),
        # HTTP/3's floor
        ("h3:initial_max_streams_bidi=0", "bulk", "an HTTP/3 server must allow at least 1"),
        ("h3:initial_max_streams_uni=2", "bulk", "must allow at least 3"),
        ("h3:client_initial_max_streams_uni=2", "bulk", "HTTP/3 needs at least 3"),
        # a TCP arm, a gQUIC arm
        ("h2:initial_max_data=65536", "bulk", "QUIC transport parameter, and apache runs TCP"),
        ("gquic:client_initial_max_data=65536", "page", "gquic has no parameter"),
        # what the client of the cell can advertise
        ("h3:client_max_udp_payload_size=1300", "bulk", "quicbed-bulk.*1452 bytes"),
        ("h3:client_initial_max_data=0", "bulk", "quicbed-bulk .* takes 0 as its default"),
        ("h3:client_initial_max_data=65536", "page", "Chromium has no switch for it"),
        ("h3:client_max_idle_timeout=5000", "page", "idle_connection_timeout_seconds"),
        ("h3:client_max_udp_payload_size=1300", "page", "--quic-max-packet-length"),
    ],
)
def test_what_a_stack_or_client_cannot_set_is_refused_by_name(
    text: str, kind: str, message: str
) -> None:
    with pytest.raises(QuicbedError, match=message):
        arm(text, kind)


def test_settings_typed_and_unset_ones_left_out() -> None:
    p = arm(
        "h3:initial_max_data=1000000:flow_control_autotune=false:client_initial_max_data=65536"
        ":client_flow_control_autotune=false:client_initial_max_streams_bidi=0"
    )
    assert p == {
        "initial_max_data": 1000000,
        "flow_control_autotune": False,
        "client_initial_max_data": 65536,
        "client_initial_max_streams_bidi": 0,
        "client_flow_control_autotune": False,
    }
    assert arm("h3") == {}


class _Tb:
    server_ip = "10.10.1.1"

    def bin_path(self, role: str, name: str) -> RPath:
        return RPath("/bin") / name


def _server(text: str) -> QuicGoServer:
    (a,) = resolve(*parse_cli(text), "cubic", "bulk")
    spec = ServeSpec(*(RPath(p) for p in ("/www", "/c", "/k", "/logs")))
    return QuicGoServer(_Tb(), spec, a)  # type: ignore[arg-type]  # argv reads these only


def test_the_server_and_the_client_get_their_flags() -> None:
    srv = _server(
        "h3:initial_max_data=100000:initial_max_stream_data_bidi_local=2000"
        ":initial_max_stream_data_bidi_remote=2000:initial_max_stream_data_uni=2000"
        ":initial_max_streams_bidi=7:initial_max_streams_uni=5:max_idle_timeout=12000"
        ":flow_control_autotune=false"
    )
    assert srv.transport_argv() == [
        "-initial-conn-window",
        "100000",
        "-initial-stream-window",
        "2000",
        "-max-incoming-streams",
        "7",
        "-max-incoming-uni-streams",
        "5",
        "-idle-timeout",
        "12000ms",
        "-flow-control-autotune=false",
    ]
    assert _server("h3").transport_argv() == []
    p = arm(
        "h3:client_initial_max_data=65536:client_initial_max_stream_data_bidi_local=9"
        ":client_initial_max_stream_data_bidi_remote=9:client_initial_max_stream_data_uni=9"
        ":client_initial_max_streams_bidi=0:client_max_idle_timeout=1500"
        ":client_flow_control_autotune=false"
    )
    assert client_transport_argv(p) == [
        "-initial-max-data",
        "65536",
        "-initial-max-stream-data",
        "9",
        "-initial-max-streams-bidi",
        "-1",  # quic-go's client takes 0 as its default 100
        "-max-idle-timeout",
        "1500ms",
        "-flow-control-autotune=false",
    ]


QUIC_GO_DEFAULT = {  # what quic-go v0.65.0 advertised in a real connection (its qlog)
    "ack_delay_exponent": 3,
    "active_connection_id_limit": 4,
    "initial_max_data": 786432,
    "initial_max_stream_data_bidi_local": 524288,
    "initial_max_stream_data_bidi_remote": 524288,
    "initial_max_stream_data_uni": 524288,
    "initial_max_streams_bidi": 100,
    "initial_max_streams_uni": 100,
    "max_ack_delay": 26,
    "max_idle_timeout": 30000,
    "max_udp_payload_size": 1452,
}


def _conn(**extra: object) -> str:
    rec = {
        "event": "conn",
        "conn_id": 1,
        "cc": "cubic",
        "tp_local": QUIC_GO_DEFAULT,
        "tp_remote": {**QUIC_GO_DEFAULT, "initial_max_data": 65536},
        "flow_control_autotune": True,
        **extra,
    }
    return json.dumps(rec)


def test_evidence_names_the_parameter_each_side_advertised() -> None:
    srv = _server("h3:initial_max_data=786432:client_initial_max_data=65536")
    facts = srv.load_facts([_conn()])
    assert facts["tp_local"] == [QUIC_GO_DEFAULT] and facts["flow_control_autotune"] == [True]
    assert srv.evidence(facts) == []
    srv = _server("h3:initial_max_data=1000000:client_initial_max_data=131072")
    assert srv.evidence(facts) == [
        "initial_max_data: the server advertised 786432 bytes (the server's log, "
        "transport:parameters_set), not 1000000 bytes",
        "client_initial_max_data: the client advertised 65536 bytes (the server's log, "
        "transport:parameters_set), not 131072 bytes",
    ]
    # a parameter the event leaves out has RFC 9000's default: quic-go omits a limit of 0
    srv = _server("h3:client_initial_max_streams_bidi=0:flow_control_autotune=false")
    facts = srv.load_facts([_conn()])
    assert srv.evidence(facts) == [
        "flow_control_autotune: the server's log shows [True], not false",
        "client_initial_max_streams_bidi: the client advertised 100 (the server's log, "
        "transport:parameters_set), not 0",
    ]
    no_bidi = {k: v for k, v in QUIC_GO_DEFAULT.items() if k != "initial_max_streams_bidi"}
    facts = srv.load_facts([_conn(tp_remote=no_bidi, flow_control_autotune=False)])
    assert srv.evidence(facts) == []
    # a server that logs no sets: nothing to verify them by
    facts = srv.load_facts([_conn(tp_remote=None, flow_control_autotune=False)])
    assert srv.evidence(facts) == [
        "client_initial_max_streams_bidi: the server's log has no record of what the "
        "client advertised on 1 of 1 connection(s)"
    ]


def test_the_client_record_is_the_other_end_of_the_wire() -> None:
    p = arm("h3:initial_max_data=786432:client_initial_max_data=65536:flow_control_autotune=true")
    final = {
        "tp_local": {**QUIC_GO_DEFAULT, "initial_max_data": 65536},
        "tp_remote": QUIC_GO_DEFAULT,
        "flow_control_autotune": True,
    }
    assert tparams.client_view(p, final) == []  # the server's autotune: not the client's to see
    wrong = tparams.client_view({**p, "client_flow_control_autotune": False}, final)
    assert wrong == ["client_flow_control_autotune: the client's record shows [True], not false"]


def test_quiche_strings_of_a_chromium_netlog() -> None:
    sent = (
        "[Client [chosen_version 00000001 other_versions 00000001] max_idle_timeout 30000 "
        "max_udp_payload_size 1472 initial_max_data 15728640 initial_max_stream_data_bidi_local "
        "6291456 initial_max_stream_data_bidi_remote 6291456 initial_max_stream_data_uni "
        "6291456 initial_max_streams_bidi 100 initial_max_streams_uni 103 "
        "initial_source_connection_id 0 max_datagram_frame_size 65536 "
        "google_connection_options ORIG]"
    )
    assert transport_parameters(sent) == {
        "max_idle_timeout": 30000,
        "max_udp_payload_size": 1472,
        "initial_max_data": 15728640,
        "initial_max_stream_data_bidi_local": 6291456,
        "initial_max_stream_data_bidi_remote": 6291456,
        "initial_max_stream_data_uni": 6291456,
        "initial_max_streams_bidi": 100,
        "initial_max_streams_uni": 103,
    }
    got = transport_parameters(
        "[Server original_destination_connection_id e015 max_idle_timeout 30000 "
        "stateless_reset_token f8ac max_ack_delay 26 0x75f=ed63fadc]"
    )
    assert got == {"max_idle_timeout": 30000, "max_ack_delay": 26}


@pytest.mark.root
@pytest.mark.slow
def test_a_bulk_cell_verifies_both_ends_from_the_wire(
    shared_links: SharedLinks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quic-go and quiche servers advertising the arm's parameters, the bulk client its
    own: every flow checked against what each side recorded of the handshake. A third
    arm whose server is started without its flags (as a stack that ignored a setting
    would) is refused per flow, naming the parameter; a client window of 64 KiB without
    auto-tuning holds its flow near window / RTT."""
    from made_rows import bulk_config, measured_bulk, unspoiled_flows

    from quicbed.model.link import make_condition
    from quicbed.servers.quiche import QuicheServer

    real = QuicheServer.transport_argv
    monkeypatch.setattr(
        QuicheServer,
        "transport_argv",
        lambda self: [] if self.arm.name == "h3-lie" else real(self),
    )
    text = (
        "h3:initial_max_data=1000000:initial_max_stream_data_bidi_local=2000000"
        ":initial_max_stream_data_bidi_remote=2000000:initial_max_stream_data_uni=2000000"
        ":initial_max_streams_bidi=50:initial_max_streams_uni=10:max_idle_timeout=20000"
        ":client_initial_max_data=65536:client_flow_control_autotune=false,"
        "h3-quiche:max_udp_payload_size=1300:max_ack_delay=10:ack_delay_exponent=5"
        ":active_connection_id_limit=3:initial_max_stream_data_uni=100000"
        ":flow_control_autotune=false:client_initial_max_data=2000000,"
        "h3-lie:stack=quiche:max_ack_delay=10"
    )
    cfg = bulk_config(make_condition(rate_mbit=50, rtt_ms=20), text)
    rec = measured_bulk(cfg, tmp_path / "r", shared_links)
    flows = unspoiled_flows(rec)
    assert len(flows) == 6
    for (name, _), f in flows.items():
        if name == "h3-lie":  # quiche advertised its default 25 ms, seen from both ends
            assert not f.ok and f.error == (
                "max_ack_delay: the server advertised 25 ms (the server's log, "
                "transport:parameters_set), not 10 ms; max_ack_delay: the server advertised "
                "25 ms (the client's record, transport:parameters_set), not 10 ms"
            ), f.error
            continue
        assert f.ok, (name, f.error)
        ct = f.client_transport or {}
        if name == "h3":
            assert f.evidence["tp_local"][0]["initial_max_streams_uni"] == 10
            assert f.evidence["tp_remote"][0]["initial_max_data"] == 65536
            assert ct["tp_remote"]["initial_max_data"] == 1000000  # the client saw it too
            assert ct["flow_control_autotune"] is False
            # 64 KiB a round trip (20 ms + the queue's few ms): at most 26 Mbit/s
            assert f.goodput_bps is not None and f.goodput_bps < 65536 * 8 / 0.020
        else:
            assert ct["tp_remote"]["max_udp_payload_size"] == 1300
            assert ct["tp_remote"]["ack_delay_exponent"] == 5
            assert f.evidence["tp_remote"][0]["initial_max_data"] == 2000000
            assert f.evidence["flow_control_autotune"] == [False]


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_page_loads_verify_the_servers_and_store_what_chromium_advertised(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """quic-go, quiche and Envoy each advertising the arm's parameters to Chromium, every
    load checked from the wire (quic-go's and quiche's own records; Envoy's through the
    client's NetLog), and every load storing the parameters Chromium sent: the same set
    whichever server it met."""

    from quicbed.model.link import make_condition
    from quicbed.results.store import Store
    from quicbed.spec.cellconfig import make_cell

    window = (
        ":initial_max_stream_data_bidi_local=500000:initial_max_stream_data_bidi_remote=500000"
        ":initial_max_stream_data_uni=500000"
    )
    names, settings = parse_cli(
        f"h2,h3:initial_max_data=1000000{window}:initial_max_streams_bidi=20,"
        "h3-quiche:max_ack_delay=10:active_connection_id_limit=3,"
        f"h3-envoy:initial_max_data=1000000{window}:initial_max_streams_bidi=20"
        ":max_idle_timeout=12000"
    )
    cond = make_condition(rate_mbit=50, rtt_ms=20)
    cfg = make_cell(
        condition=cond, page="100kb", runs=2, warmup=1, arms=names, arm_settings=settings
    )
    r = shared_links.run_cell(cfg, tmp_path / "r")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm != "h2"]
    store.close()
    sent = set()
    for x in runs:
        srv = x.detail["server"]
        local, remote = srv["tp_local"], srv["tp_remote"]
        assert local and remote and None not in local and None not in remote, srv
        if x.arm in ("h3", "h3-envoy"):
            assert {tp["initial_max_data"] for tp in local} == {1000000}, (x.arm, local)
            assert {tp["initial_max_stream_data_uni"] for tp in local} == {500000}
            assert {tp["initial_max_streams_bidi"] for tp in local} == {20}
        else:
            assert {(tp["max_ack_delay"], tp["active_connection_id_limit"]) for tp in local} == {
                (10, 3)
            }
        sent |= {json.dumps(tp, sort_keys=True) for tp in remote}
    # Chromium's own set, as each server decoded it (or its NetLog recorded it): keys a
    # server's record leaves out aside, one set
    common = {k for tp in map(json.loads, sent) for k in tp if k in tparams.PARAMS}
    values = {k: {json.loads(t).get(k, tparams.PARAMS[k].default) for t in sent} for k in common}
    assert values["initial_max_data"] == {15728640}, values
    assert values["initial_max_stream_data_bidi_local"] == {6291456}, values


CHROMIUM = {  # what Chromium 156 advertised in tests' real loads (its NetLog, a server)
    "max_idle_timeout": 30000,
    "max_udp_payload_size": 1472,
    "initial_max_data": 15728640,
    "initial_max_stream_data_bidi_local": 6291456,
    "initial_max_stream_data_bidi_remote": 6291456,
    "initial_max_stream_data_uni": 6291456,
    "initial_max_streams_bidi": 100,
    "initial_max_streams_uni": 103,
}


def _advertised_folder(tmp_path: Path, browsers: dict[str, str] | None = None) -> None:
    """A results folder of one page cell whose h3 loads stored both ends' transport
    parameters, as real loads store them; ``browsers``: each arm's own browser build,
    as a cell that loads arms in two browsers records them."""
    from quicbed.model.link import make_condition
    from quicbed.results.rows import RunRow
    from quicbed.results.store import Store
    from quicbed.spec.cellconfig import make_cell

    cfg = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="5kb", runs=2)
    store = Store(tmp_path, create=True)
    cid = cfg.cell_id()
    store.add_cell(cid, cfg.model_dump(mode="json"))
    att = store.new_attempt(cid, {"git": {"sha": "x"}})
    store.set_receipt(cid, att, {"passed": True, "checks": []})
    store.set_versions(
        cid,
        att,
        {"browser": "HeadlessChrome/156.0.7000.0", **({"browsers": browsers} if browsers else {})},
    )
    for seq, (arm, rep) in enumerate((("h2", 0), ("h3", 0), ("h3", 1), ("h2", 1))):
        server = {"tp_local": [QUIC_GO_DEFAULT], "tp_remote": [CHROMIUM]} if arm == "h3" else {}
        store.add_run(
            RunRow(
                cell_id=cid,
                attempt=att,
                arm=arm,
                rep=rep,
                seq=seq,
                warmup=False,
                valid=True,
                plt_ms=100.0 + seq,
                detail={"server": server},
            ),
            None,
        )
    store.finish_attempt(cid, att, "done")
    store.close()


def test_what_the_browser_advertised_is_in_the_export_and_the_report(tmp_path: Path) -> None:
    """Each load's stored sets, a row per connection and side in the export's
    transport-params table, and per client in the report (a parameter a set leaves out
    at its RFC default)."""
    import csv

    from quicbed.report.build import build
    from quicbed.results.export import export

    _advertised_folder(tmp_path)
    path = export(tmp_path, "csv", table="transport-params")
    assert path.name == "transport_params.csv"
    table = list(csv.DictReader(path.read_text().splitlines()))
    assert [(r["arm"], r["rep"], r["side"], r["stack"]) for r in table] == [
        ("h3", "0", "server", "quic-go"),
        ("h3", "0", "client", "quic-go"),
        ("h3", "1", "server", "quic-go"),
        ("h3", "1", "client", "quic-go"),
    ]
    client = table[1]
    assert client["client"] == "HeadlessChrome/156.0.7000.0"
    assert client["initial_max_data"] == "15728640" and client["max_ack_delay"] == "25"
    with pytest.raises(QuicbedError, match="--table: unknown 'hars'"):
        export(tmp_path, "csv", table="hars")
    report = build(tmp_path)
    shown = {(a["parameter"], a["values"], a["connections"]) for a in report.advertised}
    assert ("initial_max_streams_uni", "103", 2) in shown
    assert ("active_connection_id_limit", "2", 2) in shown  # left out: the RFC's default
    html = (tmp_path / "report" / "index.html").read_text()
    assert "QUIC transport parameters the clients advertised" in html
    assert (tmp_path / "report" / "transport_params.csv").exists()


def test_each_arm_is_labelled_with_its_own_browser(tmp_path: Path) -> None:
    """A cell that loads an arm in Firefox and another in Chromium: each client's
    parameters are listed under the browser that sent them, not the cell's first."""
    from quicbed.results import advertised

    _advertised_folder(
        tmp_path, browsers={"h2": "HeadlessChrome/156.0.7000.0", "h3": "Firefox/153.8.0"}
    )
    clients = {(r["arm"], r["client"]) for r in advertised.rows(tmp_path) if r["side"] == "client"}
    assert clients == {("h3", "Firefox/153.8.0")}


@pytest.mark.browser
def test_a_transport_parameters_report_reads_well(tmp_path: Path) -> None:
    from quicbed.report.build import build

    _advertised_folder(tmp_path)
    build(tmp_path)
    reads_well(tmp_path / "report", "transport-parameters")


def test_one_way_delays_are_spec_keys() -> None:
    """delay_down/delay_up, a grid axis each (an unset one 0), instead of rtt; both, or
    neither, refused by name."""
    from quicbed.spec.sweepspec import SweepSpec, plan

    base = {"name": "d", "scenarios": {}}
    sc = {"kind": "bulk", "rate": [100], "objects": ["2MB"], "arms": ["h3"]}
    spec = SweepSpec(**{**base, "scenarios": {"s": {**sc, "delay_down": [10, 30]}}})
    conds = [c.config.condition for c in plan(spec)]
    assert [(c.delay_down(), c.delay_up(), c.rtt()) for c in conds] == [
        (10, 0, 10),
        (30, 0, 30),
    ]
    both = {**sc, "rtt": [36], "delay_down": [10]}
    for bad, why in ((both, "give rtt .* or delay_down/delay_up"), (sc, "rtt: a scenario needs")):
        with pytest.raises(ValueError, match=why):
            SweepSpec(**{**base, "scenarios": {"s": bad}})


def test_the_report_draws_goodput_against_the_axis_a_scenario_varies(tmp_path: Path) -> None:
    """A scenario whose bulk cells differ in delay: a line per arm with its band and the
    capped arm's window / RTT; one whose arms differ in one parameter: goodput against
    it. Drawn from stored records only."""
    from made_rows import store_bulk_cell

    from quicbed.model.link import make_condition
    from quicbed.report.build import build

    def store_cell(scenario: str, cond: object, text: str, mbits: dict[str, float]) -> None:
        store_bulk_cell(tmp_path, scenario, cond, text, mbits)

    cap = "h3-cap:stack=quic-go:client_initial_max_data=65536:client_flow_control_autotune=false"
    for d, mbits in ((10, {"h3": 90.0, "h3-cap": 40.0}), (30, {"h3": 88.0, "h3-cap": 15.0})):
        store_cell("delay", make_condition(rate_mbit=100, delay_down_ms=d), f"h3,{cap}", mbits)
    store_cell(
        "imd",
        make_condition(rate_mbit=100, delay_down_ms=30),
        "h3-a:stack=quic-go:client_initial_max_data=65536,"
        "h3-b:stack=quic-go:client_initial_max_data=1000000",
        {"h3-a": 15.0, "h3-b": 90.0},
    )
    report = build(tmp_path)
    shown = {f["shows"].get("axis"): f for f in report.figures if f["shows"].get("axis")}
    assert set(shown) == {"delay_down", "client_initial_max_data"}
    assert shown["delay_down"]["shows"]["scenario"] == "delay"
    assert (tmp_path / "report" / "figures" / "axis-delay.svg").exists()
    assert (tmp_path / "report" / "figures" / "param-imd.png").exists()
    from quicbed.model.link import LinkCondition
    from quicbed.report.axes import window_cap_mbit

    settings = {"client_initial_max_data": 65536, "client_flow_control_autotune": False}
    down_36 = LinkCondition(delay_down_ms=36, delay_up_ms=0)
    assert window_cap_mbit(settings, down_36) == pytest.approx(14.56, abs=0.01)
    unlimited = {"client_initial_max_data": 65536}
    assert window_cap_mbit(unlimited, LinkCondition(rtt_ms=36)) is None
    at_100 = LinkCondition(delay_down_ms=36, delay_up_ms=0, rate_mbit=100)
    assert window_cap_mbit(settings, at_100) == pytest.approx(14.56, abs=0.01)
    big = {**settings, "client_initial_max_data": 15728640}
    assert window_cap_mbit(big, at_100) is None  # above the link: the window is not the limit
