"""Our HTTP/3 server (go/cmd/quicbed-h3server, quic-go) as a server under test.

Its own log says, per connection, whether 0-RTT was used and whether the TLS
session resumed: that, not the browser, is the evidence a 0-RTT cell rests on.
quic-go implements CUBIC (and NewReno) only, so ``--cc bbr`` is refused by name.
"""

from __future__ import annotations

import json
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.servers.base import WebServer

SUPPORTED_CC = ("cubic",)


class QuicGoServer(WebServer):
    name = "quic-go"
    arm = "h3"
    transport = "udp"
    log_name = "h3server.jsonl"
    binary = "quicbed-h3server"

    @staticmethod
    def check_cc(cc: str) -> None:
        if cc not in SUPPORTED_CC:
            raise QuicbedError(
                f"congestion control {cc!r} is not supported by the QUIC server quic-go "
                f"(quicbed-h3server implements only {', '.join(SUPPORTED_CC)})"
            )

    def argv(self) -> list[str]:
        self.check_cc(self.spec.cc)
        s = self.spec
        return [
            str(self.tb.bin_path("server", self.binary)),
            "-addr", f"{self.tb.server_ip}:{s.port}",
            "-docroot", str(s.docroot),
            "-cert", str(s.cert),
            "-key", str(s.key),
            "-log", str(self.log),
            "-cc", s.cc,
            *(["-qlog-dir", str(s.qlog_dir)] if s.qlog_dir else []),
        ]  # fmt: skip

    def events(self, lines: list[str]) -> list[dict[str, Any]]:
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def load_facts(self, lines: list[str]) -> dict[str, Any]:
        ev = self.events(lines)
        conns = [e for e in ev if e.get("event") == "conn"]
        reqs = [e for e in ev if e.get("event") == "request"]
        return {
            "connections": len(conns),
            "requests": len(reqs),
            "used_0rtt": bool(conns) and all(c.get("used_0rtt") for c in conns),
            "tls_resumed": bool(conns) and all(c.get("did_resume") for c in conns),
            "handshake_ms": [c.get("handshake_ms") for c in conns],
            "quic_versions": sorted({str(c.get("quic_version")) for c in conns}),
        }

    def version(self) -> dict[str, Any]:
        lines = self.tb.read_text("server", self.log).splitlines()
        start = [e for e in self.events(lines) if e.get("event") == "start"]
        return {"server": self.name, "start": start[-1] if start else None}
