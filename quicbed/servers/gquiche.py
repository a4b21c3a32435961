"""Google QUICHE's ``quic_server`` (the reference study's QUIC server) as a stack, testbed only.

The binary is the one roles/quic_server_google builds with Bazel (``-c opt``) from a
pinned google/quiche commit and links at ``/usr/local/bin/quic_server``; it is not
built on the development machine, so the local testbed refuses the stack.

**Where a load's facts come from.** quic_server keeps no per-connection log: its
logging is Abseil's, and in an opt build (``NDEBUG``) every ``QUIC_DLOG``/
``QUIC_DVLOG`` of quiche/quic/core is compiled out. The per-handshake lines ``--v=1``
turns on are three ``QUIC_VLOG(1)`` of quiche/quic/core/tls_handshaker.cc
(``TlsHandshaker::AdvanceHandshake``), none naming its connection; no line at any
level tells resumption or congestion control. So the per-connection facts are read from the
*client's* record, Chromium's NetLog of this arm (Default capture mode), one event
per line, as the browser writes it during the run:

- a connection is a ``QUIC_SESSION`` that began in the load's window, counted once its
  ``QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE`` is logged (a session closed before that is
  a failed handshake, listed apart);
- 0-RTT: that session's ``QUIC_SESSION_ZERO_RTT_STATE`` is ``AttemptedAndSucceeded``,
  which Chromium logs when BoringSSL's ``SSL_get_early_data_reason`` is
  ``ssl_early_data_accepted`` (net/quic/quic_chromium_client_session.cc,
  ``LogZeroRttStats``): the server's acceptance as TLS tells it to the client;
- TLS resumption: accepted 0-RTT (only a resumed PSK handshake can accept early
  data), or ``QUIC_SESSION_ZERO_RTT_REJECTED`` with reason ``peer_declined`` (BoringSSL's
  client says so only when the server resumed the session but declined early data).
  A resumption the client never offered early data for is invisible there, so
  ``tls_resumed`` is a lower bound: never claimed without one of those two signs;
- QUIC version: ``QUIC_SESSION_VERSION_NEGOTIATED``; requests: the session's
  ``QUIC_CHROMIUM_CLIENT_STREAM_SEND_REQUEST_HEADERS``.

The server's own stderr (``--v=1 --stderrthreshold=0``) is read beside it: its count
of ``SSL_do_handshake returned when entering early data`` lines, the server entering
early data, must equal the NetLog's count of 0-RTT connections, or the load is refused.

**Congestion control cannot be shown.** quic_server has no flag for it: its CC is
QUICHE's default, ``kCubicBytes`` (``CUBIC_BYTES``; ``GetDefaultCongestionControlType``
in quic_connection.cc, with the reloadable flags ``quic_default_to_bbr`` and
``quic_default_to_bbr_v2`` compiled in at their open-source value, false, and not
settable at run time), unless the *client's* connection options ask for another
(``QuicSentPacketManager::SetFromConfig``: TBBR, B2ON, RENO, BYTE). The NetLog shows
which options Chromium sent, so the facts carry ``cc_by_code``, the CC QUICHE's code
would pick for them; but nothing on the server shows the CC a connection ran, so
:meth:`GoogleQuicheServer.evidence` refuses every load on that ground, saying so,
until a server-side read-back exists (docs/testbed.md).

**Hook this stack needs.** The runner must give this arm's browser a NetLog and tell
the server where it is (``client_netlog``) before ``start``; without it ``start``
refuses, naming the missing NetLog (see docs/testbed.md).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, ClassVar

from quicbed.errors import QuicbedError
from quicbed.servers.webserver import Arm, WebServer
from quicbed.settings import tparams
from quicbed.testbed.lifecycle import RPath, Testbed

#: roles/quic_server_google's ``quic_server_google_bin`` (a link to the pinned build)
QUIC_SERVER = RPath("/usr/local/bin/quic_server")
#: the only version the arm serves (ParseQuicVersionString accepts this name)
QUIC_VERSION = "RFCv1"

#: Chromium NetLog events this stack reads (net/log/net_log_event_type_list.h)
EVENTS = (
    "QUIC_SESSION",
    "QUIC_SESSION_TRANSPORT_PARAMETERS_SENT",
    "QUIC_SESSION_TRANSPORT_PARAMETERS_RECEIVED",
    "QUIC_SESSION_TRANSPORT_PARAMETERS_RESUMED",
    "QUIC_SESSION_ZERO_RTT_REJECTED",
    "QUIC_SESSION_ZERO_RTT_STATE",
    "QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE",
    "QUIC_SESSION_VERSION_NEGOTIATED",
    "QUIC_SESSION_CERTIFICATE_VERIFY_FAILED",
    "QUIC_SESSION_CONNECTION_CLOSE_FRAME_RECEIVED",
    "QUIC_SESSION_CONNECTION_CLOSE_FRAME_SENT",
    "QUIC_SESSION_CLOSED",
    "QUIC_CHROMIUM_CLIENT_STREAM_SEND_REQUEST_HEADERS",
    "QUIC_CHROMIUM_CLIENT_STREAM_READ_RESPONSE_HEADERS",
)
ZERO_RTT_OK = "AttemptedAndSucceeded"
#: BoringSSL's ssl_early_data_reason_t names (SSL_early_data_reason_string) that mean
#: the server accepted the resumption but not the early data: a client sets
#: ``peer_declined`` only when the session was reused, else ``session_not_resumed``
#: (ssl/extensions.cc, ext_early_data_parse_serverhello)
RESUMED_REJECT_REASONS = ("peer_declined",)
#: connection options a QUICHE server reads to replace its default CC, in the order
#: QuicSentPacketManager::SetFromConfig applies them (the last one applied wins)
CC_OPTIONS = {"TBBR": "BBR", "B2ON": "BBRv2", "RENO": "RENO_BYTES", "BYTE": "CUBIC_BYTES"}
DEFAULT_CC = "CUBIC_BYTES"

#: an Abseil log line: severity, MMDD, time, thread, file:line] message
_ABSL = re.compile(r"^([IWEF])(\d{4}) (\d\d:\d\d:\d\d\.\d{6})\s+(\d+) ([^\s:\]]+):(\d+)\] (.*)$")
#: tls_handshaker.cc, TlsHandshaker::AdvanceHandshake, QUIC_VLOG(1)
EARLY_DATA_LINE = "SSL_do_handshake returned when entering early data"
HANDSHAKE_FAILED_LINE = "SSL_do_handshake failed"
#: quic_memory_cache_backend.cc, ResourceFile::Read / InitializeBackend
CACHE_PROBLEMS = (
    "Headers invalid or empty",
    "Failed to read file for the memory cache",
    "Can't read QuicMemoryCacheBackend directory",
)


# --- the NetLog -------------------------------------------------------------------------
def netlog_constants(line: str) -> dict[str, Any] | None:
    """The event and source type maps of a NetLog's first line (``{"constants":{...},``)."""
    prefix = '{"constants":'
    text = line.strip().rstrip(",")
    if not text.startswith(prefix):
        return None
    c = None
    # Chromium's own first line leaves the outer object open; our header closes it
    for candidate in (text[len(prefix) :], text[len(prefix) : -1]):
        try:
            c = json.loads(candidate)
            break
        except json.JSONDecodeError:
            continue
    if not isinstance(c, dict) or "logEventTypes" not in c or "logSourceType" not in c:
        return None
    return {k: c[k] for k in ("logEventTypes", "logSourceType", "logEventPhase") if k in c}


