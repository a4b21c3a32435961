"""Host and socket knobs as verified arm settings (quicbed.settings.sockopts): UDP buffers,
application GSO, the AEAD. Refused by name where a stack or client cannot apply them;
applied and read back after every flow on real servers and sockets; a flow whose
read-back differs is invalid with the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import SharedLinks

from quicbed import hostparam
from quicbed.backends import LocalBackend, SshBackend
from quicbed.errors import QuicbedError
from quicbed.servers.quic_go import QuicGoServer
from quicbed.servers.webserver import ServeSpec
from quicbed.settings import sockopts
from quicbed.spec.arms import parse_cli, resolve, unpinned_aead
from quicbed.testbed.lifecycle import RPath


def _arms(text: str, kind: str = "page") -> list:
    names, settings = parse_cli(text)
    return resolve(names, settings, "cubic", kind=kind)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        (
            "h3:udp_rcvbuf=0",
            "bulk",
            "arm h3: udp_rcvbuf 0: a UDP socket buffer is 4096..1073741823",
        ),
        (
            "h3:client_udp_sndbuf=1073741824",
            "bulk",
            "arm h3: client_udp_sndbuf 1073741824: a UDP socket buffer is 4096..1073741823",
        ),
        ("h3:udp_sndbuf=100", "bulk", "udp_sndbuf 100: a UDP socket buffer is 4096"),
        (
            "h3-quiche:udp_rcvbuf=106496",
            "bulk",
            "arm h3-quiche: udp_rcvbuf 106496: quiche cannot apply it: quicbed's quiche "
            "server (rust/) binds a std UdpSocket",
        ),
        ("h3-quiche:gso=false", "bulk", "gso false: quiche cannot switch it: quicbed's quiche"),
        ("h3-quiche:aead=chacha20-poly1305", "bulk", "quiche cannot choose it: quiche's TLS"),
        ("h3-envoy:aead=chacha20-poly1305", "page", "envoy cannot choose it"),
        ("h3-envoy:udp_rcvbuf=106496", "page", "envoy cannot apply it"),
        ("h2:udp_rcvbuf=106496", "bulk", "arm h2: udp_rcvbuf 106496: apache cannot apply it"),
        ("h2:tls=1.2:aead=aes-128-gcm", "page", "aead with tls 1.2: aead names a TLS 1.3"),
        (
            "h3:aead=aes-256-gcm",
            "bulk",
            "arm h3: aead aes-256-gcm: quic-go cannot choose AES-256-GCM",
        ),
        ("h3:aead=rot13", "bulk", "aead 'rot13' is not one of aes-128-gcm"),
        (
            "h3:client_udp_rcvbuf=106496",
            "page",
            "arm h3: client_udp_rcvbuf 106496: the browser's UDP socket is its own",
        ),
    ],
)
def test_refused_by_name(text: str, kind: str, message: str) -> None:
    with pytest.raises(QuicbedError) as exc:
        _arms(text, kind)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def _server(text: str, kind: str = "bulk") -> QuicGoServer:
    arm = _arms(text, kind)[0]
    tb = SimpleNamespace(server_ip="10.0.0.1", bin_path=lambda role, name: Path("/b") / name)
    spec = ServeSpec(RPath("/d"), RPath("/c"), RPath("/k"), RPath("/l"))
    return QuicGoServer(tb, spec, arm)  # type: ignore[arg-type]


def test_quic_go_gets_its_flags_and_environment() -> None:
    srv = _server("h3:udp_rcvbuf=106496:udp_sndbuf=212992:aead=chacha20-poly1305:gso=false")
    argv = srv.argv()
    assert argv[argv.index("-udp-rcvbuf") + 1] == "106496"
    assert argv[argv.index("-udp-sndbuf") + 1] == "212992"
    assert srv.env() == {"GODEBUG": "cpu.aes=off", "QUIC_GO_DISABLE_GSO": "true"}
    plain = _server("h3")
    assert "-udp-rcvbuf" not in plain.argv() and plain.env() is None
    assert sockopts.client_argv({"client_udp_rcvbuf": 851968}) == ["-udp-rcvbuf", "851968"]


def test_ss_read_back_and_evidence() -> None:
    ss = "UNCONN 0 0 10.0.0.1:443 0.0.0.0:*\n\t skmem:(r0,rb212992,t0,tb851968,f0,w0,o0,bl0,d0)"
    assert sockopts.parse_ss(ss) == {"rb": 212992, "tb": 851968}
    assert sockopts.parse_ss("") is None
    params = {"udp_rcvbuf": 106496, "udp_sndbuf": 425984}
    facts = {"udp_socket": {"rb": 212992, "tb": 851968}}
    assert sockopts.evidence(params, facts) == []
    assert sockopts.evidence({"udp_rcvbuf": 212992}, facts) == [
        "the server's UDP socket had rb 212992 after this load, not 425984 (twice "
        "udp_rcvbuf 212992: Linux doubles it)"
    ]
    assert "not read back" in sockopts.evidence(params, {})[0]
    aead = {"aead": "chacha20-poly1305"}
    assert sockopts.evidence(aead, {"tls_cipher": ["TLS_CHACHA20_POLY1305_SHA256"]}) == []
    assert sockopts.evidence(aead, {"tls_cipher": ["TLS_AES_128_GCM_SHA256"]}) == [
        "the server's connections negotiated ['TLS_AES_128_GCM_SHA256'], not "
        "TLS_CHACHA20_POLY1305_SHA256"
    ]
    sends = {"udp_out_datagrams": 100, "tx_packets": 300, "tcp_out_segs": 0, "icmp_out_msgs": 0}
    assert sockopts.evidence({"gso": True}, {"udp_sends": sends}) == []
    assert "GSO seen" in sockopts.evidence({"gso": False}, {"udp_sends": sends})[0]
    flat = {**sends, "tx_packets": 101}
    assert sockopts.evidence({"gso": False}, {"udp_sends": flat}) == []
    assert "GSO not seen" in sockopts.evidence({"gso": True}, {"udp_sends": flat})[0]
    client = {"client_udp_rcvbuf": 851968, "aead": "chacha20-poly1305"}
    final = {"udp_rcvbuf": 1703936, "tls_cipher": "TLS_CHACHA20_POLY1305_SHA256"}
    assert sockopts.client_view(client, final) == []
    assert (
        "the client's UDP socket had udp_rcvbuf 212992"
        in sockopts.client_view(client, {**final, "udp_rcvbuf": 212992})[0]
    )


def test_gso_is_refused_on_a_testbed_that_cannot_show_it() -> None:
    with pytest.raises(QuicbedError, match="arm h3: gso is verified only on the local"):
        sockopts.check_gso_testbed("h3", SshBackend)
    sockopts.check_gso_testbed("h3", LocalBackend)


@pytest.mark.root
def test_a_host_cap_is_raised_under_the_lock_and_restored(tmp_path: Path) -> None:
    """hostparam.at_least on a stand-in file: left alone when high enough, raised and
    restored otherwise, refused while another holder has another value."""
    param = tmp_path / "rmem_max"
    param.write_text("1000\n")
    tb = SimpleNamespace(
        kind="local", controller_is_host=True, describe_short=lambda: "qbknob-test"
    )
    with hostparam.at_least(tb, str(param), 500):
        assert param.read_text().strip() == "1000"
    with hostparam.at_least(tb, str(param), 4000):
        assert param.read_text() == "4000"
        other = hostparam.answer(["acquire", str(param), "5000", "local:other"])
        assert other["refused"] == ["local:qbknob-test"]
        # a second testbed that needs less joins the hold instead of leaving it
        tb2 = SimpleNamespace(
            kind="local", controller_is_host=True, describe_short=lambda: "qbknob-two"
        )
        with hostparam.at_least(tb2, str(param), 2000):
            assert param.read_text() == "4000"
    assert param.read_text() == "1000"
    state = hostparam._state_file(str(param))
    assert not os.path.exists(state)
    os.unlink(state + ".lock")  # the stand-in's lock, which a real parameter keeps


@pytest.mark.root
@pytest.mark.built
@pytest.mark.slow
def test_a_bulk_cell_applies_and_verifies_the_knobs(
    shared_links: SharedLinks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three quic-go arms on a real testbed: one with small buffers both ends, ChaCha20
    and GSO off; one whose buffer needs net.core.rmem_max raised (restored after), GSO
    on; one whose server is started without its flags and environment (as a stack that
    ignored them would): each of its flows is invalid, naming the buffer, the AEAD and
    GSO."""
    from made_rows import bulk_config, measured_bulk, unspoiled_flows

    from quicbed.model.link import make_condition

    real_argv, real_env = QuicGoServer.argv, QuicGoServer.env

    def argv(self: QuicGoServer) -> list[str]:
        out = real_argv(self)
        if self.arm.name == "h3-lie":
            i = out.index("-udp-rcvbuf")
            del out[i : i + 2]
        return out

    monkeypatch.setattr(QuicGoServer, "argv", argv)
    monkeypatch.setattr(
        QuicGoServer, "env", lambda self: None if self.arm.name == "h3-lie" else real_env(self)
    )
    rmem_max = Path("/proc/sys/net/core/rmem_max").read_text().strip()
    big = int(rmem_max) + 4096  # more than the host allows: raised for the arm
    text = (
        "h3:udp_rcvbuf=106496:udp_sndbuf=212992:client_udp_rcvbuf=851968"
        ":client_udp_sndbuf=106496:aead=chacha20-poly1305:gso=false,"
        f"h3-big:stack=quic-go:udp_rcvbuf={big}:gso=true,"
        "h3-lie:stack=quic-go:udp_rcvbuf=106496:aead=chacha20-poly1305:gso=false"
    )
    rec = measured_bulk(
        bulk_config(make_condition(rate_mbit=50, rtt_ms=20), text), tmp_path / "r", shared_links
    )
    assert Path("/proc/sys/net/core/rmem_max").read_text().strip() == rmem_max  # restored
    flows = unspoiled_flows(rec)
    assert len(flows) == 6
    for (name, _), f in flows.items():
        ev, ct = f.evidence, f.client_transport or {}
        if name == "h3-lie":
            assert not f.ok
            assert f.error is not None
            # quic-go's own 7 MiB, doubled (SO_RCVBUFFORCE: root may pass rmem_max)
            assert "the server's UDP socket had rb 14680064" in f.error, f.error
            assert "not 212992 (twice udp_rcvbuf 106496" in f.error
            assert "negotiated ['TLS_AES_128_GCM_SHA256'], not TLS_CHACHA20" in f.error
            assert "GSO seen" in f.error
            continue
        assert f.ok, (name, f.error)
        if name == "h3":
            assert ev["udp_socket"] == {"rb": 212992, "tb": 425984}
            assert ev["tls_cipher"] == ["TLS_CHACHA20_POLY1305_SHA256"]
            assert ct["udp_rcvbuf"] == 1703936 and ct["udp_sndbuf"] == 212992
            assert ct["tls_cipher"] == "TLS_CHACHA20_POLY1305_SHA256"
            s = ev["udp_sends"]
            assert s["tx_packets"] - s["udp_out_datagrams"] <= sockopts.GSO_SLACK
        else:
            assert ev["udp_socket"]["rb"] == 2 * big
            s = ev["udp_sends"]
            assert s["tx_packets"] > 2 * s["udp_out_datagrams"], s  # GSO: batches
    print(json.dumps({k[0]: v.evidence.get("udp_sends") for k, v in flows.items()}))


