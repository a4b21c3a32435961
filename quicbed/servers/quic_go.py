"""Our HTTP/3 server (go/cmd/quicbed-h3server, quic-go) as a server stack.

Its own log says, per connection, whether 0-RTT was used, whether the TLS session
resumed, and which congestion control with which CUBIC parameters (N emulated
connections, backoff beta) ran: read back from quic-go's patched congestion package
(go/patches), not echoed from the flags. That, not the browser, is the evidence a
load rests on. quic-go implements NewReno and CUBIC only: BBR is refused by name.
The loss detection (``loss_detection``: quic-go's own ``adaptive``, or ``rfc9002``'s
fixed thresholds, also quicbed's patch) is read back the same way.

quic-go v0.65.0 as released runs **NewReno**, whatever it is asked (its CUBIC code is
dormant: the ack handler passes "use Reno"); quicbed's patch makes the choice real
(``-cc reno|cubic``). Results measured before the patch (no ``quic_go_patch`` in the
server's start record; quic-go's dependency without "=> quic-go-v0.65.0" in the
provenance) ran NewReno although their cells say cubic: see docs/stacks.md.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any, ClassVar

from pydantic import Field, field_validator

from quicbed.client.transfer import QUIC_GO_CONSTANTS
from quicbed.errors import QuicbedError
from quicbed.jsonlines import json_events
from quicbed.servers.webserver import (
    Arm,
    FlowFacts,
    Params,
    WebServer,
    cold_origins,
    cubic_beta_bound,
    cubic_n_bound,
    port_of,
)
from quicbed.settings import keyexchange, sockopts, tparams
from quicbed.testbed.lifecycle import RPath, Testbed


def quic_load_facts(lines: list[str], params: tuple[str, ...] = ()) -> dict[str, Any]:
    """What a quicbed HTTP/3 server's log (one schema for every stack we build) says of
    one load: its connections, requests, 0-RTT, resumption, CC and ``params``."""
    ev = json_events(lines)
    conns = [e for e in ev if e.get("event") == "conn"]
    # a replayed page's requests are "replay" records (how each matched)
    reqs = [e for e in ev if e.get("event") in ("request", "replay")]
    facts: dict[str, Any] = {
        "connections": len(conns),
        "requests": len(reqs),
        "used_0rtt": bool(conns) and all(c.get("used_0rtt") for c in conns),
        "tls_resumed": bool(conns) and all(c.get("did_resume") for c in conns),
        "handshake_ms": [c.get("handshake_ms") for c in conns],
        "quic_versions": sorted({str(c.get("quic_version")) for c in conns}),
        **cold_origins((str(c.get("sni") or ""), bool(c.get("used_0rtt"))) for c in conns),
    }
    if conns:
        facts["cc"] = sorted({str(c.get("cc")) for c in conns if c.get("cc")})
        for key in params:
            if not tparams.is_key(key):
                facts[key] = sorted({c[key] for c in conns if c.get(key) is not None})
        # what each side advertised, per connection (quicbed.settings.tparams)
        facts.update(tparams.conn_sets(conns))
        ciphers = sorted({str(c["tls_cipher"]) for c in conns if c.get("tls_cipher")})
        if ciphers:  # the AEAD each connection negotiated (quicbed.settings.sockopts)
            facts["tls_cipher"] = ciphers
    replayed = [e for e in reqs if e.get("event") == "replay"]
    if replayed:  # what each response from an entry was (quicbed.replay.verify)
        facts["replay_served"] = [
            {
                "method": e.get("method"),
                "entry": e["entry"],
                "bytes": e.get("bytes"),
                "slept_ms": e.get("wait_ms") or 0,
            }
            for e in replayed
            if e.get("entry")
        ]
    closes = [e for e in ev if e.get("event") == "conn_close" and e.get("stats")]
    if closes:
        facts["stats"] = [e["stats"] for e in closes]
    return facts


class OwnH3Server(WebServer):
    """A quicbed HTTP/3 server (quic-go's here, quiche's in rust/): one log schema, so one
    reading of a load's facts and of the start record."""

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        return quic_load_facts(lines, tuple(self.Params.model_fields))

    @classmethod
    def loss_counters(cls, stats: dict[str, Any]) -> FlowFacts | None:
        """The retransmission counters of a ``conn_close`` record's stats, as this stack
        counts them (None: it keeps none)."""
        return None

    def _flow_conn(self, ev: list[dict[str, Any]], port: int | None) -> dict[str, Any] | None:
        return next(
            (e for e in ev if e.get("event") == "conn" and port_of(str(e.get("remote"))) == port),
            None,
        )

    def _flow_close(self, ev: list[dict[str, Any]], conn: dict[str, Any]) -> dict[str, Any] | None:
        return next(
            (
                e
                for e in ev
                if e.get("event") == "conn_close" and e.get("conn_id") == conn.get("conn_id")
            ),
            None,
        )

    def flow_closed(self, lines: list[str], port: int | None) -> bool:
        ev = json_events(lines)
        conn = self._flow_conn(ev, port)
        return conn is not None and self._flow_close(ev, conn) is not None

    def flow_facts(self, lines: list[str], port: int | None) -> FlowFacts:
        ev = json_events(lines)
        conn = self._flow_conn(ev, port)
        if conn is None:
            return FlowFacts(source="the server's log has no connection from this flow")
        server = {
            k: conn.get(k)
            for k in (
                "cc",
                "quic_version",
                "handshake_ms",
                "cubic_n",
                "loss_detection",
                "tp_local",
                "tp_remote",
                tparams.AUTOTUNE,
                "tls_cipher",
            )
            if conn.get(k) is not None
        }
        close = self._flow_close(ev, conn)
        if close is None:
            return FlowFacts(server, source="the server had not logged the connection's close")
        stats = close.get("stats")
        counted = self.loss_counters(stats) if isinstance(stats, dict) else None
        if counted is None:
            return FlowFacts(server, source="this stack's server logs no loss counters")
        counted.server = {**server, "stats": stats}
        return counted

    @classmethod
    def caption(cls, arm: Arm, component: dict[str, Any]) -> str:
        start = component.get("start") or {}
        if not start.get("quic_go_version"):
            return super().caption(arm, component)
        patched = " patched" if start.get("quic_go_patch") else ""
        return f"quic-go {start['quic_go_version']}{patched}, {cls.wire(arm)}"

    def version(self) -> dict[str, Any]:
        lines = self.tb.read_text("server", self.log).splitlines()
        start = [e for e in json_events(lines) if e.get("event") == "start"]
        return {"server": self.name, "start": start[-1] if start else None}


