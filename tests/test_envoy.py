"""The envoy stack (Google QUICHE through Envoy): its configuration, the facts it reads,
what it refuses, and real cells verified per load from the server (access log, sender
classes counted by uprobes) and the wire, with a wrong CC caught per load."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import SharedLinks

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.servers import envoy, envoy_config
from quicbed.servers.envoy import EnvoyServer
from quicbed.servers.webserver import Arm
from quicbed.spec.arms import parse_cli, resolve
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

COND = make_condition(rate_mbit=50, rtt_ms=20)


def _tree(root: Path) -> Path:
    (root / "5kb").mkdir(parents=True)
    (root / "5kb" / "index.html").write_text("<html></html>")
    (root / "5kb" / "img-000.jpg").write_bytes(b"\xff" * 5120)
    (root / "manifest.json").write_text("{}")
    return root


def _settings(tmp_path: Path, **extra: object) -> dict[str, object]:
    return {
        "docroot": str(_tree(tmp_path / "www")),
        "cert": "/c.pem",
        "key": "/k.pem",
        "address": "10.10.1.1",
        "port": 4433,
        "access_log": "/l/a.jsonl",
        "out": str(tmp_path / "envoy.json"),
        **extra,
    }


def test_config_routes_every_file_with_the_other_servers_headers(tmp_path: Path) -> None:
    cfg = envoy_config.config(_settings(tmp_path, runtime={envoy.DEFAULT_TO_BBR: False}))
    listener = cfg["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"] == {
        "protocol": "UDP",
        "address": "10.10.1.1",
        "port_value": 4433,
    }
    chain = listener["filter_chains"][0]
    assert chain["transport_socket"]["typed_config"]["enable_early_data"] is True
    hcm = chain["filters"][0]["typed_config"]
    assert hcm["codec_type"] == "HTTP3" and hcm["server_header_transformation"] == "PASS_THROUGH"
    rc = hcm["route_config"]
    assert rc["max_direct_response_body_size_bytes"] == 5120
    routes = {r["match"]["path"]: r for r in rc["virtual_hosts"][0]["routes"]}
    assert sorted(routes) == ["/5kb/", "/5kb/img-000.jpg", "/5kb/index.html", "/manifest.json"]

    def headers(path: str) -> dict[str, str]:
        return {
            h["header"]["key"]: h["header"]["value"]
            for h in routes[path]["response_headers_to_add"]
        }

    assert headers("/5kb/") == {"content-type": "text/html", "cache-control": "no-store, no-cache"}
    assert headers("/5kb/img-000.jpg")["content-type"] == "image/jpeg"
    assert routes["/5kb/"]["direct_response"]["body"]["filename"].endswith("5kb/index.html")
    assert cfg["layered_runtime"]["layers"][0]["static_layer"] == {envoy.DEFAULT_TO_BBR: False}


def test_config_answers_errors_by_name(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    (tmp_path / "empty").mkdir()
    s["docroot"] = str(tmp_path / "empty")
    assert "no file below" in envoy_config.answer([json.dumps(s)])["error"]
    assert "usage" in envoy_config.answer([])["error"]
    s["docroot"] = str(tmp_path / "www")
    out = envoy_config.answer([json.dumps(s)])
    assert out == {"config": str(tmp_path / "envoy.json"), "routes": 4}


@pytest.mark.built
def test_envoy_itself_accepts_the_config(tmp_path: Path) -> None:
    """Envoy's own validation (a body over the size limit, a bad field, a bad runtime
    key would all fail here), on a real certificate."""
    from quicbed import certs

    pki = certs.ensure(tmp_path / "tls", ["test.quicbed"], ["10.10.1.1"])
    s = _settings(
        tmp_path,
        cert=str(pki.cert),
        key=str(pki.key),
        access_log=str(tmp_path / "access.jsonl"),
        runtime=envoy.CC_RUNTIME["bbr2"],
    )
    assert "error" not in envoy_config.answer([json.dumps(s)])
    cp = subprocess.run(
        [str(envoy.ENVOY), "--mode", "validate", "-c", s["out"], "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cp.returncode == 0 and "OK" in cp.stdout, cp.stdout + cp.stderr


def test_access_log_facts_per_connection() -> None:
    def line(conn: int, path: str, early: str | None, proto: str = "HTTP/3") -> str:
        rec = {"proto": proto, "conn": conn, "path": path, "status": 200, "tls": "TLSv1.3"}
        return json.dumps({**rec, "early": early, "retx_packets": 1})

    lines = [line(1, "/p/", "1"), line(1, "/p/a.jpg", None), line(2, "/p/b.jpg", None)]
    f = envoy.access_facts(lines)
    assert (f["requests"], f["server_connections"], f["server_early_connections"]) == (3, 2, 1)
    assert f["server_protocols"] == ["HTTP/3"] and f["stream_retransmitted_packets"] == 3
    assert "cold_origins" not in f  # no request names its server: not a replayed page
    named = [json.dumps({**json.loads(x), "sni": sni}) for x, sni in zip(lines, "aab", strict=True)]
    f = envoy.access_facts(named)  # connection 2 (origin b) took no 0-RTT
    assert (f["cold_origins"], f["cold_connections"]) == (["b"], 1)


def test_cc_of_sender_classes_and_the_reno_option() -> None:
    assert envoy.cc_of({"cubic_or_reno": 2, "bbr": 0, "bbr2": 0}, ["ORIG"]) == ["cubic"]
    assert envoy.cc_of({"cubic_or_reno": 2, "bbr": 0, "bbr2": 0}, ["ORIG", "RENO"]) == ["reno"]
    assert envoy.cc_of({"cubic_or_reno": 1, "bbr": 1, "bbr2": 0}, []) == ["bbr", "cubic"]
    assert envoy.cc_of({"cubic_or_reno": 0, "bbr": 0, "bbr2": 0}, []) == []


@pytest.mark.parametrize(
    ("arms", "message"),
    [
        ("h3-envoy:cubic_n=1", "N = 2 connections, fixed at compile time"),
        ("h3-envoy:cc=bbr3", "congestion control 'bbr3' is not offered by envoy"),
        ("h3-envoy:loss_detection=ild9", "loss_detection 'ild9' is not one of QUICHE's"),
        ("h3-envoy:cc=bbr:cubic_n=2", "cubic_n is CUBIC's; this arm runs bbr"),
        ("h3-envoy:cubic_beta=0.6", "envoy has no parameter cubic_beta"),
    ],
)
def test_bad_arms_are_refused_by_name(arms: str, message: str) -> None:
    names, settings = parse_cli(arms)
    with pytest.raises(QuicbedError, match=message):
        resolve(names, settings, "cubic")


def test_client_options_per_cc_and_loss_detection() -> None:
    def opts(cc: str, **params: str) -> tuple[str, ...]:
        arm = Arm("h3-envoy", "envoy", "h3", "udp", cc, dict(params), 4433)
        srv = envoy.EnvoyServer(None, None, arm)  # type: ignore[arg-type]  # reads only the arm
        return srv.client_options()

    assert opts("cubic") == ()
    assert opts("reno") == ("RENO",)
    assert opts("bbr2", loss_detection="rfc9002") == ("ILD0",)


@pytest.mark.root
def test_a_missing_envoy_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(envoy, "ENVOY", envoy.RPath("/nonexistent/quicbed-envoy"))
    arm = resolve(("h3-envoy",), {}, "cubic")[0]
    with pytest.raises(QuicbedError, match="Envoy is not installed at /nonexistent"):
        envoy.EnvoyServer.check_testbed(arm, LocalTestbed("tenv0"))


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_envoy_arms_verified_per_load_from_the_server(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """h2 against Envoy under CUBIC (the study's), Reno (sent by the client) and BBRv2:
    every measured load 0-RTT by Envoy's own log, its CC read from the server's senders."""
    names, settings = parse_cli(
        "h2,h3-envoy,h3-envoy-reno:stack=envoy:cc=reno,h3-envoy-bbr2:stack=envoy:cc=bbr2"
    )
    cfg = make_cell(
        condition=COND, page="100kb", runs=2, warmup=1, arms=names, arm_settings=settings
    )
    r = shared_links.run_cell(cfg, tmp_path / "r")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    # every measured load: a load a busy host spoiled is kept beside its replacement,
    # so an arm may hold more than runs=2 measured loads
    got = {
        a: (v["cc"], v["protocols"], v["used_0rtt"] == v["measured"] >= 2, v["used_0rtt"])
        for a, v in r.verified.items()
    }
    assert {a: g[:3] for a, g in got.items()} == {
        "h2": (["cubic"], ["h2"], False),
        "h3-envoy": (["cubic"], ["h3"], True),
        "h3-envoy-reno": (["reno"], ["h3"], True),
        "h3-envoy-bbr2": (["bbr2"], ["h3"], True),
    }, got
    assert got["h2"][3] == 0, got
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h3-envoy" and not x.warmup]
    store.close()
    for x in runs:
        srv = x.detail["server"]
        assert srv["server_early_requests"] >= 1 and srv["cubic_n"] == [2], srv
        assert srv["senders"] == {"cubic_or_reno": 2, "bbr": 0, "bbr2": 0}, srv


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_envoy_in_firefox_is_verified_from_the_server_alone(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """Firefox writes no NetLog: an Envoy arm's loads are judged by Envoy's access log
    (every connection 0-RTT by the server's word) and its counted senders alone, and
    say so in their facts' source."""
    cfg = make_cell(
        condition=COND, page="100kb", runs=2, warmup=1, arms=("h2", "h3-envoy"), browser="firefox"
    )
    r = shared_links.run_cell(cfg, tmp_path / "r")
    assert r.status == "done" and r.invalid == {}, (r.problem, r.invalid)
    v = r.verified["h3-envoy"]
    assert v["used_0rtt"] == v["measured"] >= 2, r.verified
    assert r.verified["h3-envoy"]["protocols"] == ["h3"], r.verified
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h3-envoy" and not x.warmup]
    store.close()
    for x in runs:
        srv = x.detail["server"]
        assert srv["facts_source"] == "Envoy's access log + its senders (uprobes)", srv
        assert srv["connections"] == srv["server_connections"] >= 1, srv
        assert srv["server_early_connections"] == srv["server_connections"], srv
        assert srv["senders"]["cubic_or_reno"] == 2 * srv["server_connections"], srv


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_client_that_asks_another_cc_makes_the_load_invalid(
    shared_links: SharedLinks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A browser that sends TBBR (as a field trial could) makes QUICHE replace the
    arm's CUBIC sender by BBRv1 for its connection: the probe sees both classes, and
    the load is refused naming them, though the configuration says CUBIC."""
    monkeypatch.setattr(
        envoy.EnvoyServer, "browser_options", lambda self: {"quic_connection_options": ("TBBR",)}
    )
    cfg = make_cell(condition=COND, page="5kb", runs=2, warmup=1, arms=("h2", "h3-envoy"))
    r = shared_links.run_cell(cfg, tmp_path / "r")
    store = Store(tmp_path / "r")
    runs = [x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h3-envoy" and not x.warmup]
    store.close()
    assert runs and not any(x.valid for x in runs)
    assert all("not by cubic_or_reno alone" in x.reason for x in runs), [x.reason for x in runs]
    assert all(x.detail["server"]["cc"] == ["bbr", "cubic"] for x in runs)


def test_each_heatmap_says_how_its_quic_arm_differs_from_the_study() -> None:
    from made_rows import cell_row

    from quicbed.report.build import against_study

    study = ":".join(f"{k}={v}" for k, v in EnvoyServer.STUDY_WINDOWS.items())
    arms = {
        a.name: a
        for a in resolve(
            *parse_cli(f"h2,h3,h3-envoy:{study},h3-envoy-bbr2:stack=envoy:cc=bbr2"), "cubic"
        )
    }
    notes = against_study([cell_row(ref="h2", cand="h3-envoy-bbr2", arms=arms)])
    assert notes == [
        "h3-envoy-bbr2: Google QUICHE as in the study, through Envoy 1.40.0 (a QUICHE of "
        "2026, the study's of Chromium 111's time), serving the files from Envoy's memory; "
        "Envoy's windows (16 MiB per stream, 24 MiB per connection unless set) where the "
        "study's server started at 64 KiB and 1 MiB; Envoy's GSO batching and deferred "
        "sending, which it cannot switch off as the study's server had them, differ; "
        "CC bbr2 where the study ran CUBIC with N = 2"
    ]
    (study_arm,) = against_study([cell_row(ref="h2", cand="h3-envoy", arms=arms)])
    assert "; the study's server's windows (64 KiB per stream, 1 MiB per connection);" in study_arm
    (quic_go,) = against_study([cell_row(ref="h2", cand="h3", arms=arms)])
    assert quic_go.startswith(
        "h3: quic-go, not the study's Google QUICHE: its own CUBIC with N = 1"
    )
    assert against_study([cell_row(ref="h2", cand="h3-envoy", arms=arms)])[0].count("CC") == 0
