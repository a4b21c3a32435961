"""Chromium 72 (client ``chromium72``), quicbed's gQUIC client: its command line, the
refusals, its own NSS database with the test CA, and real loads from Apache in the
testbed's namespaces through the page-load driver, whose clearing record says which
steps ran (Chromium 72's headless shell has no chrome.benchmarking).

Needs roles/chromium_client_gquic applied (``chromium72`` on PATH, certutil), as
``make setup`` does. The gQUIC loads need ``build/bin/quicbed-gquic-server`` (quic-go
v0.10.2, ``make build``); without it they are skipped, saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from quicbed import certs
from quicbed.client.browser import CA_NICKNAME, BrowserSpec
from quicbed.client.chromium import CHROMIUM72_BUILD, Chromium, Chromium72, command_line
from quicbed.errors import QuicbedError
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.servers.apache import ApacheServer
from quicbed.servers.webserver import ServeSpec
from quicbed.spec import workloads
from quicbed.spec.arms import resolve
from quicbed.testbed.lifecycle import RPath
from quicbed.testbed.local import LocalTestbed

ROOT = Path(__file__).resolve().parent.parent
GQUIC_SERVER = ROOT / "build" / "bin" / "quicbed-gquic-server"
HOST = "quicbed.test"
PAGE = "5kb"  # index.html and one 5 KB image

SPEC = BrowserSpec(
    arm="gq",
    host=HOST,
    server_ip="10.10.1.1",
    spki_pin="PIN=",
    user_data_dir=RPath("/run/quicbed/x/profile-gq"),
    client="chromium72",
    protocol="gquic",
    quic_version="Q039",
    ca_cert=RPath("/run/quicbed/x/tls/ca.pem"),
)


# --- the command line and the refusals ------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "switch"),
    [("Q039", "--quic-version=QUIC_VERSION_39"), ("Q043", "--quic-version=QUIC_VERSION_43")],
)
def test_gquic_argv(version: str, switch: str) -> None:
    argv = command_line(replace(SPEC, quic_version=version))
    assert argv == [
        "chromium72",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-default-apps",
        "--disable-extensions",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,"
        "CertificateTransparencyComponentUpdater,NetworkTimeServiceQuerying",
        "--metrics-recording-only",
        "--no-pings",
        "--password-store=basic",
        "--use-mock-keychain",
        "--user-data-dir=/run/quicbed/x/profile-gq",
        "--remote-debugging-port=0",
        "--host-resolver-rules=MAP quicbed.test 10.10.1.1, MAP * ~NOTFOUND",
        "--ignore-certificate-errors-spki-list=PIN=",
        "--enable-net-benchmarking",
        "--enable-quic",
        "--origin-to-force-quic-on=quicbed.test:443",
        switch,
        "about:blank",
    ]
    assert "--headless=new" not in argv


def test_h2_argv_turns_quic_off_and_the_current_chromium_is_unchanged() -> None:
    h2 = command_line(replace(SPEC, protocol="h2", quic_version=None, port=8443))
    assert h2[0] == "chromium72" and "--disable-quic" in h2
    assert not [a for a in h2 if a.startswith(("--enable-quic", "--origin-to-force", "--quic-v"))]
    cur = command_line(replace(SPEC, client="chromium", protocol="h3", quic_version=None))
    assert cur[:2] == ["chromium", "--headless=new"]
    want = ["--enable-quic", "--origin-to-force-quic-on=quicbed.test:443", "about:blank"]
    assert cur[-3:] == want


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"protocol": "h3", "quic_version": None},
            "arm gq: browser chromium72 cannot speak 'h3' (it speaks h2, gquic)",
        ),
        (
            {"client": "chromium"},
            "arm gq: browser chromium cannot speak 'gquic' (it speaks h2, h3)",
        ),
        (
            {"quic_version": "Q046"},
            "arm gq: unknown quic_version 'Q046' (Chrome 72's gQUIC: Q039, Q043, Q044)",
        ),
        ({"quic_version": "RFCv1"}, "unknown quic_version 'RFCv1'"),
        ({"quic_version": None}, "arm gq: protocol 'gquic' needs a quic_version"),
        ({"protocol": "h2"}, "arm gq: quic_version 'Q039' is for protocol gquic, not 'h2'"),
        (
            {"client": "firefox"},
            "arm gq: browser 'firefox' is not a Chromium (chromium, chromium72)",
        ),
        (
            {"protocol": "spdy"},
            "arm gq: browser chromium72 cannot speak 'spdy' (it speaks h2, gquic)",
        ),
        ({"ca_cert": None}, "arm gq: browser 'chromium72' needs ca_cert"),
        (
            {"net_log": RPath("/tmp/n.json")},
            "arm gq: net_log '/tmp/n.json' with browser 'chromium72': it writes no Chromium NetLog",
        ),
    ],
)
def test_refusals_name_the_value(change: dict[str, Any], message: str) -> None:
    with pytest.raises(QuicbedError) as exc:
        command_line(replace(SPEC, **change))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_refused_spec_touches_nothing(tmp_path: Path) -> None:
    tb = LocalTestbed("qb72x")  # never brought up: launch must refuse before using it
    spec = replace(
        SPEC, protocol="h3", quic_version=None, user_data_dir=RPath(tmp_path / "profile")
    )
    with pytest.raises(QuicbedError, match="cannot speak 'h3'"):
        Chromium72(spec, tb, tmp_path / "logs").launch()
    assert not (tmp_path / "profile").exists() and not (tmp_path / "logs").exists()


# --- real loads -------------------------------------------------------------------------------
@dataclass
class Served:
    tb: LocalTestbed
    www: Path
    pki: certs.TestPKI
    ca_on_client: RPath
    logs: Path


@pytest.fixture
def served(testbed: LocalTestbed, tmp_path: Path) -> Iterator[Served]:
    """A shaped link (50 Mbit/s, 20 ms), the page and the test PKI, Apache on 443."""
    if shutil.which("chromium72") is None or shutil.which("certutil") is None:
        pytest.fail(
            "chromium72 or certutil missing: apply roles/chromium_client_gquic (make setup)"
        )
    tb = testbed
    with ExitStack() as stack:
        stack.enter_context(shaped_link(tb, make_condition(rate_mbit=50, rtt_ms=20), "userspace"))
        www = tb.local_stage("server", "www")
        workloads.generate(www, [PAGE], workloads.load())
        pki = certs.ensure(tb.local_stage("server", "tls"), [HOST], [tb.server_ip])
        ca = tb.workdir("client") / "client-tls" / "ca.pem"
        tb.push("client", pki.ca_cert, ca, mode=0o644)
        logs = tmp_path / "logs"
        logs.mkdir()
        spec = ServeSpec(
            docroot=RPath(www), cert=RPath(pki.cert), key=RPath(pki.key), logdir=RPath(logs)
        )
        (arm,) = [a for a in resolve(("h2",), {}, "cubic")]
        apache = ApacheServer(tb, spec, arm)
        apache.start()
        stack.callback(apache.stop)
        yield Served(tb, www, pki, ca, logs)


def _browser(s: Served, **kw: Any) -> Chromium72:
    spec = BrowserSpec(
        arm=kw.pop("arm", "c72"),
        host=HOST,
        server_ip=s.tb.server_ip,
        spki_pin=s.pki.spki_pin,
        ca_cert=s.ca_on_client,
        client="chromium72",
        user_data_dir=s.tb.workdir("client") / f"profile-{kw.get('protocol', 'h2')}",
        **kw,
    )
    return Chromium72(spec, s.tb, s.logs)


#: what every chromium72 load reports about the clearing before it
CLEARING_72 = {
    "cache": "Network.setCacheDisabled (bypassed, not cleared)",
    "host_cache": None,
    "predictor": None,
    "connections": "ss -K (the browser's sockets destroyed by the kernel)",
}
SKIPPED_72 = ("cache", "host_cache", "predictor")


def _check_har(r: dict[str, Any], protocol: str) -> None:
    assert r["ok"], r["error"]
    entries = r["har"]["log"]["entries"]
    assert [e["request"]["url"] for e in entries] == [
        f"https://{HOST}/{PAGE}/",
        f"https://{HOST}/{PAGE}/img-000.jpg",
    ]
    assert [e["response"]["status"] for e in entries] == [200, 200]
    assert {e["response"]["httpVersion"] for e in entries} == {protocol}
    assert entries[1]["response"]["content"]["size"] == 5120
    assert r["har"]["log"]["pages"][0]["pageTimings"]["onLoad"] > 0
    assert r["nav"]["nextHopProtocol"] == protocol


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_h2_loads_from_apache_with_its_own_nss_db(served: Served) -> None:
    tb = served.tb
    b = _browser(served, protocol="h2")
    try:
        b.start()
        assert b.version == CHROMIUM72_BUILD
        # the test CA, and only it, in the browser's own NSS database under its HOME
        listed = tb.exec("client", ["certutil", "-L", "-d", f"sql:{b.spec.nss_db}"]).stdout
        rows = [ln for ln in listed.splitlines()[4:] if ln.strip()]
        assert len(rows) == 1 and rows[0].startswith(CA_NICKNAME) and rows[0].split()[-1] == "C,,"
        assert str(b.spec.nss_db).startswith(str(b.spec.user_data_dir))
        env = Path(f"/proc/{b.process.pid}/environ").read_bytes().split(b"\0")  # type: ignore[union-attr]
        assert f"HOME={b.spec.home}".encode() in env

        first = b.load(f"https://{HOST}/{PAGE}/", fresh_context=False, timeout_s=20)
        second = b.load(f"https://{HOST}/{PAGE}/", fresh_context=False, timeout_s=20)
        fresh = b.load(f"https://{HOST}/{PAGE}/", fresh_context=True, timeout_s=20)
    finally:
        b.stop()
    for r in (first, second, fresh):
        _check_har(r, "h2")
        # which clearing steps ran, and how, is in every load's result
        assert r["clearing"] == CLEARING_72 and set(r["clearing_skipped"]) == set(SKIPPED_72)
    # the kept tab's connection was closed before the second load (a new TCP and TLS
    # handshake, the session resumed); the fresh context had no connection to close
    closed = second["connections_destroyed"]
    assert closed["still_held"] == 0
    assert closed["destroyed"] == [
        f"tcp {served.tb.client_ip}:"
        f"{closed['destroyed'][0].split(':')[1].split()[0]} -> "
        f"{served.tb.server_ip}:443"
    ]
    for r in (first, second, fresh):
        main = r["har"]["log"]["entries"][0]["timings"]
        assert main["connect"] > 0 and main["ssl"] > 0, main
    assert second["context"] == first["context"] == "default" != fresh["context"]
    lines = [ln.split() for ln in (served.logs / "access.log").read_text().splitlines()]
    # every object of every load from the server (the bypassed cache answered none)
    assert [f[4] for f in lines] == [f"/{PAGE}/index.html", f"/{PAGE}/img-000.jpg"] * 3
    assert [f[8] for f in lines if f[4].endswith("index.html")] == ["Initial", "Resumed", "Initial"]
    # the profile, its HOME and the NSS database went with the browser
    assert not Path(b.spec.user_data_dir).exists()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_current_chromium_still_clears_with_chrome_benchmarking(served: Served) -> None:
    """The driver's strict path: every step by chrome.benchmarking, nothing falls back."""
    spec = BrowserSpec(
        arm="cur",
        host=HOST,
        server_ip=served.tb.server_ip,
        spki_pin=served.pki.spki_pin,
        user_data_dir=served.tb.workdir("client") / "profile-cur",
    )
    b = Chromium(spec, served.tb, served.logs)
    try:
        b.start()
        r = b.load(f"https://{HOST}/{PAGE}/", fresh_context=False, timeout_s=20)
    finally:
        b.stop()
    _check_har(r, "h2")
    assert r["clearing"] == {
        "cache": "chrome.benchmarking.clearCache",
        "host_cache": "chrome.benchmarking.clearHostResolverCache",
        "predictor": "chrome.benchmarking.clearPredictorCache",
        "connections": "chrome.benchmarking.closeConnections",
    }
    assert "clearing_skipped" not in r and "connections_destroyed" not in r