def _event(line: str) -> dict[str, Any] | None:
    """One NetLog event line (``{...},``); None for anything else (a cut line too)."""
    text = line.strip()
    if not text.startswith("{") or text.startswith('{"constants"'):
        return None
    for end in ("]}", ","):
        text = text.removesuffix(end)
    try:
        ev = json.loads(text)
    except json.JSONDecodeError:
        return None
    return ev if isinstance(ev, dict) and "type" in ev and "source" in ev else None


def connection_options(transport_parameters: str) -> list[str]:
    """The ``google_connection_options`` tags in QUICHE's TransportParameters::ToString."""
    m = re.search(r"\bgoogle_connection_options (\S+)", transport_parameters)
    return [t for t in m.group(1).rstrip("]").split(",") if t] if m else []


def transport_parameters(text: str) -> dict[str, Any]:
    """RFC 9000's parameters in QUICHE's TransportParameters::ToString (the NetLog's
    ``quic_transport_parameters``: ``[Client max_idle_timeout 30000 ...]``), by their
    qlog names as integers; connection IDs, tokens, versions, Google's own and unknown
    ones left out. A parameter QUICHE did not print was not sent (RFC default)."""
    body = re.sub(r"\[[^\[\]]*\]", " ", text.strip()[1:-1] if text.startswith("[") else text)
    tokens = body.split()
    out: dict[str, Any] = {}
    for key, value in zip(tokens, [*tokens[1:], ""], strict=True):
        if key in tparams.PARAMS and value.isdigit():
            out[key] = int(value)
    return out


