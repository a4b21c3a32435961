"""quicbed-quiche-server (rust/quicbed-quiche-server), driven by an independent client.

The binary is the one `make setup` installs (roles/quicbed_quiche builds it into
build/bin); the client is aioquic's HTTP/3, a third QUIC stack, on 127.0.0.1 only.
Checked: exact bytes and headers, 404s (missing file, ``..`` and symlink escapes),
405, the log's start/conn/request/conn_close/stop lines and their fields,
session resumption with 0-RTT accepted (the server's log says ``used_0rtt: true``),
every congestion control quiche offers, and exit status 2 naming a bad ``--cc``.
HEAD is left to the crate's unit tests: aioquic rejects a HEAD response whose
content-length is the file's (as it must be) because no body follows.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent
from aioquic.tls import SessionTicket

from quicbed import certs
from quicbed.errors import QuicbedError
from quicbed.paths import bin_path
from quicbed.servers import get_stack
from quicbed.servers.quiche import SUPPORTED_CC, QuicheServer
from quicbed.servers.webserver import ServeSpec
from quicbed.spec.arms import ArmSettings, resolve
from quicbed.testbed.lifecycle import RPath
from quicbed.testbed.local import LocalTestbed

pytestmark = pytest.mark.built

BINARY = "quicbed-quiche-server"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
HTTP_DATE = "%a, %d %b %Y %H:%M:%S GMT"


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return bin_path(BINARY)
    except QuicbedError as exc:
        pytest.fail(f"{exc}: roles/quicbed_quiche builds it (make setup)")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certs.TestPKI:
    return certs.ensure(tmp_path_factory.mktemp("pki"), ["localhost"], ["127.0.0.1"])


@pytest.fixture(scope="module")
def docroot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tree")
    root = base / "www"
    (root / "5kb").mkdir(parents=True)
    (root / "5kb" / "index.html").write_bytes(b"<html><img src=img-000.jpg></html>")
    (root / "5kb" / "img-000.jpg").write_bytes(bytes([0xFF, 0xD8, 0x17]) * 2000)
    (root / "big.json").write_bytes(os.urandom(300_000))
    (root / "data.bin").write_bytes(b"\x00\x01" * 10)
    (base / "secret").write_bytes(b"outside the tree")
    (root / "escape").symlink_to(base / "secret")
    return root


# --- the server -----------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen[str]
    log: Path
    port: int

    def lines(self) -> list[dict[str, Any]]:
        text = self.log.read_text() if self.log.exists() else ""
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.lines() if e["event"] == name]

    def wait_for(self, name: str, n: int = 1, timeout: float = 5) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ev = self.events(name)
            if len(ev) >= n:
                return ev
            time.sleep(0.02)
        pytest.fail(f"fewer than {n} {name!r} lines in the log: {self.lines()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail("the server did not stop within 5 s of SIGTERM")
        return self.proc.returncode


def start(binary: Path, docroot: Path, pki: certs.TestPKI, tmp: Path, *extra: str) -> Server:
    log = tmp / f"quiche-{len(list(tmp.glob('quiche-*')))}.jsonl"
    argv = [
        str(binary),
        "--addr",
        "127.0.0.1:0",
        "--docroot",
        str(docroot),
        "--cert",
        str(pki.cert),
        "--key",
        str(pki.key),
        "--log",
        str(log),
        *extra,
    ]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().strip():
            addr = json.loads(log.read_text().splitlines()[0])["addr"]
            return Server(proc, log, int(addr.rsplit(":", 1)[1]))
        if proc.poll() is not None:
            pytest.fail(f"server exited {proc.returncode}: {proc.stderr.read()}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("no start line within 5 s")


@pytest.fixture
def server(binary: Path, docroot: Path, pki: certs.TestPKI, tmp_path: Path) -> Iterator[Server]:
    srv = start(binary, docroot, pki, tmp_path)
    yield srv
    srv.stop()


# --- the client: aioquic ----------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


class H3Client(QuicConnectionProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.pending: dict[int, tuple[asyncio.Future[Response], Response]] = {}

    def quic_event_received(self, event: QuicEvent) -> None:
        for ev in self.http.handle_event(event):
            if (
                not isinstance(ev, (HeadersReceived, DataReceived))
                or ev.stream_id not in self.pending
            ):
                continue
            fut, resp = self.pending[ev.stream_id]
            if isinstance(ev, HeadersReceived):
                for k, v in ev.headers:
                    if k == b":status":
                        resp.status = int(v)
                    else:
                        assert k.decode() not in resp.headers, f"header {k!r} sent twice"
                        resp.headers[k.decode()] = v.decode()
            else:
                resp.body += ev.data
            if ev.stream_ended:
                del self.pending[ev.stream_id]
                fut.set_result(resp)

    async def request(self, method: str, path: str) -> Response:
        sid = self._quic.get_next_available_stream_id()
        self.http.send_headers(
            sid,
            [
                (b":method", method.encode()),
                (b":scheme", b"https"),
                (b":authority", b"localhost"),
                (b":path", path.encode()),
            ],
            end_stream=True,
        )
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self.pending[sid] = (fut, Response(0, {}, b""))
        self.transmit()
        return await asyncio.wait_for(fut, 10)


@dataclass
class Session:
    """What a browser keeps between connections: the server's session tickets."""

    tickets: list[SessionTicket] = field(default_factory=list)