def test_the_report_draws_goodput_per_knob(tmp_path: Path) -> None:
    """A buffer family (every buffer key alike per arm) against the size; GSO and the
    AEAD as bars with +-1 sd. From stored records only."""
    from made_rows import store_bulk_cell

    from quicbed.model.link import make_condition
    from quicbed.report.build import build

    cond = make_condition(rate_mbit=100, rtt_ms=20)

    def bufs(arm: str, n: int) -> str:
        keys = ("udp_rcvbuf", "udp_sndbuf", "client_udp_rcvbuf", "client_udp_sndbuf")
        return f"{arm}:stack=quic-go:" + ":".join(f"{k}={n}" for k in keys)

    store_bulk_cell(
        tmp_path,
        "udp-buffers",
        cond,
        f"{bufs('h3-1x', 106496)},{bufs('h3-8x', 851968)}",
        {"h3-1x": 40.0, "h3-8x": 90.0},
    )
    store_bulk_cell(
        tmp_path,
        "gso",
        cond,
        "h3-off:stack=quic-go:gso=false,h3-on:stack=quic-go:gso=true",
        {"h3-off": 50.0, "h3-on": 80.0},
    )
    store_bulk_cell(
        tmp_path,
        "cipher",
        cond,
        "h3-aes:stack=quic-go:aead=aes-128-gcm,h3-cc:stack=quic-go:aead=chacha20-poly1305",
        {"h3-aes": 80.0, "h3-cc": 70.0},
    )
    report = build(tmp_path)
    shown = {f["shows"].get("scenario"): f for f in report.figures if f["shows"].get("axis")}
    assert {k: v["shows"]["axis"] for k, v in shown.items()} == {
        "udp-buffers": "client_udp_rcvbuf",
        "gso": "gso",
        "cipher": "aead",
    }
    assert shown["gso"]["shows"]["title"] == "bulk, scenario gso: goodput per gso"
    import csv

    with open(tmp_path / "report" / "transfers.csv") as f:
        knobs = {r["arm"]: r["knobs"] for r in csv.DictReader(f)}
    assert knobs["h3-on"] == "gso=true"
    assert knobs["h3-cc"] == "aead=chacha20-poly1305"
    assert knobs["h3-1x"].startswith("udp_rcvbuf=106496;udp_sndbuf=106496;client_udp_rcvbuf")


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.built
@pytest.mark.slow
def test_page_loads_in_chromium_verify_the_knobs(shared_links: SharedLinks, tmp_path: Path) -> None:
    """Chromium's page loads against quic-go with small buffers, ChaCha20 (AES hidden
    from the server) and GSO off, and with GSO on: every load valid, its socket, cipher
    and datagrams-to-packets read back and stored."""

    from quicbed.model.link import make_condition
    from quicbed.results.store import Store
    from quicbed.spec.cellconfig import make_cell

    names, settings = parse_cli(
        "h2,h3:udp_rcvbuf=106496:udp_sndbuf=106496:aead=chacha20-poly1305:gso=false,"
        "h3-g:stack=quic-go:gso=true"
    )
    cfg = make_cell(
        condition=make_condition(rate_mbit=50, rtt_ms=20),
        page="100kb",
        runs=2,
        warmup=1,
        arms=names,
        arm_settings=settings,
    )
    r = shared_links.run_cell(cfg, tmp_path / "r")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm != "h2"]
    store.close()
    for x in runs:
        srv = x.detail["server"]
        sends = srv["udp_sends"]
        split = sends["tx_packets"] - sends["udp_out_datagrams"]
        if x.arm == "h3":
            assert srv["udp_socket"] == {"rb": 212992, "tb": 212992}
            assert srv["tls_cipher"] == ["TLS_CHACHA20_POLY1305_SHA256"]
            assert split <= sockopts.GSO_SLACK, sends
        else:
            assert srv["tls_cipher"] == ["TLS_AES_128_GCM_SHA256"]  # AES hardware here
            assert split > sockopts.GSO_SLACK, sends


