"""Arms as stacks with real components: per-arm CC applied and verified from the server
side (TCP from the server's kernel, QUIC from the server's log), host-wide TCP CUBIC
beta taken, checked and restored, and a CC changed behind a cell caught per load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SharedLinks, spoiled

from quicbed import hostparam
from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.servers.webserver import WebServer
from quicbed.spec.arms import ArmSettings, parse_cli, resolve
from quicbed.spec.cellconfig import make_cell
from quicbed.tcpinfo import ss_congestion
from quicbed.testbed.local import LocalTestbed
from quicbed.traces.tracer import read_samples

COND = make_condition(rate_mbit=50, rtt_ms=20)


def test_ss_detail_lines_name_each_connection_cc() -> None:
    text = (
        "0 0 10.10.1.1:443 10.10.2.2:50000\n"
        "\t ts sack cubic wscale:7,7 rto:204 rtt:20.3/10 mss:1448\n"
        "0 0 10.10.1.1:443 10.10.2.2:50002\n"
        "\t bbr wscale:10,10 rto:201 bbr:(bw:1Mbps,mrtt:20)\n"
        "0 0 10.10.1.1:443 10.10.2.2:50004\n"
        "\t ecn reno wscale:7,7 rto:204\n"
    )
    assert ss_congestion(text) == ["cubic", "bbr", "reno"]
    assert ss_congestion("") == []


def test_arms_resolve_ports_ccs_and_pairs() -> None:
    names, settings = parse_cli("h2:cc=bbr,h3:cc=cubic,h3-n2:stack=quic-go:cubic_n=2:cc=cubic")
    arms = resolve(names, settings, "bbr")
    assert [(a.name, a.stack, a.cc, a.port) for a in arms] == [
        ("h2", "apache", "bbr", 443),
        ("h3", "quic-go", "cubic", 443),
        ("h3-n2", "quic-go", "cubic", 4433),
    ]
    cfg = make_cell(condition=COND, page="5kb", arms=names, arm_settings=settings, cc="bbr")
    assert (
        cfg.tcp_cc() == "bbr" and cfg.cell_id() != make_cell(condition=COND, page="5kb").cell_id()
    )
    from quicbed.spec.arms import pairs

    assert pairs(arms, [("h3", "h3-n2")]) == [("h2", "h3"), ("h2", "h3-n2"), ("h3", "h3-n2")]
    with pytest.raises(QuicbedError, match="cubic_beta is CUBIC's; this arm runs bbr"):
        resolve(("h2",), {"h2": ArmSettings(cc="bbr", cubic_beta=0.5)}, "cubic")


def test_quic_go_loss_detection_is_its_own_setting() -> None:
    """quic-go's loss_detection (the same key as Envoy's, with quic-go's own values):
    adaptive or rfc9002, on any CC, passed to the server and checked against what its
    log reads back from quic-go; anything else refused naming quic-go's values."""
    from quicbed.servers.quic_go import QuicGoServer
    from quicbed.servers.webserver import ServeSpec
    from quicbed.testbed.lifecycle import RPath

    names, settings = parse_cli("h3:cc=reno:loss_detection=rfc9002,h3-a:stack=quic-go")
    arm, plain = resolve(names, settings, "cubic")
    assert arm.params == {"loss_detection": "rfc9002"} and plain.params == {}
    for bad, msg in (
        ("h3:loss_detection=ild0", "loss_detection 'ild0' is not one of quic-go's"),
        ("h3-envoy:loss_detection=adaptive", "loss_detection 'adaptive' is not one of QUICHE's"),
        ("h3:cc=reno:cubic_n=2", "cubic_n are CUBIC's; this arm runs reno"),
    ):
        with pytest.raises(QuicbedError, match=msg):
            resolve(*parse_cli(bad), "cubic")

    class Tb:
        server_ip = "10.10.1.1"

        def bin_path(self, role: str, name: str) -> RPath:
            return RPath("/bin") / name

    spec = ServeSpec(*(RPath(p) for p in ("/www", "/c", "/k", "/logs")))
    srv = QuicGoServer(Tb(), spec, arm)  # type: ignore[arg-type]  # argv reads these only
    argv = srv.argv()
    assert argv[argv.index("-loss-detection") + 1] == "rfc9002"
    assert "-loss-detection" not in QuicGoServer(Tb(), spec, plain).argv()  # type: ignore[arg-type]
    # the log's read-back is the evidence: a conn record of another setting fails the load
    conn = {"event": "conn", "conn_id": 1, "cc": "reno", "loss_detection": "adaptive"}
    facts = srv.load_facts([json.dumps(conn)])
    assert srv.evidence(facts) == [
        "the server's log shows loss_detection ['adaptive'], not rfc9002"
    ]
    facts = srv.load_facts([json.dumps({**conn, "loss_detection": "rfc9002"})])
    assert srv.evidence(facts) == []
    assert "RFC 9002's loss detection with fixed thresholds" in str(QuicGoServer.against_study(arm))
    assert "adaptive loss detection" in str(QuicGoServer.against_study(plain))


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_rfc9002_loss_detection_sees_more_spurious_losses(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """Under per-packet reordering, quic-go's RFC 9002 thresholds (fixed) take reordered
    packets for lost again and again; its own adaptive detection switches the packet
    threshold off after the first spurious loss of a connection. Both arms verified per
    load from the server's log; the traces count each load's spurious losses."""

    names, settings = parse_cli("h3:cc=cubic,h3-rfc:stack=quic-go:loss_detection=rfc9002")
    cond = make_condition(rate_mbit=20, rtt_ms=36, jitter_ms=4, jitter_kind="reorder")
    cfg = make_cell(
        condition=cond, page="500kb", runs=3, warmup=1, arms=names, arm_settings=settings
    )
    r = shared_links.run_cell(cfg, tmp_path / "r", traces="light")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if not x.warmup]
    store.close()
    spurious: dict[str, list[int]] = {"h3": [], "h3-rfc": []}
    for x in runs:
        want = "rfc9002" if x.arm == "h3-rfc" else "adaptive"
        assert x.detail["server"]["loss_detection"] == [want], x.detail["server"]
        spurious[x.arm].append(x.detail["transport"]["spurious_losses"])
    assert sum(spurious["h3-rfc"]) > sum(spurious["h3"]), spurious
    print("spurious losses per load:", spurious)
    # the thresholds each server logged: fixed under RFC 9002, the packet threshold
    # switched off at a load's first spurious loss under the adaptive detection
    for x in runs:
        rows = read_samples(tmp_path / "r" / x.detail["traces"]["files"]["transport"])
        th = [s for s in rows if s["event"] == "thresholds"]
        assert th and th[0]["packet_threshold"] == 3, (x.arm, th[:2])
        off = [s["t_ms"] for s in th if s["packet_threshold"] == 0]
        if x.arm == "h3-rfc":
            assert not off and {s["time_threshold"] for s in th} == {1.125}, th
        elif x.detail["transport"]["spurious_losses"]:
            first = min(s["t_ms"] for s in rows if s["event"] == "spurious")
            assert off and off[0] == pytest.approx(first, abs=1), (off, first)