def cc_by_code(options: list[str]) -> str:
    """The CC a QUICHE server runs for a client that sent ``options``, read from the pinned
    commit's code (SetFromConfig), with the reloadable flags at their open-source values."""
    cc = DEFAULT_CC
    if "TBBR" in options:
        cc = CC_OPTIONS["TBBR"]
    if "B2ON" in options:
        cc = CC_OPTIONS["B2ON"]
    if "RENO" in options:
        cc = CC_OPTIONS["RENO"]
    elif "BYTE" in options:
        cc = CC_OPTIONS["BYTE"]
    return cc


@dataclass
class Session:
    """One QUIC session (connection) of the client, from its NetLog events."""

    source: int
    connection_id: str = ""
    host: str = ""
    port: int | None = None
    begin_ms: int | None = None
    complete_ms: int | None = None
    version: str | None = None
    zero_rtt_state: str | None = None
    zero_rtt_reject: str | None = None
    resumption_offered: bool = False
    options: list[str] = field(default_factory=list)
    #: the transport parameters the client sent and the ones it received (the server's)
    tp_sent: dict[str, Any] | None = None
    tp_received: dict[str, Any] | None = None
    requests: int = 0
    early_requests: int = 0  # sent before the handshake completed: in 0-RTT packets
    statuses: list[str] = field(default_factory=list)
    cert_verify_failed: bool = False
    close: dict[str, Any] | None = None

    @property
    def established(self) -> bool:
        return self.complete_ms is not None

    @property
    def used_0rtt(self) -> bool:
        return self.zero_rtt_state == ZERO_RTT_OK

    @property
    def tls_resumed(self) -> bool:
        return self.used_0rtt or self.zero_rtt_reject in RESUMED_REJECT_REASONS


def sessions(lines: list[str], port: int | None = None) -> tuple[list[Session], str | None]:
    """The QUIC sessions that *began* in ``lines`` (a session whose begin is not there
    belongs to an earlier load), to ``port`` if given; and why there are none, if the
    lines hold no NetLog constants."""
    consts = None
    events = []
    for line in lines:
        if consts is None and line.startswith('{"constants"'):
            consts = netlog_constants(line)
            continue
        ev = _event(line)
        if ev is not None:
            events.append(ev)
    if consts is None:
        return [], "no NetLog constants (the client's NetLog is missing or not begun)"
    names = {v: k for k, v in consts["logEventTypes"].items()}
    quic_source = consts["logSourceType"].get("QUIC_SESSION")
    begin = consts.get("logEventPhase", {}).get("PHASE_BEGIN", 1)
    out: dict[int, Session] = {}
    for ev in events:
        src = ev.get("source") or {}
        if src.get("type") != quic_source:
            continue
        name = names.get(ev["type"])
        sid = int(src.get("id", -1))
        p = ev.get("params") or {}
        t = int(ev.get("time", 0))
        if name == "QUIC_SESSION" and ev.get("phase") == begin:
            out[sid] = Session(
                sid,
                str(p.get("connection_id", "")),
                str(p.get("host", "")),
                p.get("port"),
                begin_ms=t,
            )
            continue
        s = out.get(sid)
        if s is None:
            continue  # began before the window
        if name == "QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE" and s.complete_ms is None:
            s.complete_ms = t
        elif name == "QUIC_SESSION_ZERO_RTT_STATE":
            s.zero_rtt_state = str(p.get("state"))
        elif name == "QUIC_SESSION_ZERO_RTT_REJECTED":
            s.zero_rtt_reject = str(p.get("reason"))
        elif name == "QUIC_SESSION_TRANSPORT_PARAMETERS_RESUMED":
            s.resumption_offered = True
        elif name == "QUIC_SESSION_TRANSPORT_PARAMETERS_SENT":
            text = str(p.get("quic_transport_parameters", ""))
            s.options = connection_options(text)
            s.tp_sent = transport_parameters(text)
        elif name == "QUIC_SESSION_TRANSPORT_PARAMETERS_RECEIVED":
            s.tp_received = transport_parameters(str(p.get("quic_transport_parameters", "")))
        elif name == "QUIC_SESSION_VERSION_NEGOTIATED":
            s.version = str(p.get("version"))
        elif name == "QUIC_SESSION_CERTIFICATE_VERIFY_FAILED":
            s.cert_verify_failed = True
        elif name == "QUIC_CHROMIUM_CLIENT_STREAM_SEND_REQUEST_HEADERS":
            s.requests += 1
            s.early_requests += int(s.complete_ms is None)
        elif name == "QUIC_CHROMIUM_CLIENT_STREAM_READ_RESPONSE_HEADERS":
            st = [h.split(": ", 1)[1] for h in p.get("headers", []) if h.startswith(":status: ")]
            s.statuses += st[:1]
        elif (
            name
            in (
                "QUIC_SESSION_CLOSED",
                "QUIC_SESSION_CONNECTION_CLOSE_FRAME_RECEIVED",
                "QUIC_SESSION_CONNECTION_CLOSE_FRAME_SENT",
            )
            and s.close is None
        ):
            s.close = {k: p[k] for k in ("quic_error", "details", "from_peer") if k in p}
            if name != "QUIC_SESSION_CLOSED":
                s.close["from_peer"] = name.endswith("RECEIVED")
    found = [s for s in out.values() if port is None or s.port in (None, port)]
    return found, None