def test_a_cells_aead_pins_every_arm_that_can_and_names_the_others() -> None:
    """The cell's aead reaches Apache (SSLCipherSuite TLSv1.3) and quic-go; an arm's own
    wins; quiche and Envoy pin none and are named with why; a suite a pinning stack
    cannot choose is refused naming the cell's setting; a TLS 1.2 arm is named."""
    names, settings = parse_cli("h2,h3,h3-own:stack=quic-go:aead=aes-128-gcm,h3-quiche,h3-envoy")
    arms = resolve(names, settings, "cubic", aead="chacha20-poly1305")
    got = {a.name: a.params.get("aead") for a in arms}
    assert got == {
        "h2": "chacha20-poly1305",
        "h3": "chacha20-poly1305",
        "h3-own": "aes-128-gcm",
        "h3-quiche": None,
        "h3-envoy": None,
    }
    named = unpinned_aead(arms, "chacha20-poly1305")
    assert sorted(named) == ["h3-envoy", "h3-quiche"]
    assert named["h3-quiche"].startswith("quiche cannot choose it: quiche's TLS is BoringSSL")
    assert unpinned_aead(arms, None) == {}
    with pytest.raises(QuicbedError) as exc:
        resolve(*parse_cli("h2,h3"), "cubic", aead="aes-256-gcm")
    assert str(exc.value).startswith("aead aes-256-gcm (the cell's): arm h3: aead aes-256-gcm:")
    old_tls = resolve(*parse_cli("h2:tls=1.2,h3"), "cubic", aead="chacha20-poly1305")
    assert old_tls[0].params.get("aead") is None
    assert "runs TLS 1.2" in unpinned_aead(old_tls, "chacha20-poly1305")["h2"]


