"""Google QUIC (gQUIC Q039/Q043/Q044) with quicbed's server on quic-go v0.10.2 (go/gquic).

The reference study's other half compared gQUIC with TCP. Its Q037 needs a 2017
toolchain (testbed only: roles/quic_server_gquic); locally the nearest versions run:
quic-go v0.10.2 (patched: it destroyed the request packets Chromium sends with its
hello, go/gquic/README.md) as the server and Chromium 72 as the client. Every arm of
a gQUIC cell runs in Chromium 72 (``client``), the TCP arm too, so the browser is
not a confound; that TCP arm speaks TLS 1.2 unless it says otherwise, as the study's
gQUIC half did (``tls_for_tcp``).

The evidence of a load: the server's ``conn`` lines name the wire version each
connection negotiated (read from the session) and whether it took a REJ (0-RTT is
exactly no REJ); the page's protocol (``http/2+quic/39``) must name the same version.
v0.10.2's congestion control is CUBIC with N = 2 and beta 0.7, constants of its
source (checked by go/gquic's tests), so ``cubic`` is the only CC an arm may name.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from quicbed.errors import QuicbedError
from quicbed.servers.base import Arm, Params
from quicbed.servers.quic_go import OwnH3Server

#: the versions quic-go v0.10.2 and Chromium 72 both speak, default first
VERSIONS = ("Q039", "Q043", "Q044")
#: what the TCP arm of a gQUIC cell speaks unless set: the study's gQUIC half ran
#: TCP+TLS 1.2+HTTP/2 against gQUIC (TLS 1.3 did not exist for it)
TCP_TLS = "1.2"


class GquicParams(Params):
    quic_version: str | None = Field(default=None, description="gQUIC version, e.g. Q039")


class GquicServer(OwnH3Server):
    name = "gquic"
    protocol = "gquic"
    transport = "udp"
    log_name = "gquic-server.jsonl"
    binary = "quicbed-gquic-server"
    software_name = binary  # its build in build/bin is what the software check reads
    arms = ("gquic",)
    ccs = ("cubic",)
    Params = GquicParams
    #: Chromium 72 loads pages; no transfer client speaks gQUIC
    kinds = ("page",)
    client = "chromium72"
    tcp_tls = TCP_TLS

    @classmethod
    def check_arm(cls, arm: str, cc: str, params: dict[str, Any]) -> dict[str, Any]:
        params = super().check_arm(arm, cc, params)
        v = params.get("quic_version", VERSIONS[0])
        if v not in VERSIONS:
            raise QuicbedError(
                f"arm {arm}: quic_version {v!r} is not one quicbed's gQUIC server "
                f"and Chromium 72 speak ({', '.join(VERSIONS)})"
            )
        return params

    @classmethod
    def wire(cls, arm: Arm) -> str:
        return f"gQUIC {arm.params.get('quic_version', VERSIONS[0])}"

    @property
    def quic_version(self) -> str:
        return str(self.arm.params.get("quic_version", VERSIONS[0]))

    def page_protocol(self) -> str:
        """What Chromium 72 calls the protocol of a gQUIC response: ``http/2+quic/39``."""
        return f"http/2+quic/{int(self.quic_version[1:])}"

    def argv(self) -> list[str]:
        s, a = self.spec, self.arm
        return [
            str(self.tb.bin_path("server", self.binary)),
            "-addr",
            f"{self.tb.server_ip}:{a.port}",
            "-docroot",
            str(s.docroot),
            "-cert",
            str(s.cert),
            "-key",
            str(s.key),
            "-log",
            str(self.log),
            "-versions",
            self.quic_version,
        ]

    def param_evidence(self, facts: dict[str, Any]) -> list[str]:
        seen = facts.get("quic_versions")
        if seen != [self.quic_version]:
            return [
                f"the server's connections negotiated {','.join(seen or []) or 'nothing'}, "
                f"not {self.quic_version}"
            ]
        return []