# --- quic_server's stderr ---------------------------------------------------------------
def server_lines(lines: list[str]) -> list[tuple[str, str]]:
    """(severity, message) of each Abseil log line among ``lines``."""
    out = []
    for line in lines:
        m = _ABSL.match(line.rstrip("\n"))
        if m:
            out.append((m.group(1), m.group(7)))
    return out


def cache_problems(lines: list[str]) -> list[str]:
    """What the memory-cache backend said was wrong with the response cache at start."""
    return [msg for _, msg in server_lines(lines) if any(p in msg for p in CACHE_PROBLEMS)]


# --- one load ---------------------------------------------------------------------------
def load_facts(lines: list[str], port: int | None = None) -> dict[str, Any]:
    """quic_load_facts's keys (connections, requests, used_0rtt, tls_resumed,
    handshake_ms, quic_versions, cc) from the client's NetLog lines and quic_server's
    stderr lines of one load, mixed or not. ``cc`` is None: no log shows it (module
    docstring); ``cc_by_code`` is what QUICHE's code would run, recorded apart."""
    found, problem = sessions(lines, port)
    conns = [s for s in found if s.established]
    failed = [s for s in found if not s.established and s.close is not None]
    srv = server_lines(lines)
    facts: dict[str, Any] = {
        "connections": len(conns),
        "requests": sum(s.requests for s in found),
        "used_0rtt": bool(conns) and all(s.used_0rtt for s in conns),
        "tls_resumed": bool(conns) and all(s.tls_resumed for s in conns),
        "handshake_ms": [
            s.complete_ms - s.begin_ms
            for s in conns
            if s.complete_ms is not None and s.begin_ms is not None
        ],
        "quic_versions": sorted({s.version for s in conns if s.version}),
        "cc": None,
        "facts_source": "client NetLog (Chromium) + quic_server stderr (--v=1)",
        "zero_rtt_states": [s.zero_rtt_state for s in conns],
        "zero_rtt_connections": sum(s.used_0rtt for s in conns),
        "early_requests": sum(s.early_requests for s in conns),
        "resumption_offered": sum(s.resumption_offered for s in conns),
        "connection_options": sorted({o for s in conns for o in s.options}),
        "cc_by_code": sorted({cc_by_code(s.options) for s in conns}),
        "statuses": sorted({x for s in found for x in s.statuses}),
        # what each side advertised, as the client's NetLog shows it: the server's
        # (received) and the client's own (sent), per connection (quicbed.settings.tparams)
        "tp_local": [s.tp_received for s in conns],
        "tp_remote": [s.tp_sent for s in conns],
        "server_early_data": sum(EARLY_DATA_LINE in m for _, m in srv),
        "server_handshake_failures": sum(HANDSHAKE_FAILED_LINE in m for _, m in srv),
        "server_problems": [m for sev, m in srv if sev in "EF"][:5],
    }
    if failed:
        facts["failed_handshakes"] = [
            {
                "connection_id": s.connection_id,
                "cert_verify_failed": s.cert_verify_failed,
                **(s.close or {}),
            }
            for s in failed
        ]
    if problem:
        facts["netlog_problem"] = problem
    return facts


