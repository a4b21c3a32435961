"""Envoy's HTTP/3 listener, which is Google QUICHE (the reference study's QUIC), as a stack.

The reference study's QUIC v1 arm was Chromium's ``quic_server``, built from Google's
QUICHE (the ``gquiche`` stack, testbed only: a Bazel build from GitHub). Envoy's
downstream QUIC is the same QUICHE code (Envoy wraps QUICHE's server session, sent
packet manager, loss detection and congestion controls), and Envoy installs from a
checksummed wheel (roles/quic_server_envoy), so this stack runs on the local testbed
too: the study's CUBIC with its N = 2 and QUICHE's loss detection, where quic-go and
Cloudflare quiche differ. docs/stacks.md has the details and the evidence.

**What it serves.** Every file of the cell's tree is a route whose ``direct_response``
body Envoy reads into memory at start (quicbed.servers.envoy_config), with the other
servers' headers; one worker thread (``--concurrency 1``), as ``quic_server`` is one
thread; HTTP/3 only on the arm's UDP port; TLS 1.3 with early data and resumption on.
A replayed page (docs/replay.md) is served the same way from its archive: every
origin on the unspecified address, chosen by its server name (its own certificate)
and its ``:authority``, each recorded response a route in the matching rule's order.

**Congestion control.** QUICHE picks a connection's sender from two places: QUICHE's
reloadable flags, which Envoy exposes as runtime keys (Envoy 1.40 turns
``quic_default_to_bbr`` on: its default is BBRv1, not the study's CUBIC), and the
connection options the *client* sends (QuicSentPacketManager::SetFromConfig reads only
received options on a server; Envoy's own ``connection_options`` are only advertised
to the client and change nothing on the server). So ``cubic``, ``bbr`` and ``bbr2`` are
set by the runtime keys, and ``reno`` by the client: the arm's Chromium sends ``RENO``
(``--quic-connection-options``). CUBIC emulates N = 2 connections, a compile-time
constant (``kDefaultNumConnections``); the option that set N = 1 (``1CON``) was removed
from QUICHE in 2019, so ``cubic_n=1`` is refused.

**Loss detection** (``loss_detection``): QUICHE's defaults (a packet threshold of 3
that adapts to reordering on a spurious loss, and a time threshold of 1.25 RTT) or one
of its ``ILD`` connection options, which only the client can send (LOSS_DETECTION).

**Where a load's facts come from**, all from the server or the wire, none from the
configuration quicbed wrote:

- Envoy's access log, one JSON line per request: protocol, status, bytes, the
  connection, its retransmitted packets, and ``early``: Envoy adds ``early-data: 1`` to
  a request it decoded before the handshake completed, so a request that came in 0-RTT
  says so in the server's own log (a connection that took 0-RTT is a resumed one);
- the arm's browser NetLog (as the gquiche stack reads it), where its browser writes
  one (Chromium): the connections the client opened, their 0-RTT state and the
  connection options it sent. In a browser without one (Firefox) the connections and
  their 0-RTT are the access log's alone, and an arm that needs a client's connection
  option or a NetLog's transport parameters is refused (``browser_refusal``);
- the sender class that configured each connection, counted in the running server
  by kernel uprobes (quicbed.servers.envoy_probe): ``cc`` is what it shows, with Reno
  told from CUBIC (one class) by the ``RENO`` option the NetLog shows was sent.
"""

from __future__ import annotations

import importlib
import json
import os
from collections import Counter
from typing import Any, ClassVar

from pydantic import Field, field_validator

from quicbed.errors import QuicbedError
from quicbed.jsonlines import json_events
from quicbed.paths import setup_command
from quicbed.servers.gquiche import GoogleQuicheServer
from quicbed.servers.gquiche import load_facts as netlog_facts
from quicbed.servers.webserver import Arm, Params, cold_origins
from quicbed.settings import tparams
from quicbed.testbed.lifecycle import RPath, Testbed