#: quic-go's loss detections (quicbed's patch, go/patches: quic.SetLossDetection), its own
#: first, and what each is
LOSS_DETECTION = {
    "adaptive": "quic-go's own: packet threshold 3 and time threshold 9/8 RTT until a "
    "spurious loss, which switches the packet threshold off and, when the packet was "
    "overtaken by more than the time threshold, doubles the threshold's extra allowance "
    "(up to 2 RTT)",
    "rfc9002": "RFC 9002's: packet threshold 3 and time threshold 9/8 RTT, never adapted",
}
#: the parameters that only CUBIC has
CUBIC_PARAMS = ("cubic_n", "cubic_beta")


class QuicGoParams(
    tparams.TransportParams, sockopts.SocketKnobs, keyexchange.KeyExchangeKnob, Params
):
    """quic-go's knobs (quicbed's patch, go/patches): CUBIC's N emulated connections and
    loss backoff, and the loss detection, each read back from quic-go's package state
    into the server's conn record per connection; and the transport parameters
    (quicbed.settings.tparams), each side's read from quic-go's qlog events per connection."""

    cubic_n: int | None = Field(default=None, description="CUBIC's emulated connections N")
    cubic_beta: float | None = Field(default=None, description="CUBIC's loss backoff beta")
    loss_detection: str | None = Field(
        default=None, description="quic-go's loss detection: " + ", ".join(LOSS_DETECTION)
    )

    _n = field_validator("cubic_n")(cubic_n_bound)
    _beta = field_validator("cubic_beta")(cubic_beta_bound)

    @field_validator("loss_detection")
    @classmethod
    def _ld(cls, v: str | None) -> str | None:
        if v is not None and v not in LOSS_DETECTION:
            raise ValueError(
                f"loss_detection {v!r} is not one of quic-go's ({', '.join(LOSS_DETECTION)})"
            )
        return v