def evidence(facts: dict[str, Any]) -> list[str]:
    """Why a load of quic_server cannot count: always its CC (no log of the server shows
    it), and any disagreement between the client's and the server's 0-RTT."""
    reasons = []
    if facts.get("netlog_problem"):
        reasons.append(f"quic_server's load is read from the client: {facts['netlog_problem']}")
    if facts.get("cc") is None:
        why = "quic_server logs no congestion control, so this load's CC cannot be shown"
        if facts.get("cc_by_code"):
            opts = ",".join(facts.get("connection_options") or [])
            sent = f"connection options {opts}" if opts else "no connection options"
            why += (
                f" (the client sent {sent}, for which QUICHE's code runs "
                f"{','.join(facts['cc_by_code'])}: inferred, not read back)"
            )
        reasons.append(why)
    zr, srv = facts.get("zero_rtt_connections", 0), facts.get("server_early_data", 0)
    if facts.get("connections") and zr != srv:
        reasons.append(
            f"the client's NetLog shows 0-RTT on {zr} connection(s), quic_server's "
            f"log early data on {srv}"
        )
    return reasons


class GoogleQuicheServer(WebServer):
    name = "gquiche"
    protocol = "h3"
    transport = "udp"
    #: quic_server's stderr (Abseil's log), written by WebServer.start
    log_name = "gquiche.stderr"
    #: quicbed's name for QUICHE's kCubicBytes ("CUBIC_BYTES"), its only CC without
    #: client connection options (module docstring); N = 2 emulated connections
    #: (quic_constants.h kDefaultNumConnections), not settable at run time
    arms = ("h3-gquiche",)
    ccs: tuple[str, ...] = ("cubic",)
    local = False
    key_exchange_unpinned: ClassVar[str] = (
        "cannot pin a key exchange: Google QUICHE's quic_server has no flag for it; it "
        "runs the first group the browser offers that BoringSSL has"
    )
    knob_refusals: ClassVar[dict[str, str]] = dict.fromkeys(
        ("udp_rcvbuf", "udp_sndbuf", "client_udp_rcvbuf", "client_udp_sndbuf", "gso", "aead"),
        "cannot apply it: Google QUICHE's quic_server has no flag for it (BoringSSL's TLS "
        "1.3 suites cannot be configured)",
    )
    #: a load's evidence is the browser's NetLog (``wants_client_netlog``): a transfer
    #: client keeps none, so this stack serves page cells only
    kinds = ("page",)
    colour = "#e7298a"
    #: the runner must give this arm's browser a NetLog and set ``client_netlog``
    wants_client_netlog = True
    #: the pinned Bazel build the role links there (its digest names the build)
    software_name = "quic_server"
    program = str(QUIC_SERVER)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._netlog_offset = 0
        self._constants_line: str | None = None
        self._codes: list[int] = []

    @classmethod
    def against_study(cls, arm: Arm) -> str | None:
        return "Google QUICHE's quic_server, the study's server (a newer commit of it)"

    @classmethod
    def check_testbed(cls, arm: Arm, tb: Testbed) -> None:
        super().check_testbed(arm, tb)
        if tb.exec("server", ["test", "-x", str(QUIC_SERVER)], check=False).returncode != 0:
            raise QuicbedError(
                f"arm {arm.name}: Google QUICHE's quic_server is not installed at "
                f"{QUIC_SERVER} on {tb.name('server')} (provision the server with the "
                "quic_server_google role)"
            )

    @property
    def cache_dir(self) -> RPath:
        return self.tb.workdir("server") / "gquiche-cache" / self.arm.name

    def argv(self) -> list[str]:
        s, a = self.spec, self.arm
        return [
            str(QUIC_SERVER),
            f"--port={a.port}",  # quic_server binds [::]:port (QuicToyServer::Start)
            f"--quic_response_cache_dir={self.cache_dir}",
            f"--certificate_file={s.cert}",
            f"--key_file={s.key}",  # PKCS#8 PEM, as quicbed.certs writes it
            f"--quic_versions={QUIC_VERSION}",
            "--v=1",  # TlsHandshaker's early-data line
            "--stderrthreshold=0",  # Abseil: INFO to stderr (default: ERROR and up)
        ]

    def prepare(self) -> dict[str, Any]:
        """The response cache for this arm, made on the server from the cell's tree
        (quicbed.servers.gquiche_cache) under each DNS name of the cell's certificate."""
        hosts = cert_dns_names(self.tb.read_bytes("server", self.spec.cert))
        if not hosts:
            raise QuicbedError(
                f"{self.name} ({self.arm.name}): the certificate "
                f"{self.spec.cert} names no DNS host to serve"
            )
        cmd = [
            *self.tb.python("server"),
            "-m",
            "quicbed.servers.gquiche_cache",
            str(self.spec.docroot),
            str(self.cache_dir),
            *hosts,
        ]
        cp = self.tb.exec("server", cmd, timeout=300, check=False)
        if cp.returncode != 0:
            tail = " | ".join((cp.stderr or cp.stdout).strip().splitlines()[-2:])
            raise QuicbedError(
                f"{self.name} ({self.arm.name}): could not make quic_server's "
                f"response cache: {tail or 'no output'}"
            )
        try:
            return dict(json.loads(cp.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            got = cp.stdout.strip()[:200]
            raise QuicbedError(
                f"{self.name} ({self.arm.name}): the response cache tool gave no summary: {got!r}"
            ) from None

    def start(self, timeout: float = 20) -> None:
        if self.client_netlog is None:
            raise QuicbedError(
                f"{self.name} ({self.arm.name}): quic_server keeps no per-connection log; "
                "its loads are read from the client's NetLog, which this runner did not "
                "give the arm (docs/testbed.md, 'h3-gquiche')"
            )
        self.prepare()
        super().start(timeout)
        problems = cache_problems(self.tb.read_text("server", self.log).splitlines())
        if problems:
            self.stop()
            raise QuicbedError(
                f"{self.name} ({self.arm.name}): quic_server refused its "
                f"response cache: {problems[0]}"
            )

    # --- per load: the server's stderr and the client's NetLog ----------------------------
    def _netlog_size(self) -> int:
        assert self.client_netlog is not None
        return self.tb.size("client", self.client_netlog)

    def _netlog_header(self) -> str | None:
        """A one-line constants header (event and source maps), read once."""
        if self._constants_line is None and self.client_netlog is not None:
            first = self.tb.exec(
                "client", ["head", "-n", "1", str(self.client_netlog)], check=False
            ).stdout
            consts = netlog_constants(first)
            if consts is not None:
                self._constants_line = json.dumps({"constants": consts})
                ev = consts["logEventTypes"]
                self._codes = sorted(ev[n] for n in EVENTS if n in ev)
        return self._constants_line

    def mark(self) -> None:
        super().mark()
        self._netlog_offset = self._netlog_size() if self.client_netlog is not None else 0

    def since_mark(self) -> list[str]:
        lines = super().since_mark()
        header = self._netlog_header()
        if header is None or self.client_netlog is None:
            return lines
        # only the events read here travel back (a large page's NetLog holds thousands of
        # packet events per load); each event line ends with its own "type":N
        pattern = '"type":(' + "|".join(str(c) for c in self._codes) + r")\}(,|\]\}|$)"
        path = shlex.quote(str(self.client_netlog))
        script = f"tail -c +{int(self._netlog_offset) + 1} {path} | grep -E {shlex.quote(pattern)}"
        out = self.tb.exec("client", ["sh", "-c", script], check=False).stdout
        return [header, *out.splitlines(), *lines]

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        return load_facts(lines, self.arm.port)

    def evidence(self, facts: dict[str, Any]) -> list[str]:
        return evidence(facts)

    def version(self) -> dict[str, Any]:
        real = self.tb.exec("server", ["readlink", "-f", str(QUIC_SERVER)], check=False)
        digest = self.tb.exec("server", ["sha256sum", str(QUIC_SERVER)], check=False)
        path = real.stdout.strip()
        m = re.search(r"quiche-([0-9a-f]{12})/", path)
        return {
            "server": self.name,
            "binary": path or None,
            "sha256": next(iter(digest.stdout.split()), None),
            "quiche_commit12": m.group(1) if m else None,
            "argv": self.argv(),
            "facts_source": "client NetLog + quic_server stderr; no CC read-back",
            "qlog": "none (quic_server writes no qlog)",
        }


def cert_dns_names(pem: bytes) -> list[str]:
    """The DNS names of the first certificate in ``pem`` (the leaf quicbed.certs made)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificates(pem)[0]
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (ValueError, IndexError, x509.ExtensionNotFound):
        return []
    return sorted(san.value.get_values_for_type(x509.DNSName))