async def _fetch(
    port: int,
    pki: certs.TestPKI,
    reqs: list[tuple[str, str]],
    session: Session,
    resume: bool,
    stop: Server | None,
) -> tuple[list[Response], bool]:
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
    cfg.load_verify_locations(str(pki.ca_cert))
    if resume:
        assert session.tickets, "no session ticket from the first connection"
        cfg.session_ticket = session.tickets[-1]
    async with connect(
        "127.0.0.1",
        port,
        configuration=cfg,
        create_protocol=H3Client,
        session_ticket_handler=session.tickets.append,
        wait_connected=not resume,
    ) as client:
        assert isinstance(client, H3Client)
        out = [await client.request(m, p) for m, p in reqs]
        if not resume:  # NewSessionTicket follows the handshake: wait for it
            for _ in range(100):
                if session.tickets:
                    break
                await asyncio.sleep(0.02)
        early = bool(client._quic.tls.early_data_accepted)
        if stop is not None:  # SIGTERM while this connection is open, as a browser keeps it
            stop.proc.send_signal(signal.SIGTERM)
            for _ in range(150):
                if stop.proc.poll() is not None:
                    break
                await asyncio.sleep(0.02)
    return out, early


def fetch(
    port: int,
    pki: certs.TestPKI,
    reqs: list[tuple[str, str]],
    session: Session | None = None,
    resume: bool = False,
    stop: Server | None = None,
) -> tuple[list[Response], bool]:
    return asyncio.run(_fetch(port, pki, reqs, session or Session(), resume, stop))


# --- the tests ------------------------------------------------------------------