#: a stand-in for a gQUIC server in the server's namespace: keeps the first datagram
CATCHER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
data, _ = s.recvfrom(4096)
open(sys.argv[3] + ".part", "wb").write(data)
__import__("os").rename(sys.argv[3] + ".part", sys.argv[3])
"""


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("version", ["Q039", "Q043", "Q044"])
def test_gquic_argv_takes_effect_on_the_wire(served: Served, version: str) -> None:
    """Without a gQUIC server: the version tag of the browser's first QUIC packet (in
    the public header up to Q043, in the long header from Q044) is the one asked for.
    Chromium 72 would send its default, Q043, for a version it does not know."""
    tb = served.tb
    first = served.logs / f"first-{version}.bin"
    catcher = tb.spawn("server", [sys.executable, "-c", CATCHER, tb.server_ip, "443", str(first)])
    b = _browser(served, protocol="gquic", quic_version=version)
    try:
        tb.wait_listening("server", "udp", 443)
        b.start()
        assert b.driver and b.driver.stdin
        cmd = {
            "cmd": "load",
            "url": f"https://{HOST}/{PAGE}/",
            "fresh_context": False,
            "timeout_ms": 10000,
        }
        b.driver.stdin.write(json.dumps(cmd) + "\n")
        b.driver.stdin.flush()
        deadline = time.monotonic() + 10
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        b.driver.kill()  # its load waits for a server that never answers
    finally:
        b.stop()
        catcher.stop()
    assert first.exists(), "no QUIC packet reached the server's namespace"
    data = first.read_bytes()
    assert re.findall(rb"Q0\d\d", data[:14]) == [version.encode()], data[:16].hex()


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("version", ["Q039", "Q043", "Q044"])
def test_gquic_loads_0rtt_after_the_udp_socket_is_destroyed(served: Served, version: str) -> None:
    """Real gQUIC loads from quicbed-gquic-server: the kept tab's second load finds its
    QUIC connection destroyed (ss -K on a UDP socket) and opens a new one in 0-RTT (the
    server sent no REJ: its own log); a fresh context has no cached server config."""
    if not GQUIC_SERVER.exists():  # make setup builds it: missing is a failure, not a skip
        pytest.fail(f"{GQUIC_SERVER} is not built (make setup)")
    tb = served.tb
    log = served.logs / "gquic.jsonl"
    argv = [
        str(GQUIC_SERVER),
        "-addr",
        f"{tb.server_ip}:443",
        "-docroot",
        str(served.www),
        "-cert",
        str(served.pki.cert),
        "-key",
        str(served.pki.key),
        "-log",
        str(log),
        "-versions",
        version,
    ]
    srv = tb.spawn("server", argv, log=RPath(served.logs / "gquic.stderr"))
    b = _browser(served, protocol="gquic", quic_version=version)
    try:
        tb.wait_listening("server", "udp", 443)
        b.start()
        loads = [
            b.load(f"https://{HOST}/{PAGE}/", fresh_context=fresh, timeout_s=20)
            for fresh in (False, False, True)
        ]
    finally:
        b.stop()
        srv.stop()
    proto = f"http/2+quic/{int(version[1:])}"
    for r in loads:
        _check_har(r, proto)
        assert r["clearing"] == CLEARING_72
    closed = loads[1]["connections_destroyed"]
    assert [c.split()[0] for c in closed["destroyed"]] == ["udp"], closed
    assert closed["destroyed"][0].endswith(f"-> {tb.server_ip}:443") and closed["still_held"] == 0
    events = [json.loads(ln) for ln in log.read_text().splitlines()]
    conns = [e for e in events if e["event"] == "conn"]
    assert [c["quic_version"] for c in conns] == [version] * 3
    assert [c["used_0rtt"] for c in conns] == [False, True, False], conns
    assert [e["path"] for e in events if e["event"] == "request"] == [
        f"/{PAGE}/",
        f"/{PAGE}/img-000.jpg",
    ] * 3