def test_apache_pins_the_suite_and_reads_it_from_its_log() -> None:
    """Apache starts with the suite defined for the role's SSLCipherSuite TLSv1.3 and takes
    every connection's negotiated suite from its access log's last field (a line of the
    role before the field has none, and cannot prove the arm's aead)."""
    from quicbed.servers.apache import ApacheServer

    arm = resolve(*parse_cli("h2"), "cubic", aead="chacha20-poly1305")[0]
    tb = SimpleNamespace(server_ip="10.0.0.1")
    spec = ServeSpec(RPath("/d"), RPath("/c"), RPath("/k"), RPath("/l"))
    srv = ApacheServer(tb, spec, arm)  # type: ignore[arg-type]
    argv = srv.argv()
    assert "Define QUICBED_SSL_CIPHERS TLS_CHACHA20_POLY1305_SHA256" in argv, argv
    line = (
        "1733500000.123456 10.0.0.2 HTTP/2.0 GET /5kb/index.html 200 512 TLSv1.3 Initial "
        "1 0 40000 quicbed.test TLS_CHACHA20_POLY1305_SHA256"
    )
    facts = srv.load_facts([line])
    assert facts["tls_cipher"] == ["TLS_CHACHA20_POLY1305_SHA256"]
    assert srv.param_evidence(facts) == []
    older = srv.load_facts([line.rsplit(" ", 1)[0]])
    assert "tls_cipher" not in older
    assert srv.param_evidence(older) == [
        "the server's connections negotiated no cipher, not TLS_CHACHA20_POLY1305_SHA256"
    ]