class QuicGoServer(OwnH3Server):
    name = "quic-go"
    cpu_map_file = "quic_go.cpu.yaml"
    protocol = "h3"
    transport = "udp"
    log_name = "h3server.jsonl"
    binary = "quicbed-h3server"
    software_name = binary  # its build in build/bin is what the software check reads
    arms = ("h3",)
    ccs = ("cubic", "reno")
    Params = QuicGoParams
    label = "QUIC"
    colour = "#b1182b"
    #: quic-go v0.65.0 logs a packet declared lost and acknowledged after all
    #: (sentPacketHandler.detectSpuriousLosses)
    logs_spurious_losses = True
    writes_qlog = True
    #: it serves a replayed page (quicbed-h3server -replay, every origin picked by SNI
    #: and :authority on the unspecified address)
    replays = True
    #: quic-go v0.65.0's constants (internal/protocol; connection.go builds its
    #: transport parameters from them)
    transport_refusals = QUIC_GO_CONSTANTS
    #: one stream receive window (quic.Config.InitialStreamReceiveWindow) for all three
    one_stream_window = True
    #: Go's TLS 1.3 cipher suites are fixed (crypto/tls: no Config.CipherSuites for 1.3):
    #: the server takes AES-128-GCM when it has AES hardware and the client lists AES
    #: first, ChaCha20-Poly1305 otherwise; ``GODEBUG=cpu.aes=off`` hides the hardware
    #: from the process, which is how ``aead=chacha20-poly1305`` is applied
    knob_refusals: ClassVar[dict[str, str]] = {
        "aead=aes-256-gcm": "cannot choose AES-256-GCM: Go's TLS 1.3 server prefers "
        "AES-128-GCM or ChaCha20-Poly1305, whatever the client offers first (crypto/tls "
        "has no TLS 1.3 cipher setting)",
    }
    #: the flag that sets each transport parameter (the stream window is one flag)
    FLAGS: ClassVar[dict[str, str]] = {
        "initial_max_data": "-initial-conn-window",
        "initial_max_stream_data_bidi_local": "-initial-stream-window",
        "initial_max_streams_bidi": "-max-incoming-streams",
        "initial_max_streams_uni": "-max-incoming-uni-streams",
    }

    @classmethod
    def loss_counters(cls, stats: dict[str, Any]) -> FlowFacts | None:
        if "lost" not in stats:
            return None
        return FlowFacts(
            retransmissions=int(stats["lost"]),
            retrans_bytes=stats.get("lost_bytes"),
            source="the server's conn_close stats (lost packets: their data is "
            "sent again; quic-go counts no retransmitted packets; ECN-CE signals and "
            "window reductions apart: ecn_signals, cutbacks)",
        )

    @classmethod
    def against_study(cls, arm: Arm) -> str | None:
        cc = f"CUBIC with N = {arm.params.get('cubic_n', 1)}" if arm.cc == "cubic" else arm.cc
        if arm.params.get("loss_detection") == "rfc9002":
            loss = "RFC 9002's loss detection with fixed thresholds (QUICHE adapts its "
            loss += "packet threshold to reordering)"
        else:
            loss = "its own adaptive loss detection (a spurious loss switches its packet "
            loss += "threshold off; QUICHE raises it to the reordering seen)"
        return (
            f"quic-go, not the study's Google QUICHE: its own {cc} (the study: CUBIC, "
            f"N = 2) and {loss}"
        )

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check_arm(arm, cc, params)
        cubic = [k for k in params if k in CUBIC_PARAMS]
        if cubic and cc != "cubic":
            raise QuicbedError(f"arm {arm}: {', '.join(cubic)} are CUBIC's; this arm runs {cc}")
        # quic.Config takes 0 as "quic-go's default" for these: it cannot advertise 0
        for key in ("initial_max_data", *tparams.STREAM_DATA, "max_idle_timeout"):
            if params.get(key) == 0:
                raise QuicbedError(
                    f"arm {arm}: {key} 0: quic-go takes 0 as its default (quic.Config) "
                    "and cannot advertise it"
                )
        return params

    def env(self) -> dict[str, str] | None:
        """``aead=chacha20-poly1305``: AES hardware hidden from the Go runtime (the
        server then prefers ChaCha20); ``gso=false``: quic-go's own switch."""
        env = {}
        if self.arm.params.get("aead") == "chacha20-poly1305":
            env["GODEBUG"] = "cpu.aes=off"
        if self.arm.params.get("gso") is False:
            env["QUIC_GO_DISABLE_GSO"] = "true"
        return env or None

    def hold(self, held: ExitStack) -> None:
        """net.core.rmem_max/wmem_max at least the buffers the arm asks, while it runs
        (quicbed.settings.sockopts.limits_raised); a replayed page's certificates by
        origin host, where the server reads them."""
        held.enter_context(sockopts.limits_raised(self.tb, self.arm.params))
        if self.spec.replay is not None:
            certs = {
                o.host: {"cert": str(o.cert), "key": str(self.spec.key)}
                for o in self.spec.replay.origins
            }
            self.tb.write_text("server", self._replay_certs(), json.dumps(certs))

    def mark(self) -> None:
        """Also counts what the server's namespace sent so far, when the arm sets gso."""
        super().mark()
        if self.arm.params.get("gso") is not None:
            self._sends = sockopts.read_sends(self.tb, "server")

    def observe(self) -> dict[str, Any]:
        """The server socket's buffers as the kernel holds them after the load (``ss
        -uam``), when the arm sets them; with ``gso``, the datagrams and packets the
        server sent during it; and the base's (the hellos of a pinned key exchange)."""
        facts: dict[str, Any] = {}
        if any(self.arm.params.get(k) is not None for k in sockopts.BUFFERS):
            facts |= sockopts.read_socket(self.tb, "server", self.arm.port)
        if self.arm.params.get("gso") is not None:
            before = getattr(self, "_sends", None)
            facts |= sockopts.sends_since(before, sockopts.read_sends(self.tb, "server"))
        return facts | super().observe()  # the hellos of a pinned key exchange, last

    @classmethod
    def check_testbed(cls, arm: Arm, tb: Testbed) -> None:
        super().check_testbed(arm, tb)
        if arm.params.get("gso") is not None:
            sockopts.check_gso_testbed(arm.name, tb)

    def _replay_certs(self) -> RPath:
        return self.tb.workdir("server") / f"replay-certs-{self.arm.name}.json"

    def _serve_argv(self) -> list[str]:
        """What it serves: the page tree on the testbed's address, or a replayed page's
        archive on every address (each origin has its own)."""
        s, a = self.spec, self.arm
        if s.replay is None:
            return [
                *("-addr", f"{self.tb.server_ip}:{a.port}", "-docroot", str(s.docroot)),
                *("-cert", str(s.cert), "-key", str(s.key)),
            ]
        return [  # every origin's own certificate, on the one key
            "-addr",
            f"0.0.0.0:{a.port}",
            "-replay",
            str(s.replay.archive),
            "-replay-certs",
            str(self._replay_certs()),
            # each response after its entry's recorded server time (a cell's server_time)
            *(["-replay-wait"] if s.replay.wait else []),
        ]

    def argv(self) -> list[str]:
        a = self.arm
        return [
            str(self.tb.bin_path("server", self.binary)),
            *self._serve_argv(),
            "-log",
            str(self.log),
            "-cc",
            a.cc,
            *(["-cubic-n", str(a.params["cubic_n"])] if "cubic_n" in a.params else []),
            *(["-cubic-beta", f"{a.params['cubic_beta']:g}"] if "cubic_beta" in a.params else []),
            *(
                ["-loss-detection", a.params["loss_detection"]]
                if "loss_detection" in a.params
                else []
            ),
            *self.transport_argv(),
            *(["-groups", a.key_exchange] if a.key_exchange else []),
            *(["-udp-rcvbuf", str(a.params["udp_rcvbuf"])] if "udp_rcvbuf" in a.params else []),
            *(["-udp-sndbuf", str(a.params["udp_sndbuf"])] if "udp_sndbuf" in a.params else []),
            *(["-qlog-dir", str(self.qlog_dir)] if self.qlog_dir else []),
        ]

    def transport_argv(self) -> list[str]:
        """The server flags of the arm's transport parameters (unset: none)."""
        p, out = self.arm.params, []
        for key, flag in self.FLAGS.items():
            if key in p:
                out += [flag, str(p[key])]
        if "max_idle_timeout" in p:
            out += ["-idle-timeout", f"{p['max_idle_timeout']}ms"]
        if tparams.AUTOTUNE in p:
            out.append(f"-flow-control-autotune={str(p[tparams.AUTOTUNE]).lower()}")
        return out