def test_get_headers_404s_and_log(server: Server, docroot: Path, pki: certs.TestPKI) -> None:
    reqs = [
        ("GET", "/5kb/img-000.jpg"),
        ("GET", "/5kb/"),
        ("GET", "/big.json"),
        ("GET", "/data.bin?x=1"),
        ("GET", "/missing.html"),
        ("GET", "/../secret"),
        ("GET", "/%2e%2e/secret"),
        ("GET", "/5kb/../../secret"),
        ("GET", "/escape"),
        ("POST", "/5kb/img-000.jpg"),
    ]
    before = time.time()
    resps, _ = fetch(server.port, pki, reqs)
    img, index, big, data, missing, dotdot, encoded, nested, escape, post = resps

    want = (docroot / "5kb" / "img-000.jpg").read_bytes()
    assert img.status == 200 and img.body == want
    assert set(img.headers) == {"content-type", "content-length", "cache-control", "date"}
    assert img.headers["content-type"] == "image/jpeg"
    assert img.headers["content-length"] == str(len(want))
    assert img.headers["cache-control"] == "no-store, no-cache"
    date = dt.datetime.strptime(img.headers["date"], HTTP_DATE).replace(tzinfo=dt.UTC)
    assert abs(date.timestamp() - before) < 10
    assert index.status == 200 and index.headers["content-type"] == "text/html"
    assert index.body == (docroot / "5kb" / "index.html").read_bytes()
    assert big.body == (docroot / "big.json").read_bytes()
    assert big.headers["content-type"] == "application/json"
    assert data.headers["content-type"] == "application/octet-stream" and len(data.body) == 20
    for r in (missing, dotdot, encoded, nested, escape):
        assert r.status == 404 and r.body == b"", r
        assert set(r.headers) == {"cache-control", "date", "content-length"}
    assert post.status == 405 and post.headers["allow"] == "GET, HEAD"

    (st,) = server.wait_for("start")
    assert TS.match(st["ts"])
    assert st["pid"] == server.proc.pid and st["cc"] == "cubic"
    assert st["quiche_version"] == "0.30.0" and st["rustc_version"].startswith("rustc ")
    assert st["docroot"] == str(docroot) and st["addr"] == f"127.0.0.1:{server.port}"
    for flag in (
        "addr",
        "docroot",
        "cert",
        "key",
        "log",
        "qlog_dir",
        "cc",
        "idle_timeout",
        "initial_stream_window",
        "max_stream_window",
        "initial_conn_window",
        "max_conn_window",
        "max_incoming_streams",
        "max_incoming_uni_streams",
        "initial_cwnd_packets",
    ):
        assert flag in st["config"], flag

    (conn,) = server.wait_for("conn")
    assert conn["used_0rtt"] is False and conn["did_resume"] is False
    assert (conn["quic_version"], conn["alpn"], conn["tls_version"]) == ("v1", "h3", "TLS 1.3")
    assert conn["remote"].startswith("127.0.0.1:") and conn["handshake_ms"] > 0
    assert conn["cc"] == "cubic" and TS.match(conn["ts"])

    logged = server.wait_for("request", len(reqs))
    got = {(r["method"], r["path"]): r for r in logged}
    assert all(r["conn_id"] == conn["conn_id"] and r["proto"] == "HTTP/3.0" for r in logged)
    assert got[("GET", "/5kb/img-000.jpg")]["status"] == 200
    assert got[("GET", "/5kb/img-000.jpg")]["bytes"] == 6000
    assert got[("GET", "/big.json")]["bytes"] == 300_000
    assert got[("GET", "/data.bin")]["status"] == 200  # the path without its query
    assert got[("GET", "/../secret")]["status"] == 404
    assert got[("POST", "/5kb/img-000.jpg")]["status"] == 405
    assert all(r["duration_ms"] >= 0 for r in logged)

    (close,) = server.wait_for("conn_close")  # the client closed its connection
    assert close["conn_id"] == conn["conn_id"] and close["cc"] == "cubic"
    assert close["duration_ms"] > 0 and close["reason"].startswith("peer closed")
    stats = close["stats"]
    for k in (
        "sent",
        "recv",
        "lost",
        "retrans",
        "sent_bytes",
        "recv_bytes",
        "lost_bytes",
        "cwnd",
        "rtt_ms",
    ):
        assert isinstance(stats[k], int | float), k
    assert stats["sent_bytes"] > 300_000 and stats["rtt_ms"] > 0 and stats["cc"] == "cubic"

    assert server.stop() == 0
    assert server.lines()[-1]["event"] == "stop"


def test_resumption_with_0rtt(server: Server, docroot: Path, pki: certs.TestPKI) -> None:
    session = Session()
    (first,), early = fetch(server.port, pki, [("GET", "/5kb/")], session)
    assert first.status == 200 and not early
    assert session.tickets, "the server issued no session ticket"
    assert session.tickets[-1].max_early_data_size == 0xFFFFFFFF, "the ticket allows no 0-RTT"

    (second,), early = fetch(server.port, pki, [("GET", "/5kb/img-000.jpg")], session, True)
    assert second.body == (docroot / "5kb" / "img-000.jpg").read_bytes()
    assert early, "the client saw its early data rejected"

    conns = server.wait_for("conn", 2)
    assert conns[0]["used_0rtt"] is False and conns[0]["did_resume"] is False
    assert conns[1]["used_0rtt"] is True and conns[1]["did_resume"] is True, conns[1]
    assert conns[1]["early_data_reason"] == "accepted"
    reqs = server.wait_for("request", 2)
    assert reqs[1]["conn_id"] == conns[1]["conn_id"] and reqs[1]["bytes"] == 6000
    assert reqs[1]["early_data"] is True  # served before the handshake completed


def test_every_congestion_control(
    binary: Path, docroot: Path, pki: certs.TestPKI, tmp_path: Path
) -> None:
    """Each name quiche offers starts, carries a transfer, and is logged; with a qlog."""
    want = (docroot / "big.json").read_bytes()
    for cc in SUPPORTED_CC:
        qlog = tmp_path / f"qlog-{cc}"
        srv = start(binary, docroot, pki, tmp_path, "--cc", cc, "--qlog-dir", str(qlog))
        try:
            assert srv.events("start")[0]["cc"] == cc
            (resp,), _ = fetch(srv.port, pki, [("GET", "/big.json")])
            assert resp.body == want, cc
            assert srv.wait_for("conn")[0]["cc"] == cc
            assert srv.wait_for("conn_close")[0]["cc"] == cc
        finally:
            assert srv.stop() == 0
        # one JSON-SEQ qlog per connection, complete once the connection has closed
        (f,) = qlog.glob("*_server.sqlog")
        recs = [json.loads(r) for r in f.read_bytes().split(b"\x1e") if r.strip()]
        assert recs[0]["serialization_format"] == "JSON-SEQ"
        names = {r.get("name") for r in recs[1:]}
        assert {"quic:packet_sent", "quic:recovery_metrics_updated"} <= names, names


