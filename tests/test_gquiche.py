"""The h3-gquiche arm: Google QUICHE's quic_server driven on testbed nodes.

quic_server is not built here (no route to GitHub or Bazel's downloads), so these
tests check what can be checked without it: the command line, the refusals, the
response cache quic_server is given, and the reading of a load's facts from
samples under tests/data/gquiche/. Where each sample line's format comes from:

- ``netlog-*.json``: Chromium NetLog lines, one event per line as Chromium's
  FileNetLogObserver writes them (first line the constants, trimmed here to the
  event and source types used, with their real numeric codes). ``netlog-0rtt.json``
  and ``netlog-1rtt-fresh.json`` are two sessions *recorded* on this machine by
  Chromium 156.0.8078.79 (/usr/bin/chromium, quicbed --traces full, against
  quicbed-h3server), edited only where quic_server differs: port 4433, no ``date``
  response header, ``x-original-url`` on the page (quicbed/servers/gquiche_cache.py);
  the 0-RTT window also holds the previous load's session close (it began before the
  window), a URL_REQUEST event and a last line cut short. ``netlog-1rtt-resumed.json``
  is constructed from the recorded 0-RTT session: early data declined by the server,
  ``QUIC_SESSION_ZERO_RTT_REJECTED {"reason": "peer_declined"}`` (Chromium's
  net/quic/quic_event_logger.cc NetLogQuicZeroRttRejectReason, BoringSSL's
  SSL_early_data_reason_string) and ``QUIC_SESSION_ZERO_RTT_STATE
  "AttemptedAndRejected"`` (net/quic/quic_chromium_client_session.cc LogZeroRttStats;
  that state was not observed here, its spelling follows the two that were).
  ``netlog-failed.json`` is constructed: Chromium rejects the server's certificate
  (QUIC_SESSION_CERTIFICATE_VERIFY_FAILED, then a CONNECTION_CLOSE with
  QUIC_TLS_BAD_CERTIFICATE = 195, wire code 0x100 + alert 42 = 298: QUICHE's
  quic_error_codes.h and TlsHandshaker::AdvanceHandshake's error details).
- ``quic_server-*.log``: Abseil's log line prefix (absl/log/internal/log_format.cc,
  FormatBoundedFields: severity, MMDD, time, thread id in 7, ``file:line]``) with the
  messages of the pinned quiche commit (817e8ca): ``TlsServer: Continuing handshake``
  and ``TlsServer: SSL_do_handshake returned when entering early data. After retry,
  rv=..., SSL_in_early_data=...`` and ``SSL_do_handshake failed; SSL_get_error returns
  ...`` (quiche/quic/core/tls_handshaker.cc TlsHandshaker::AdvanceHandshake,
  QUIC_VLOG(1), lines 109, 130 and 170), ``Attempting to initialize
  QuicMemoryCacheBackend from directory: ...`` and ``Headers invalid or empty,
  ignoring: ...`` (quiche/quic/tools/quic_memory_cache_backend.cc InitializeBackend,
  ResourceFile::Read). Written from the source, not recorded: whether the server logs
  the early-data line for every accepted 0-RTT connection is for the testbed to show.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from quicbed import certs
from quicbed.errors import QuicbedError
from quicbed.servers import get_stack
from quicbed.servers.gquiche import (
    QUIC_SERVER,
    GoogleQuicheServer,
    cache_problems,
    cc_by_code,
    cert_dns_names,
    connection_options,
    evidence,
    load_facts,
)
from quicbed.servers.gquiche_cache import build
from quicbed.servers.gquiche_cache import main as cache_main
from quicbed.servers.quic_go import quic_load_facts
from quicbed.servers.webserver import Arm, ServeSpec
from quicbed.spec import workloads
from quicbed.spec.arms import ArmSettings, resolve
from quicbed.testbed.lifecycle import RPath
from quicbed.testbed.local import LocalTestbed
from quicbed.testbed.ssh import Node, SshTestbed

DATA = Path(__file__).parent / "data" / "gquiche"
ARM = Arm("h3-gquiche", "gquiche", "h3", "udp", "cubic", {}, 4433)
SPEC = ServeSpec(
    docroot=RPath("/var/tmp/quicbed/www"),
    cert=RPath("/var/tmp/quicbed/tls/server.pem"),
    key=RPath("/var/tmp/quicbed/tls/server.key"),
    logdir=RPath("/var/tmp/quicbed/outbox/0123456789abcdef"),
)


def lines(*names: str) -> list[str]:
    out: list[str] = []
    for n in names:
        out += (DATA / n).read_text().splitlines()
    return out


def ssh_testbed() -> SshTestbed:
    """Three nodes that are never contacted (argv and paths only)."""
    ips = {"server": "10.10.1.1", "client": "10.10.1.2", "bridge": None}
    return SshTestbed({r: Node(r, f"{r}.example", exp_ip=ip) for r, ip in ips.items()})


# --- the stack and its command line --------------------------------------------------------
def test_registry_finds_the_stack_for_the_builtin_arm() -> None:
    cls = get_stack("gquiche")
    assert cls is GoogleQuicheServer
    assert (cls.protocol, cls.transport, cls.local, cls.ccs, cls.kinds) == (
        "h3",
        "udp",
        False,
        ("cubic",),
        ("page",),
    )
    assert cls.Params.model_fields == {}
    (arm,) = [a for a in resolve(("h2", "h3-gquiche"), {}, "cubic") if a.stack == "gquiche"]
    assert (arm.name, arm.cc, arm.port, arm.params) == ("h3-gquiche", "cubic", 443, {})


def test_argv_for_its_one_cc() -> None:
    srv = GoogleQuicheServer(ssh_testbed(), SPEC, ARM)
    assert srv.argv() == [
        "/usr/local/bin/quic_server",
        "--port=4433",
        "--quic_response_cache_dir=/var/tmp/quicbed/gquiche-cache/h3-gquiche",
        "--certificate_file=/var/tmp/quicbed/tls/server.pem",
        "--key_file=/var/tmp/quicbed/tls/server.key",
        "--quic_versions=RFCv1",
        "--v=1",
        "--stderrthreshold=0",
    ]
    # quic_server has no CC flag: nothing in its command line names one
    assert not [a for a in srv.argv() if "cc" in a.lower() or "connection_options" in a]
    assert str(srv.log) == "/var/tmp/quicbed/outbox/0123456789abcdef/h3-gquiche.gquiche.stderr"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ArmSettings(cc="bbr"),
            "arm h3-gquiche: congestion control 'bbr' is not offered by "
            "gquiche (it has cubic; give the arm its own, e.g. h3-gquiche:cc=cubic)",
        ),
        (ArmSettings(cc="reno"), "'reno' is not offered by gquiche"),
        (
            ArmSettings(cubic_n=2),
            "arm h3-gquiche: gquiche has no parameter cubic_n (it takes none)",
        ),
        (ArmSettings(cubic_beta=0.7), "gquiche has no parameter cubic_beta (it takes none)"),
    ],
)
def test_other_ccs_and_every_parameter_refused_by_name(settings: ArmSettings, message: str) -> None:
    with pytest.raises(QuicbedError) as exc:
        resolve(("h2", "h3-gquiche"), {"h3-gquiche": settings}, "cubic")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_local_testbed_refused_in_one_line_naming_the_arm() -> None:
    with pytest.raises(QuicbedError) as exc:
        GoogleQuicheServer.check_testbed(ARM, LocalTestbed("qbgq"))
    assert str(exc.value) == (
        "arm h3-gquiche: gquiche runs only on testbed nodes "
        "(--testbed ssh), not on the local testbed"
    )


def test_start_refuses_without_the_clients_netlog() -> None:
    srv = GoogleQuicheServer(ssh_testbed(), SPEC, ARM)
    with pytest.raises(QuicbedError, match="client's NetLog, which this runner did not give"):
        srv.start()  # refused before anything is contacted


# --- the response cache ------------------------------------------------------------------------
def quiche_read(path: Path, cache: Path) -> tuple[str, str, dict[str, list[str]], bytes]:
    """(host, path, headers, body) as QUICHE's memory cache reads a file
    (quic_memory_cache_backend.cc: ResourceFile::Read, SetHostPathFromBase)."""
    data = path.read_bytes()
    heads: dict[str, list[str]] = {}
    start = 0
    while True:
        pos = data.index(b"\n", start)
        line = data[start:pos].rstrip(b"\r").decode()
        start = pos + 1
        if not line:
            break
        if line.startswith("HTTP"):
            heads[":status"] = [line.split(" ", 1)[1][:3]]
            continue
        k, v = line.split(": ", 1)
        heads.setdefault(k.lower(), []).append(v)
    base = path.relative_to(cache).as_posix()
    if "x-original-url" in heads:
        base = heads["x-original-url"][0].removeprefix("https://")
    host, _, rest = base.partition("/")
    return host, "/" + rest, heads, data[start:]


def test_cache_serves_the_tree_with_the_other_servers_headers(tmp_path: Path) -> None:
    www = tmp_path / "www"
    man = workloads.generate(www, ["5kb"])
    (www / workloads.MANIFEST).unlink()  # the server's tree has only the page (cell._serve)
    out = tmp_path / "cache"
    summary = build(www, out, ["quicbed.test"])
    files = man["pages"]["5kb"]["files"]
    assert summary == {"files": len(files), "body_bytes": man["pages"]["5kb"]["bytes"], "hosts": 1}
    served = {}
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        host, path, heads, body = quiche_read(f, out)
        served[path] = (host, heads, body)
    assert sorted(served) == ["/5kb/", *[f"/5kb/{n}" for n in sorted(files) if n != "index.html"]]
    host, heads, body = served["/5kb/"]
    assert host == "quicbed.test" and body == (www / "5kb" / "index.html").read_bytes()
    assert heads == {
        ":status": ["200"],
        "cache-control": ["no-store, no-cache"],
        "content-type": ["text/html"],
        "content-length": [str(len(body))],
        "x-original-url": ["https://quicbed.test/5kb/"],
    }
    _, heads, body = served["/5kb/img-000.jpg"]
    assert body == (www / "5kb" / "img-000.jpg").read_bytes()
    assert heads == {
        ":status": ["200"],
        "cache-control": ["no-store, no-cache"],
        "content-type": ["image/jpeg"],
        "content-length": [str(len(body))],
    }


def test_cache_refusals_name_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cache_main([str(tmp_path / "none"), str(tmp_path / "out"), "quicbed.test"]) == 1
    assert "document tree" in capsys.readouterr().err
    (tmp_path / "www" / "p").mkdir(parents=True)
    (tmp_path / "www" / "p" / "a,b.jpg").write_bytes(b"x")
    assert cache_main([str(tmp_path / "www"), str(tmp_path / "out"), "quicbed.test"]) == 1
    assert "'p/a,b.jpg'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_hosts_are_the_certificates_dns_names(tmp_path: Path) -> None:
    pki = certs.ensure(tmp_path, ["quicbed.test"], ["10.10.1.1"])
    assert cert_dns_names(pki.cert.read_bytes()) == ["quicbed.test"]
    assert cert_dns_names(b"not a certificate") == []


# --- a load's facts, from recorded samples -------------------------------------------------
KEYS = {
    "connections",
    "requests",
    "used_0rtt",
    "tls_resumed",
    "handshake_ms",
    "quic_versions",
    "cc",
}


def test_facts_have_quic_go_s_keys() -> None:
    conn = (
        '{"event": "conn", "used_0rtt": true, "did_resume": true, "handshake_ms": 1, '
        '"quic_version": "v1", "cc": "cubic"}'
    )
    assert set(quic_load_facts([conn])) <= set(load_facts(lines("netlog-0rtt.json"), 4433))
    assert set(load_facts([], 4433)) >= KEYS


def test_0rtt_connection() -> None:
    f = load_facts(lines("netlog-0rtt.json", "quic_server-0rtt.log"), 4433)
    assert {k: f[k] for k in KEYS} == {
        "connections": 1,
        "requests": 2,
        "used_0rtt": True,
        "tls_resumed": True,
        "handshake_ms": [40],
        "quic_versions": ["RFCv1"],
        "cc": None,
    }
    assert f["zero_rtt_states"] == ["AttemptedAndSucceeded"]
    assert (f["early_requests"], f["resumption_offered"], f["server_early_data"]) == (1, 1, 1)
    assert (f["connection_options"], f["cc_by_code"], f["statuses"]) == (
        ["ORIG"],
        ["CUBIC_BYTES"],
        ["200"],
    )
    assert "failed_handshakes" not in f and "netlog_problem" not in f
    # the previous load's session (begun before the window) and the cut line are not counted
    assert load_facts(lines("netlog-0rtt.json"), 443)["connections"] == 0


def test_1rtt_resumed_connection() -> None:
    f = load_facts(lines("netlog-1rtt-resumed.json", "quic_server-1rtt-resumed.log"), 4433)
    assert (f["connections"], f["used_0rtt"], f["tls_resumed"]) == (1, False, True)
    assert f["zero_rtt_states"] == ["AttemptedAndRejected"]
    assert (f["zero_rtt_connections"], f["server_early_data"]) == (0, 0)


def test_fresh_connection_claims_neither_0rtt_nor_resumption() -> None:
    f = load_facts(lines("netlog-1rtt-fresh.json", "quic_server-1rtt-fresh.log"), 4433)
    got = (f["connections"], f["requests"], f["used_0rtt"], f["tls_resumed"])
    assert got == (1, 2, False, False)
    assert f["zero_rtt_states"] == ["NotAttempted"] and f["handshake_ms"] == [42]


def test_failed_handshake() -> None:
    f = load_facts(lines("netlog-failed.json", "quic_server-failed.log"), 4433)
    got = (f["connections"], f["requests"], f["used_0rtt"], f["tls_resumed"])
    assert got == (0, 0, False, False)
    (fail,) = f["failed_handshakes"]
    assert fail["cert_verify_failed"] and fail["quic_error"] == 195 and not fail["from_peer"]
    assert "bad certificate" in fail["details"]


def test_server_log_lines() -> None:
    assert cache_problems(lines("quic_server-start.log")) == []
    (bad,) = cache_problems(lines("quic_server-bad-cache.log"))
    assert bad.startswith("Headers invalid or empty, ignoring: ")
    f = load_facts(lines("quic_server-handshake-failed.log"), 4433)
    assert (f["server_handshake_failures"], f["server_early_data"]) == (1, 0)
    assert load_facts(lines("quic_server-bad-cache.log"), 4433)["server_problems"] == [bad]


# --- evidence -----------------------------------------------------------------------------------
def test_evidence_refuses_every_load_on_its_cc() -> None:
    f = load_facts(lines("netlog-0rtt.json", "quic_server-0rtt.log"), 4433)
    assert evidence(f) == [
        "quic_server logs no congestion control, so this load's CC cannot be shown (the "
        "client sent connection options ORIG, for which QUICHE's code runs CUBIC_BYTES: "
        "inferred, not read back)"
    ]
    srv = GoogleQuicheServer(ssh_testbed(), SPEC, ARM)
    assert srv.evidence(f) == evidence(f)


def test_evidence_refuses_0rtt_the_server_did_not_log() -> None:
    f = load_facts(lines("netlog-0rtt.json", "quic_server-1rtt-resumed.log"), 4433)
    assert (
        "the client's NetLog shows 0-RTT on 1 connection(s), quic_server's log early data on 0"
    ) in evidence(f)


def test_evidence_without_a_netlog() -> None:
    f = load_facts(lines("quic_server-0rtt.log"), 4433)
    assert f["connections"] == 0 and "NetLog constants" in f["netlog_problem"]
    assert any(r.startswith("quic_server's load is read from the client: ") for r in evidence(f))


def test_cc_by_code_follows_quiche_set_from_config() -> None:
    tp = (
        "[Client [chosen_version 00000001 other_versions 00000001] max_idle_timeout 30000 "
        "google_connection_options ORIG,TBBR]"
    )
    assert connection_options(tp) == ["ORIG", "TBBR"]
    cases = {
        (): "CUBIC_BYTES",
        ("ORIG",): "CUBIC_BYTES",
        ("TBBR",): "BBR",
        ("B2ON",): "BBRv2",
        ("TBBR", "RENO"): "RENO_BYTES",
        ("BYTE",): "CUBIC_BYTES",
        ("QBIC",): "CUBIC_BYTES",
    }
    assert {o: cc_by_code(list(o)) for o in cases} == cases


# --- mark / since_mark over a testbed: the client-side filter ---------------------------------
class FilesTestbed:
    """What GoogleQuicheServer asks of a testbed, on local files (commands run here)."""

    kind = "ssh"

    def __init__(self, work: Path | None = None) -> None:
        self.work = work

    def workdir(self, role: str) -> RPath:
        assert self.work is not None
        return RPath(self.work)

    def python(self, role: str) -> list[str]:
        # a bare system python, as on a node: the cache tool must need nothing else
        bare = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        return ["env", f"PYTHONPATH={Path(__file__).parents[1]}", bare]

    def exec(
        self,
        role: str,
        argv: Sequence[str],
        *,
        timeout: float = 30,
        check: bool = True,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=check, input=input
        )

    def size(self, role: str, path: RPath) -> int:
        p = Path(path)
        return p.stat().st_size if p.exists() else 0

    def read_bytes(self, role: str, path: RPath, offset: int = 0) -> bytes:
        p = Path(path)
        return p.read_bytes()[offset:] if p.exists() else b""

    def read_text(self, role: str, path: RPath) -> str:
        return self.read_bytes(role, path).decode()


def test_since_mark_reads_the_load_from_both_ends(tmp_path: Path) -> None:
    netlog = tmp_path / "h3-gquiche-netlog.json"
    head = lines("netlog-0rtt.json")[:2]
    netlog.write_text("\n".join(head) + "\n")
    spec = ServeSpec(SPEC.docroot, SPEC.cert, SPEC.key, RPath(tmp_path))
    tb: Any = FilesTestbed()
    srv = GoogleQuicheServer(tb, spec, ARM)
    srv.client_netlog = RPath(netlog)
    Path(srv.log).write_text((DATA / "quic_server-start.log").read_text())
    srv.mark()
    with netlog.open("a") as f:  # the load happens: both ends write
        f.write("\n".join(lines("netlog-0rtt.json")[2:]) + "\n")
    with Path(srv.log).open("a") as f:
        f.write((DATA / "quic_server-0rtt.log").read_text())
    got = srv.since_mark()
    assert got[0].startswith('{"constants": ')
    assert not any("Attempting to initialize" in x for x in got)  # before the mark
    assert not any('"type":342}' in x for x in got)  # packet events stay on the client
    assert srv.load_facts(got) == load_facts(
        lines("netlog-0rtt.json", "quic_server-0rtt.log"), 4433
    )


def test_prepare_makes_the_cache_on_the_server_with_a_bare_python(tmp_path: Path) -> None:
    www = tmp_path / "www"
    man = workloads.generate(www, ["5kb"])
    pki = certs.ensure(tmp_path / "tls", ["quicbed.test"], ["10.10.1.1"])
    spec = ServeSpec(RPath(www), RPath(pki.cert), RPath(pki.key), RPath(tmp_path / "logs"))
    tb: Any = FilesTestbed(tmp_path / "work")
    srv = GoogleQuicheServer(tb, spec, ARM)
    summary = srv.prepare()
    assert summary["hosts"] == 1
    assert summary["files"] == len(man["pages"]["5kb"]["files"]) + 1  # and manifest.json
    page = Path(srv.cache_dir) / "quicbed.test" / "5kb" / "index.html"
    assert b"x-original-url: https://quicbed.test/5kb/\n" in page.read_bytes()
    spec = ServeSpec(RPath(tmp_path / "none"), RPath(pki.cert), RPath(pki.key), spec.logdir)
    with pytest.raises(
        QuicbedError,
        match=r"could not make quic_server's response cache: "
        r"gquiche_cache: document tree .* is not a folder",
    ):
        GoogleQuicheServer(tb, spec, ARM).prepare()


def test_quic_server_path_is_the_roles() -> None:
    defaults = (
        Path(__file__).parents[1] / "roles" / "quic_server_google" / "defaults" / "main.yml"
    ).read_text()
    assert f"quic_server_google_bin: {QUIC_SERVER}\n" in defaults