@pytest.mark.root
def test_host_wide_beta_is_shared_refused_and_restored() -> None:
    tb = LocalTestbed("tbeta")
    path = hostparam.TCP_CUBIC_BETA
    before = Path(path).read_text().strip()
    with hostparam.tcp_cubic_beta(tb, 0.5, "local:a"):
        assert Path(path).read_text().strip() == "512"
        with hostparam.tcp_cubic_beta(tb, 0.5, "local:b"):  # same value: shared
            pass
        assert Path(path).read_text().strip() == "512"  # a still holds it
        with (
            pytest.raises(QuicbedError, match=r"local:a on this host run with 512/1024"),
            hostparam.tcp_cubic_beta(tb, 0.8, "local:b"),
        ):
            pass
    assert Path(path).read_text().strip() == before
    # a holder killed while holding it: its testbed's tear-down lets go
    hostparam.call(tb, "acquire", path, "600", hostparam.holder_of(tb))
    assert Path(path).read_text().strip() == "600"
    tb.teardown()
    assert Path(path).read_text().strip() == before


def _switch_tcp_cc(tb: LocalTestbed, cc: str) -> None:
    for role in ("server", "client"):
        tb.exec(role, ["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}"])


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_tcp_cc_and_beta_verified_from_the_kernel_per_load(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """h2 with CUBIC beta 0.5: its loads show cubic (ss -tin) and beta 512/1024 on the
    host, restored afterwards; from load 3 on the TCP CC is switched to reno behind the
    cell: those loads are invalid, naming both CCs. (One cell for both, on the suite's
    shared link, whose CC is put back after: a receipt and a bring-up of its own would
    cost the suite 15 s for nothing this test checks.)"""
    before = Path(hostparam.TCP_CUBIC_BETA).read_text().strip()
    names, settings = parse_cli("h2:cubic_beta=0.5,h3")
    cfg = make_cell(condition=COND, page="5kb", runs=4, warmup=1, arms=names, arm_settings=settings)
    switched: list[LocalTestbed] = []

    def fault(arm: str, rep: int, servers: dict[str, WebServer]) -> None:
        if arm == "h2" and rep == 3:
            tb = LocalTestbed(shared_links.prefix_of(cfg))
            switched.append(tb)
            _switch_tcp_cc(tb, "reno")

    try:
        r = shared_links.run_cell(cfg, tmp_path / "a", traces="none", fault=fault)
    finally:
        for tb in switched:  # the shared link's CC, as its tuning set it
            _switch_tcp_cc(tb, cfg.tcp_cc())
    assert r.status == "done", r.problem
    bad = r.invalid.get("h2", [])
    assert [b.split(":")[0] for b in bad] == ["#3", "#4"], bad
    assert all("the server's connections ran reno, not cubic" in b for b in bad), bad
    assert "h3" not in r.invalid
    # what the server saw, every load: cubic, then reno behind the cell's back
    assert r.verified["h2"]["cc"] == ["cubic", "reno"] and r.verified["h3"]["cc"] == ["cubic"]
    store = Store(tmp_path / "a")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h2"]
    store.close()
    # the warm-up and loads 1 and 2 ran before the switch: cubic with the host's beta set
    cubic = [x for x in runs if x.rep < 3]
    assert len(cubic) == 3 and all(x.valid or spoiled(x) for x in cubic), cubic
    assert [x.detail["server"]["cubic_beta_kernel"] for x in cubic] == [512, 512, 512]
    assert Path(hostparam.TCP_CUBIC_BETA).read_text().strip() == before


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_quic_go_cc_and_cubic_n_from_its_log(shared_links: SharedLinks, tmp_path: Path) -> None:
    """Three quic-go arms side by side on their own ports: NewReno, CUBIC N = 1 and CUBIC
    N = 2 with beta 0.5; each load's CC and parameters as the server read them back from
    its patched congestion package."""
    names, settings = parse_cli(
        "h2,h3:cc=reno,h3-cubic:stack=quic-go,h3-n2:stack=quic-go:cubic_n=2:cubic_beta=0.5"
    )
    cfg = make_cell(condition=COND, page="5kb", runs=2, warmup=1, arms=names, arm_settings=settings)
    r = shared_links.run_cell(cfg, tmp_path / "r", traces="light")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    assert {a: v["cc"] for a, v in r.verified.items()} == {
        "h2": ["cubic"],
        "h3": ["reno"],
        "h3-cubic": ["cubic"],
        "h3-n2": ["cubic"],
    }
    assert set(r.comparisons) == {"h2/h3", "h2/h3-cubic", "h2/h3-n2"}
    store = Store(tmp_path / "r")
    facts = {x.arm: x.detail["server"] for x in store.runs(r.cell_id, r.attempt)}
    traced = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h3-n2"]
    store.close()
    assert facts["h3-cubic"]["cubic_n"] == [1] and facts["h3-cubic"]["cubic_beta"] == [0.7]
    assert facts["h3-n2"]["cubic_n"] == [2] and facts["h3-n2"]["cubic_beta"] == [0.5]
    # each QUIC arm's qlog went to its own folder and came home with its loads
    assert all(
        any(k.startswith("qlog:") for k in x.detail["traces"]["files"])
        for x in traced
        if not x.warmup
    )


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_quiche_arm_with_bbr_verified_and_traced(shared_links: SharedLinks, tmp_path: Path) -> None:
    """The issue's cell in small: h2, h3 and h3-quiche under --cc bbr (quic-go keeps
    CUBIC: it has no BBR); every load verified (protocol, 0-RTT, CC from the server
    side), quiche's qlog (the newer "quic:" event names) read into transport samples."""
    names, settings = parse_cli("h2,h3:cc=cubic,h3-quiche")
    cfg = make_cell(
        condition=COND, page="100kb", runs=2, warmup=1, arms=names, arm_settings=settings, cc="bbr"
    )
    r = shared_links.run_cell(cfg, tmp_path / "r", traces="light")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    # (a load the link or host spoiled is measured again at the end, over 0-RTT too)
    used = {a: v["used_0rtt"] and v["used_0rtt"] - v["replacements"] for a, v in r.verified.items()}
    assert {a: (v["cc"], v["protocols"], used[a]) for a, v in r.verified.items()} == {
        "h2": (["bbr"], ["h2"], 0),
        "h3": (["cubic"], ["h3"], 2),
        "h3-quiche": (["bbr"], ["h3"], 2),
    }
    assert r.verified["h2"]["tls_resumed"] == r.verified["h2"]["measured"] >= 2
    assert set(r.comparisons) == {"h2/h3", "h2/h3-quiche"}
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h3-quiche"]
    store.close()
    for x in runs:
        if not x.warmup:
            assert x.detail["transport"]["status"] == "ok", x.detail["transport"]
            assert x.detail["server"]["stats"], x.detail["server"]