def test_bad_flags_exit_2_naming_the_value(binary: Path, docroot: Path, pki: certs.TestPKI) -> None:
    base = [
        str(binary),
        "--docroot",
        str(docroot),
        "--cert",
        str(pki.cert),
        "--key",
        str(pki.key),
        "--addr",
        "127.0.0.1:0",
    ]
    for extra, named in (
        (["--cc", "bbr3"], '"bbr3"'),
        (["--addr", "nowhere"], '"nowhere"'),
        (["--idle-timeout", "soon"], '"soon"'),
        (["--bogus", "1"], "--bogus"),
        (["--docroot", "/nonexistent"], '"/nonexistent"'),
    ):
        cp = subprocess.run(base + extra, capture_output=True, text=True, timeout=10)
        assert cp.returncode == 2, (extra, cp.stderr)
        assert len(cp.stderr.strip().splitlines()) == 1 and named in cp.stderr, cp.stderr
    with pytest.raises(QuicbedError, match="'bbr3' is not offered by quiche"):
        resolve(("h3-quiche",), {"h3-quiche": ArmSettings(cc="bbr3")}, "cubic")
    with pytest.raises(QuicbedError, match="quiche has no parameter cubic_n"):
        resolve(("h3-quiche",), {"h3-quiche": ArmSettings(cubic_n=2)}, "cubic")


def test_stack_class_drives_the_binary(
    binary: Path, docroot: Path, pki: certs.TestPKI, tmp_path: Path
) -> None:
    """quicbed.servers.quiche as a cell uses it: the arm resolved by the registry, the
    argv the class builds (run here on 127.0.0.1 instead of the server namespace's
    address), one load's facts read by the class from the lines after a mark."""
    assert get_stack("quiche") is QuicheServer
    (arm,) = resolve(("h3-quiche",), {"h3-quiche": ArmSettings(cc="bbr2")}, "cubic")
    assert (arm.stack, arm.protocol, arm.transport, arm.cc) == ("quiche", "h3", "udp", "bbr2")
    spec = ServeSpec(
        RPath(docroot),
        RPath(pki.cert),
        RPath(pki.key),
        RPath(tmp_path),
        qlog_dirs={"h3-quiche": RPath(tmp_path / "qlog")},
    )
    stack = QuicheServer(LocalTestbed("tq"), spec, arm)
    argv = stack.argv()
    assert argv[0] == str(binary) and argv[argv.index("--cc") + 1] == "bbr2"
    assert argv[argv.index("--qlog-dir") + 1] == str(tmp_path / "qlog")
    argv[argv.index("--addr") + 1] = "127.0.0.1:0"
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    srv = Server(proc, Path(stack.log), 0)
    try:
        srv.port = int(srv.wait_for("start")[0]["addr"].rsplit(":", 1)[1])
        session = Session()
        fetch(srv.port, pki, [("GET", "/5kb/")], session)
        srv.wait_for("conn_close")
        offset = srv.log.stat().st_size  # WebServer.mark()
        fetch(srv.port, pki, [("GET", "/5kb/"), ("GET", "/5kb/img-000.jpg")], session, True)
        srv.wait_for("conn_close", 2)
    finally:
        assert srv.stop() == 0
    with srv.log.open("rb") as f:
        f.seek(offset)
        facts = stack.load_facts(f.read().decode().splitlines())
    assert facts["connections"] == 1 and facts["requests"] == 2
    assert facts["used_0rtt"] is True and facts["tls_resumed"] is True
    assert facts["cc"] == ["bbr2"] and facts["quic_versions"] == ["v1"]
    assert facts["stats"][0]["sent_bytes"] > 6000 and facts["stats"][0]["cc"] == "bbr2"
    assert stack.evidence(facts) == []
    assert srv.events("conn")[-1]["cc_gcongestion"] is True  # BBRv2, read back from quiche


def test_sigterm_closes_open_connections_and_stops(server: Server, pki: certs.TestPKI) -> None:
    began = time.monotonic()
    (resp,), _ = fetch(server.port, pki, [("GET", "/5kb/")], stop=server)
    took = time.monotonic() - began
    assert resp.status == 200
    assert server.proc.returncode == 0, server.proc.stderr.read()
    assert took < 3, f"stopping took {took:.1f} s"
    lines = server.lines()
    assert [e["event"] for e in lines] == ["start", "conn", "request", "conn_close", "stop"]
    assert lines[3]["reason"].startswith("server closed with application error 0x100"), lines[3]