#: roles/quic_server_envoy's ``quic_server_envoy_bin`` (a link to the pinned binary)
ENVOY = RPath("/usr/local/bin/quicbed-envoy")
#: QUICHE's reloadable flags as Envoy 1.40 runtime keys
_FLAG = "envoy.reloadable_features.FLAGS_envoy_quiche_reloadable_flag_"
DEFAULT_TO_BBR = _FLAG + "quic_default_to_bbr"
DEFAULT_TO_BBR2 = _FLAG + "quic_default_to_bbr_v2"
#: per CC: the runtime keys that make QUICHE's default sender run it, and the connection
#: options the client must send for it
CC_RUNTIME = {
    "cubic": {DEFAULT_TO_BBR: False, DEFAULT_TO_BBR2: False},
    "reno": {DEFAULT_TO_BBR: False, DEFAULT_TO_BBR2: False},
    "bbr": {DEFAULT_TO_BBR: True, DEFAULT_TO_BBR2: False},
    "bbr2": {DEFAULT_TO_BBR: False, DEFAULT_TO_BBR2: True},
}
CC_OPTIONS = {"reno": ("RENO",)}
#: which sender class (quicbed.servers.envoy_probe.SENDERS) runs each CC
CC_CLASS = {"cubic": "cubic_or_reno", "reno": "cubic_or_reno", "bbr": "bbr", "bbr2": "bbr2"}
#: QUICHE's loss detection variants (QuicSentPacketManager::SetFromConfig, the ILD
#: options; general_loss_algorithm.h): the client option that selects one, and what it is
LOSS_DETECTION = {
    "quiche": ((), "packet threshold 3, adapted on spurious loss; time threshold 1.25 RTT"),
    "rfc9002": (("ILD0",), "packet threshold 3, fixed; time threshold 9/8 RTT (RFC 9002)"),
    "ild1": (("ILD1",), "packet threshold 3, fixed; time threshold 1.25 RTT"),
    "ild2": (("ILD2",), "packet threshold 3, adapted on spurious loss; time threshold 9/8 RTT"),
    "ild4": (
        ("ILD4",),
        "packet threshold 3 and time threshold 1.25 RTT, both adapted on spurious loss",
    ),
}
#: a sender is configured (SetFromConfig) this many times per connection: once by the
#: connection, once by the sent packet manager (counted with envoy_probe; twice on
#: every connection seen)
CONFIGURED_PER_CONNECTION = 2


#: Envoy 1.40's downstream QuicProtocolOptions (config.core.v3, in the listener's
#: udp_listener_config.quic_options) that set a transport parameter QUICHE advertises:
#: parameter -> (option, lowest, highest) as Envoy's own validation has them (checked
#: with ``envoy --mode validate``). The stream window is one option for all three
#: stream-data limits; the idle timeout is a Duration of at least 1 s
TRANSPORT_OPTIONS = {
    "initial_max_streams_bidi": ("max_concurrent_streams", 1, 2**32 - 1),
    "initial_max_stream_data_bidi_local": ("initial_stream_window_size", 1, 16777216),
    "initial_max_data": ("initial_connection_window_size", 1, 25165824),
    "max_idle_timeout": ("idle_network_timeout", 1000, tparams.VARINT_MAX),
}
#: what Envoy's downstream QUIC cannot advertise as asked
TRANSPORT_REFUSALS = {
    "max_udp_payload_size": "has no option for it (QuicProtocolOptions.max_packet_length "
    "has no effect on a downstream connection)",
    "max_ack_delay": "has no option for it (QUICHE's value is compiled in)",
    "ack_delay_exponent": "has no option for it (QUICHE's value is compiled in)",
    "active_connection_id_limit": "has no option for it (QUICHE's value is compiled in)",
    "initial_max_streams_uni": "has no option for it (QUICHE advertises "
    "max_concurrent_streams + 3: set initial_max_streams_bidi)",
    tparams.AUTOTUNE: "has no option for it (QUICHE's receive windows tune themselves)",
}


