"""Our HTTP/3 server on Cloudflare quiche (rust/quicbed-quiche-server) as a server stack.

The sibling of quic_go.QuicGoServer: the same document tree, the same response
headers, and a log with the same events and field names, read by the same parser
(quic_go.quic_load_facts). Its ``conn`` line's ``used_0rtt`` is BoringSSL's own
verdict (``SSL_get_early_data_reason`` is ``ssl_early_data_accepted``), the server's
word as for quic-go; ``conn_close`` carries quiche's counters under ``stats``.

Unlike quic-go it offers several congestion controls, named exactly as quiche 0.30.0's
``CongestionControlAlgorithm::from_str`` spells them; ``bbr``, ``bbr2`` and
``bbr2_gcongestion`` are one algorithm, quiche's BBRv2 (not the kernel's BBRv1 that
the TCP arm gets under the name ``bbr``). The log's ``cc`` is the name the server
was started with; quiche has no getter for a connection's algorithm, but the server
checks what it has (``gcongestion_enabled``, true exactly for BBRv2) and logs
``inconsistent`` instead if that disagrees, so such a load is invalid. quiche's CUBIC
has no N.

**Transport parameters** (quicbed.settings.tparams): quiche sets each of RFC 9000's
separately (``quiche::Config``), so an arm may set every one, each stream-data limit on
its own, and ``flow_control_autotune`` (quiche grows its windows up to
``max_stream_window`` and ``max_connection_window``; false: those are the initial ones).
The ``conn`` line carries ``tp_remote``, the client's parameters as quiche decoded them
(``peer_transport_params``), and ``tp_local``, the server's: the values it set on
quiche's Config, which quiche 0.30.0 encodes unchanged within RFC 9000's ranges
(quiche has no getter for a connection's own; its qlog's ``transport:parameters_set``
writes the same struct). The server refuses values outside RFC 9000's ranges itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

from quicbed.errors import QuicbedError
from quicbed.servers.quic_go import OwnH3Server
from quicbed.servers.webserver import Arm, FlowFacts, Params
from quicbed.settings import keyexchange, tparams

#: quiche 0.30.0's names (src/recovery/mod.rs), default first; the binary refuses any
#: other with exit status 2, naming it
SUPPORTED_CC = ("cubic", "reno", "bbr", "bbr2", "bbr2_gcongestion")


class QuicheParams(tparams.TransportParams, keyexchange.KeyExchangeKnob, Params):
    """quiche's arm settings: the transport parameters (quicbed.settings.tparams), each side's
    read per connection from the server's conn line; the key-exchange group it pins
    (BoringSSL's curves list, quicbed.settings.keyexchange)."""


class QuicheServer(OwnH3Server):
    name = "quiche"
    cpu_map_file = "quiche.cpu.yaml"
    source_files = (
        "rust/quicbed-quiche-server/Cargo.toml",
        "rust/quicbed-quiche-server/Cargo.lock",
    )
    protocol = "h3"
    transport = "udp"
    writes_qlog = True
    log_name = "quiche-server.jsonl"
    binary = "quicbed-quiche-server"
    component = "quiche"
    software_name = binary  # its build in build/bin is what the software check reads
    arms = ("h3-quiche",)
    ccs = SUPPORTED_CC
    Params = QuicheParams
    colour = "#7570b3"
    #: the host and socket knobs quicbed's quiche server cannot apply (rust/: one std
    #: UdpSocket, one send_to per packet)
    knob_refusals: ClassVar[dict[str, str]] = {
        **dict.fromkeys(
            ("udp_rcvbuf", "udp_sndbuf"),
            "cannot apply it: quicbed's quiche server (rust/) binds a std UdpSocket and "
            "sets no buffer: it runs with the kernel's defaults (net.core.rmem_default, "
            "wmem_default)",
        ),
        **dict.fromkeys(
            ("client_udp_rcvbuf", "client_udp_sndbuf"),
            "cannot apply it: the client's buffers are set on a quic-go arm (the transfer "
            "client is quic-go's; give them to the h3 arm)",
        ),
        "gso": "cannot switch it: quicbed's quiche server sends one packet per send_to "
        "(no UDP_SEGMENT), so it never uses GSO",
        "aead": "cannot choose it: quiche's TLS is BoringSSL, whose TLS 1.3 cipher suites "
        "cannot be configured (its order depends only on AES hardware)",
    }
    #: the flag of each transport parameter (quicbed-quiche-server's, README)
    FLAGS: ClassVar[dict[str, str]] = {
        "initial_max_data": "--initial-conn-window",
        "initial_max_stream_data_bidi_local": "--initial-max-stream-data-bidi-local",
        "initial_max_stream_data_bidi_remote": "--initial-max-stream-data-bidi-remote",
        "initial_max_stream_data_uni": "--initial-max-stream-data-uni",
        "initial_max_streams_bidi": "--max-incoming-streams",
        "initial_max_streams_uni": "--max-incoming-uni-streams",
        "max_udp_payload_size": "--max-udp-payload-size",
        "max_ack_delay": "--max-ack-delay",
        "ack_delay_exponent": "--ack-delay-exponent",
        "active_connection_id_limit": "--active-connection-id-limit",
    }

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check_arm(arm, cc, params)
        if params.get("max_idle_timeout") == 0:
            raise QuicbedError(
                f"arm {arm}: max_idle_timeout 0: quicbed-quiche-server refuses it (quiche "
                "would never close an idle connection)"
            )
        return params

    @classmethod
    def against_study(cls, arm: Arm) -> str | None:
        return (
            f"Cloudflare quiche, not the study's Google QUICHE: its own {arm.cc} (the study: "
            "CUBIC, N = 2; quiche's CUBIC has no N) and loss detection"
        )

    #: quiche never sends NEW_TOKEN frames (its lib.rs says so): a browser that waits for
    #: one before it keeps a session ticket (Firefox) cannot resume with it
    new_token = False

    @classmethod
    def loss_counters(cls, stats: dict[str, Any]) -> FlowFacts | None:
        if "retrans" not in stats:
            return None
        return FlowFacts(
            retransmissions=int(stats["retrans"]),
            retrans_bytes=stats.get("stream_retrans_bytes"),
            source="the server's conn_close stats (retrans packets)",
        )

    def argv(self) -> list[str]:
        s, a = self.spec, self.arm
        return [
            str(self.tb.bin_path("server", self.binary)),
            "--addr",
            f"{self.tb.server_ip}:{a.port}",
            "--docroot",
            str(s.docroot),
            "--cert",
            str(s.cert),
            "--key",
            str(s.key),
            "--log",
            str(self.log),
            "--cc",
            a.cc,
            *self.transport_argv(),
            *(["--groups", a.key_exchange] if a.key_exchange else []),
            *(["--qlog-dir", str(self.qlog_dir)] if self.qlog_dir else []),
        ]

    def transport_argv(self) -> list[str]:
        """The server flags of the arm's transport parameters (unset: none)."""
        p, out = self.arm.params, []
        for key, flag in self.FLAGS.items():
            if key in p:
                out += [flag, str(p[key])]
        if "max_idle_timeout" in p:
            out += ["--idle-timeout", f"{p['max_idle_timeout']}ms"]
        if tparams.AUTOTUNE in p:
            out += ["--flow-control-autotune", str(p[tparams.AUTOTUNE]).lower()]
        return out
