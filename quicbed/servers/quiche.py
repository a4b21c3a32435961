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
``inconsistent`` instead if that disagrees, so such a load is invalid. No parameters:
quiche's CUBIC has no N.
"""

from __future__ import annotations

from typing import Any

from quicbed.servers.base import FlowFacts
from quicbed.servers.quic_go import OwnH3Server

#: quiche 0.30.0's names (src/recovery/mod.rs), default first; the binary refuses any
#: other with exit status 2, naming it
SUPPORTED_CC = ("cubic", "reno", "bbr", "bbr2", "bbr2_gcongestion")


class QuicheServer(OwnH3Server):
    name = "quiche"
    protocol = "h3"
    transport = "udp"
    log_name = "quiche-server.jsonl"
    binary = "quicbed-quiche-server"
    software_name = binary  # its build in build/bin is what the software check reads
    arms = ("h3-quiche",)
    ccs = SUPPORTED_CC
    colour = "#7570b3"
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
            *(["--qlog-dir", str(self.qlog_dir)] if self.qlog_dir else []),
        ]