class EnvoyParams(tparams.TransportParams, Params):
    """What an ``envoy`` arm may set: QUICHE's CUBIC N (fixed at 2), its loss detection,
    and the transport parameters Envoy's QuicProtocolOptions set (TRANSPORT_OPTIONS)."""

    cubic_n: int | None = Field(
        default=None, description="CUBIC's emulated connections N (QUICHE: 2 only)"
    )
    loss_detection: str | None = Field(
        default=None,
        description="QUICHE's loss detection: " + ", ".join(LOSS_DETECTION),
    )

    @field_validator("cubic_n")
    @classmethod
    def _n(cls, v: int | None) -> int | None:
        if v is not None and v != 2:
            raise ValueError(
                f"cubic_n {v}: Google QUICHE's CUBIC emulates N = 2 connections, fixed at "
                "compile time (kDefaultNumConnections); the option that set N = 1 (1CON) "
                "was removed from QUICHE in 2019 (use quic-go for N = 1: h3:cubic_n=1)"
            )
        return v

    @field_validator("loss_detection")
    @classmethod
    def _ld(cls, v: str | None) -> str | None:
        if v is not None and v not in LOSS_DETECTION:
            raise ValueError(
                f"loss_detection {v!r} is not one of QUICHE's ({', '.join(LOSS_DETECTION)})"
            )
        return v


def access_facts(lines: list[str]) -> dict[str, Any]:
    """What Envoy's access log (quicbed.servers.envoy_config.ACCESS_LOG_FIELDS) says of
    one load's requests, per connection."""
    reqs = [e for e in json_events(lines) if "proto" in e and "conn" in e]
    conns: dict[str, list[dict[str, Any]]] = {}
    for e in reqs:
        conns.setdefault(str(e["conn"]), []).append(e)
    early = {c for c, rs in conns.items() if any(str(r.get("early")) == "1" for r in rs)}
    # a replayed page's requests name their server (REPLAY_LOG_FIELDS): reuse per origin
    named = (
        (next((str(r["sni"]) for r in rs if r.get("sni")), ""), c in early)
        for c, rs in conns.items()
    )
    return {
        **cold_origins(named),
        "requests": len(reqs),
        "server_connections": len(conns),
        "server_early_connections": len(early),
        "server_early_requests": sum(str(e.get("early")) == "1" for e in reqs),
        "server_protocols": sorted({str(e["proto"]) for e in reqs}),
        "server_statuses": sorted({str(e["status"]) for e in reqs}),
        "server_tls": sorted({str(e["tls"]) for e in reqs}),
        # each request's own (QuicStatsGatherer: packets of its stream's data sent again)
        "stream_retransmitted_packets": sum(int(e.get("retx_packets") or 0) for e in reqs),
        # a replayed page's requests by how each matched (envoy_config.REPLAY_LOG_FIELDS)
        **(
            {
                "server_replay": dict(Counter(str(e.get("replay") or "unmarked") for e in reqs)),
                "replay_served": replay_served(reqs),
            }
            if any("replay" in e for e in reqs)
            else {}
        ),
    }


def replay_served(reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Envoy sent for each request a route answered from an entry (its route's name,
    ``url|path METHOD URL``): its body bytes, and how long it held it: the request's
    whole duration where the fault filter delayed it (response flag DI), else none
    (quicbed.replay.verify.served_reasons)."""
    out = []
    for e in reqs:
        how, _, rest = str(e.get("route") or "").partition(" ")
        method, _, url = rest.partition(" ")
        if how not in ("url", "path") or not url:
            continue
        held = "DI" in str(e.get("flags") or "").split(",")
        slept = float(e.get("duration_ms") or 0) if held else 0.0
        sent = int(e["bytes"]) if str(e.get("bytes") or "").isdigit() else None
        out.append({"method": method, "entry": url, "bytes": sent, "slept_ms": slept})
    return out


def connection_options(arm: Arm) -> tuple[str, ...]:
    """The connection options an arm's client must send: its CC's and its loss
    detection's (QUICHE takes both from the client only)."""
    ld = arm.params.get("loss_detection", "quiche")
    return (*CC_OPTIONS.get(arm.cc, ()), *LOSS_DETECTION[ld][0])


def server_only_facts(access: dict[str, Any]) -> dict[str, Any]:
    """A load's facts from Envoy's access log alone (a browser without a NetLog): its
    connections are the server's, each resumed exactly when it took 0-RTT (the one
    sign of resumption Envoy logs); the client's side (connection options, versions,
    handshake times, transport parameters) is not known and not claimed."""
    return {
        "connections": access["server_connections"],
        "tls_resumed": False,  # load_facts: True where every connection took 0-RTT
        "quic_versions": [],
        "connection_options": [],
        **access,
    }


def cc_of(senders: dict[str, int], options: list[str]) -> list[str]:
    """The CCs the counted sender classes ran (sorted): the TCP-CUBIC class runs Reno
    exactly when the client sent ``RENO`` (QuicSentPacketManager::SetFromConfig)."""
    out = set()
    for cls, n in senders.items():
        if n <= 0:
            continue
        if cls == "cubic_or_reno":
            out.add("reno" if "RENO" in options else "cubic")
        else:
            out.add(cls)
    return sorted(out)


class EnvoyServer(GoogleQuicheServer):
    name = "envoy"
    cpu_map_file = "envoy.cpu.yaml"
    #: Envoy's stderr goes to envoy.stderr (WebServer.start); its access log here
    log_name = "envoy-access.jsonl"
    arms = ("h3-envoy",)
    ccs = ("cubic", "reno", "bbr", "bbr2")
    Params = EnvoyParams
    local = True
    transport_refusals = TRANSPORT_REFUSALS
    #: measured here: Envoy 1.40 with tls_params.ecdh_curves [X25519] on its QUIC
    #: listener still answered Chromium with X25519MLKEM768
    key_exchange_unpinned: ClassVar[str] = (
        "cannot pin a key exchange: Envoy's QUIC listener takes no group setting "
        "(tls_params.ecdh_curves reaches its TCP TLS only); it runs the first group the "
        "browser offers that BoringSSL has (x25519mlkem768 with Chromium and Firefox)"
    )
    knob_refusals: ClassVar[dict[str, str]] = {
        **dict.fromkeys(
            ("udp_rcvbuf", "udp_sndbuf", "client_udp_rcvbuf", "client_udp_sndbuf"),
            "cannot apply it: quicbed's Envoy listener sets no socket buffers (an Envoy "
            "socket option could, but its read-back is not wired)",
        ),
        "gso": "cannot switch it: Envoy decides UDP GSO itself (its UDP writer), with no "
        "option quicbed drives",
        "aead": "cannot choose it: Envoy's QUIC TLS is BoringSSL, whose TLS 1.3 cipher "
        "suites cannot be configured",
    }
    one_stream_window = True
    #: the loads' evidence includes the browser's NetLog: page cells only
    kinds = ("page",)
    colour = "#1b9e77"
    #: it serves a replayed page: a filter chain per origin by server name, each
    #: recorded response a route (quicbed.servers.envoy_config)
    replays = True
    component = "envoy"
    software_name = "quicbed-envoy"
    program = str(ENVOY)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probe: str | None = None  # the tracefs instance of envoy_probe, once armed
        #: what envoy_probe's ``arm`` answered (the functions it probes), for version()
        self.probe_armed: dict[str, Any] | None = None

    @classmethod
    def browser_refusal(cls, arm: Arm, browser: str, net_log: bool) -> str | None:
        """A browser without a NetLog (Firefox) loads an arm whose evidence Envoy gives
        alone: its access log (connections, 0-RTT) and its senders; not an arm that needs
        a connection option only Chromium sends (Reno, a loss detection), nor one whose
        transport parameters only the NetLog shows."""
        if net_log:
            return None
        options = connection_options(arm)
        if options:
            ld = arm.params.get("loss_detection", "quiche")
            return (
                f"{cls.name} runs CC {arm.cc} with loss detection {ld} only when the "
                f"client sends {','.join(options)}, which browser {browser} cannot "
                "(load it in chromium)"
            )
        tps = [k for k in arm.params if tparams.is_key(k)]
        if tps:
            return (
                f"{cls.name}'s transport parameters ({', '.join(tps)}) are read from the "
                f"browser's NetLog, which browser {browser} does not write (load it in chromium)"
            )
        return None

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check_arm(arm, cc, params)
        if "cubic_n" in params and cc != "cubic":
            raise QuicbedError(f"arm {arm}: cubic_n is CUBIC's; this arm runs {cc}")
        for key, (option, lo, hi) in TRANSPORT_OPTIONS.items():
            v = params.get(key)
            if v is not None and not lo <= v <= hi:
                raise QuicbedError(
                    f"arm {arm}: {key} {v}: Envoy's {option} takes {lo}..{hi}"
                    + (
                        " ms (a whole Duration of at least 1 s)"
                        if option.startswith("idle")
                        else ""
                    )
                )
        return params

    def quic_protocol_options(self) -> dict[str, Any]:
        """Envoy's QuicProtocolOptions for the arm's transport parameters (unset: none)."""
        out: dict[str, Any] = {}
        for key, (option, _, _) in TRANSPORT_OPTIONS.items():
            v = self.arm.params.get(key)
            if v is None:
                continue
            out[option] = f"{v / 1000:g}s" if option == "idle_network_timeout" else v
        return out

    @classmethod
    def check_testbed(cls, arm: Arm, tb: Testbed) -> None:
        # the server is this host, and its namespace may not exist yet
        if tb.controller_is_host:
            there = os.access(ENVOY, os.X_OK)
        else:
            there = tb.exec("server", ["test", "-x", str(ENVOY)], check=False).returncode == 0
        if not there:
            raise QuicbedError(
                f"arm {arm.name}: Envoy is not installed at {ENVOY} on "
                f"{tb.name('server')}; install it: {setup_command(cls.component)} "
                "(roles/quic_server_envoy)"
            )

    @classmethod
    def wire(cls, arm: Arm) -> str:
        return "QUIC v1 (Google QUICHE)"

    @classmethod
    def caption(cls, arm: Arm, component: dict[str, Any]) -> str:
        version = str(component.get("version") or "").split("/")[1:2]
        return f"Envoy {version[0] if version else '?'}, {cls.wire(arm)}"

    #: the study's quic_server's flow-control windows as the arm keys that set them
    #: (docs/envoy-vs-quic-server.md): sweeps/long-look.yaml's h3-envoy runs them
    STUDY_WINDOWS: ClassVar[dict[str, int]] = {
        "initial_max_stream_data_bidi_local": 65536,
        "initial_max_stream_data_bidi_remote": 65536,
        "initial_max_stream_data_uni": 65536,
        "initial_max_data": 1048576,
    }

    @classmethod
    def against_study(cls, arm: Arm) -> str | None:
        ld = arm.params.get("loss_detection", "quiche")
        cc = "" if arm.cc == "cubic" else f"; CC {arm.cc} where the study ran CUBIC with N = 2"
        loss = "" if ld == "quiche" else f"; loss detection {ld} ({LOSS_DETECTION[ld][1]})"
        study = all(arm.params.get(k) == v for k, v in cls.STUDY_WINDOWS.items())
        windows = (
            "; the study's server's windows (64 KiB per stream, 1 MiB per connection)"
            if study
            else "; Envoy's windows (16 MiB per stream, 24 MiB per connection unless set) "
            "where the study's server started at 64 KiB and 1 MiB"
        )
        return (
            "Google QUICHE as in the study, through Envoy 1.40.0 (a QUICHE of 2026, the "
            "study's of Chromium 111's time), serving the files from Envoy's memory"
            + windows
            + "; Envoy's GSO batching and deferred sending, which it cannot switch off "
            "as the study's server had them, differ" + cc + loss
        )

    # --- start and stop ---------------------------------------------------------------
    @property
    def config_file(self) -> RPath:
        return self._own("envoy.json")

    def client_options(self) -> tuple[str, ...]:
        """The connection options this arm's browser sends (its CC's and loss detection's)."""
        return connection_options(self.arm)

    def browser_options(self) -> dict[str, Any]:
        opts = self.client_options()
        return {"quic_connection_options": opts} if opts else {}

    def settings(self) -> dict[str, Any]:
        """What quicbed.servers.envoy_config lays out as Envoy's configuration: the cell's
        tree on the testbed's address, or a replayed page's archive on every address
        (each origin has its own, and its own certificate on the one key)."""
        s, a = self.spec, self.arm
        replay = (
            {}
            if s.replay is None
            else {
                "replay": {
                    "archive": str(s.replay.archive),
                    "origins": [{"host": o.host, "cert": str(o.cert)} for o in s.replay.origins],
                    "wait": s.replay.wait,
                }
            }
        )
        return {
            "docroot": str(s.docroot),
            "cert": str(s.cert),
            "key": str(s.key),
            "address": self.tb.server_ip if s.replay is None else "0.0.0.0",
            "port": a.port,
            "access_log": str(self.log),
            "out": str(self.config_file),
            "runtime": CC_RUNTIME[a.cc],
            # a downstream connection takes its QUIC options from the listener (the
            # connection manager's http3_protocol_options change nothing it advertises:
            # checked from the wire, tests/test_tparams.py)
            "quic_options": {"quic_protocol_options": self.quic_protocol_options()},
            **replay,
        }

    def argv(self) -> list[str]:
        return [
            str(ENVOY),
            "-c",
            str(self.config_file),
            "--concurrency",
            "1",
            "--disable-hot-restart",  # no shared memory: two Envoys may run side by side
            "--log-level",
            "warn",
            # the access log reaches its file within this many ms (default 10 s)
            "--file-flush-interval-msec",
            "20",
        ]

    def _server_module(self, module: str, *args: str, what: str) -> dict[str, Any]:
        """Run one of this stack's node-side modules on the server; its JSON answer."""
        if self.tb.controller_is_host:  # the server is this host: no process to start
            mod = importlib.import_module(f"quicbed.servers.{module}")
            out = dict(mod.answer(list(args)))
        else:
            cmd = [*self.tb.python("server"), "-m", f"quicbed.servers.{module}", *args]
            cp = self.tb.exec("server", cmd, timeout=120, check=False)
            try:
                out = dict(json.loads(cp.stdout.strip().splitlines()[-1]))
            except (IndexError, ValueError):
                out = {"error": (cp.stderr or cp.stdout).strip()[-300:] or "no output"}
        if "error" in out:
            raise QuicbedError(f"{self.name} ({self.arm.name}): {what}: {out.get('error')}")
        return out

    def prepare(self) -> dict[str, Any]:
        """Envoy's configuration for this arm, made on the server from the cell's tree."""
        self.tb.mkdir("server", self.spec.logdir)
        return self._server_module(
            "envoy_config",
            json.dumps(self.settings()),
            what="could not write Envoy's configuration",
        )

    def start(self, timeout: float = 20) -> None:
        # without a NetLog (a browser that writes none: browser_refusal said the arm
        # can do without) a load's facts are Envoy's own
        self.prepare()
        super(GoogleQuicheServer, self).start(timeout)
        assert self.process is not None
        instance = f"quicbed-{self.tb.prefix}-{self.arm.name}"
        try:
            armed = self._server_module(
                "envoy_probe",
                "arm",
                str(self.process.pid),
                instance,
                what="cannot count its congestion controls (kernel uprobes)",
            )
        except QuicbedError:
            self.stop()
            raise
        self._probe = instance
        self.probe_armed = armed

    def stop(self) -> None:
        super().stop()
        if self._probe is not None:
            instance, self._probe = self._probe, None
            self._server_module("envoy_probe", "disarm", instance, what="probe removal")

    # --- per load -----------------------------------------------------------------------
    def _read_probe(self) -> dict[str, Any]:
        if self._probe is None:
            return {"error": "the probe is not armed"}
        return self._server_module("envoy_probe", "read", self._probe, what="probe read")

    def mark(self) -> None:
        super().mark()
        self._read_probe()  # what came before this load is not its

    def observe(self) -> dict[str, Any]:
        got = self._read_probe()
        facts: dict[str, Any] = {"senders": got.get("senders")}
        if got.get("lost_events"):
            facts["probe_lost"] = True
        return facts

    def netlog_port(self) -> int:
        """The port the browser's QUIC sessions name in its NetLog: the arm's, or for a
        replayed page the origins' (443: the browser reaches every origin as
        ``host:443``, which its host map sends to the arm's port)."""
        if self.spec.replay is None:
            return self.arm.port
        (port,) = {o.port for o in self.spec.replay.origins}  # 443: replay.serve.checked
        return port

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        if self.client_netlog is None:
            facts = server_only_facts(access_facts(lines))
        else:
            facts = netlog_facts(lines, self.netlog_port())
            for key in ("server_early_data", "server_handshake_failures", "server_problems"):
                facts.pop(key)  # quic_server's stderr: Envoy's says none of this
            facts.update(access_facts(lines))
        # the server's word: a connection on which a request came in 0-RTT
        facts["used_0rtt"] = bool(facts["server_connections"]) and (
            facts["server_early_connections"] == facts["server_connections"]
        )
        facts["tls_resumed"] = facts["used_0rtt"] or facts["tls_resumed"]
        facts["cc"] = None  # set from the probe (observe) in evidence
        facts["facts_source"] = self.facts_source()
        return facts

    def facts_source(self) -> str:
        own = "Envoy's access log + its senders (uprobes)"
        return own + (" + client NetLog" if self.client_netlog is not None else "")

    def evidence(self, facts: dict[str, Any]) -> list[str]:
        reasons = []
        if facts.get("netlog_problem"):
            reasons.append(f"the client's NetLog: {facts['netlog_problem']}")
        if facts.get("server_protocols", []) != ["HTTP/3"]:
            reasons.append(f"Envoy served {facts.get('server_protocols')}, not HTTP/3 only")
        if self.client_netlog is not None and facts.get("connections") != facts.get(
            "server_connections"
        ):
            reasons.append(
                f"the client's NetLog shows {facts.get('connections')} QUIC connection(s), "
                f"Envoy's access log {facts.get('server_connections')}"
            )
        reasons += self._cc_evidence(facts)
        return reasons

    def _cc_evidence(self, facts: dict[str, Any]) -> list[str]:
        senders = facts.get("senders")
        if not isinstance(senders, dict):
            return ["Envoy's senders were not counted for this load (probe)"]
        opts = list(facts.get("connection_options") or [])
        facts["cc"] = cc_of(senders, opts)
        reasons = []
        want = self.client_options()
        missing = [o for o in want if o not in opts]
        if missing:
            reasons.append(f"the client did not send the connection option(s) {','.join(missing)}")
        n = senders.get(CC_CLASS[self.arm.cc], 0)
        others = {k: v for k, v in senders.items() if k != CC_CLASS[self.arm.cc] and v}
        conns = int(facts.get("server_connections") or 0)
        if others or n < conns:
            reasons.append(
                f"Envoy's connections were configured by {senders} (SetFromConfig calls per "
                f"sender class), not by {CC_CLASS[self.arm.cc]} alone for {conns} connection(s)"
            )
        elif facts["cc"] != [self.arm.cc]:
            reasons.append(f"the server's connections ran {facts['cc']}, not {self.arm.cc}")
        # the parameters, as far as the server and the wire show them: N is QUICHE's
        # constant wherever its CUBIC ran; a loss detection is the option the client sent
        if facts["cc"] == ["cubic"]:
            facts["cubic_n"] = [2]
        ild = [k for k, (tags, _) in LOSS_DETECTION.items() if tags and tags[0] in opts]
        facts["loss_detection"] = ild or ["quiche"]
        return reasons + self.param_evidence(facts)

    def version(self) -> dict[str, Any]:
        real = self.tb.exec("server", ["readlink", "-f", str(ENVOY)], check=False)
        ver = self.tb.exec("server", [str(ENVOY), "--version"], check=False)
        return {
            "server": self.name,
            "binary": real.stdout.strip() or None,
            "version": ver.stdout.strip().split("version:")[-1].strip() or None,
            "argv": self.argv(),
            "runtime": CC_RUNTIME[self.arm.cc],
            "client_connection_options": list(self.client_options()),
            "probe": getattr(self, "probe_armed", None),
            "facts_source": self.facts_source(),
        }
