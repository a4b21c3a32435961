"""The TLS key exchange as a verified cell setting: the same group on every arm.

Chromium and Firefox offer an X25519MLKEM768 key share beside X25519 (neither can be
told not to any more). A server whose TLS library has ML-KEM picks the hybrid: quic-go,
quiche and Envoy's QUICHE do; Apache on Debian 12's OpenSSL 3.0 cannot and picks
X25519. Left alone, an h2-against-h3 cell also compares a classical handshake with a
post-quantum one, whose ServerHello is 1.1 KB larger on the QUIC side only.

So a cell pins a group (``key_exchange``, :data:`NAMES`; default ``x25519``, which every
TLS stack here can run) on every arm whose stack can pin one (its ``Params`` has the
field: Apache's ``SSLOpenSSLConfCmd Groups``, quic-go's ``CurvePreferences``, quiche's
``set_curves_list``); ``stack`` pins nothing (each stack's own choice, as cells stored
before the setting ran). A stack that cannot pin a group (Envoy's QUIC listener takes no
group setting; Google's quic_server has no flag; gQUIC's handshake is QUIC crypto, not
TLS) is left to its own choice and named in the cell's summary
(quicbed.spec.arms.unpinned_arms); an arm that asks such a stack for a group itself is
refused by name.

**Verified per load from the wire**: while a pinning arm's server runs, a tcpdump on the
client keeps only the packets that carry the hellos (TCP segments that begin with a TLS
handshake record; QUIC long-header packets) of the arm's port (:class:`HelloCapture`).
After each load quicbed.traces.hellos reads them in-process (TCP's hellos are
cleartext; QUIC's Initial packets open with keys derived from the client's first
connection ID). A load is invalid when a connection's ServerHello chose another group
than the arm pins, or when no ServerHello was seen (:func:`evidence`). A
HelloRetryRequest is recorded, not refused: pinning ``secp256r1`` against a browser that
sends no P-256 share costs the extra round trip the setting exists to measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_validator

from quicbed import pcap
from quicbed.errors import QuicbedError
from quicbed.traces.hellos import hellos

if TYPE_CHECKING:
    from quicbed.testbed.lifecycle import Process, RPath, Testbed

#: quicbed's names of the groups a cell may pin, and their IANA TLS Supported Groups ids
NAMES = {"x25519": 29, "secp256r1": 23, "x25519mlkem768": 4588}
#: other spellings accepted for them
ALIASES = {"p-256": "secp256r1", "p256": "secp256r1", "x25519-mlkem768": "x25519mlkem768"}
#: no pin: each stack's own choice
STACK = "stack"
DEFAULT = "x25519"


def parse(value: object) -> str:
    """A key-exchange setting as quicbed names it, or an error naming the value."""
    name = str(value).strip().lower()
    name = ALIASES.get(name, name)
    if name != STACK and name not in NAMES:
        raise ValueError(
            f"{value!r} is not a key exchange quicbed pins: one of {', '.join(NAMES)}, or "
            f"{STACK} (each stack's own choice)"
        )
    return name


class KeyExchangeKnob(BaseModel):
    """The field of the ``Params`` of a stack that can pin a group (a base of it, beside
    quicbed.servers.webserver.Params); the values a stack cannot pin of :data:`NAMES` are
    its ``key_exchange_refusals``."""

    key_exchange: str | None = Field(
        default=None,
        description="the TLS key-exchange group the server pins: " + ", ".join(NAMES),
    )

    @field_validator("key_exchange")
    @classmethod
    def _named(cls, v: str | None) -> str | None:
        try:
            return None if v is None else parse(v)
        except ValueError as exc:  # an arm's message names the knob, a cell's its field
            raise ValueError(f"key_exchange {exc}") from None


#: OpenSSL's names of the groups (Apache's ``SSLOpenSSLConfCmd Groups``)
OPENSSL = {"x25519": "X25519", "secp256r1": "P-256", "x25519mlkem768": "X25519MLKEM768"}


# --- per load -----------------------------------------------------------------------------
def evidence(want: str | None, facts: dict[str, Any]) -> list[str]:
    """Why a load's hellos do not show the group ``want`` its arm pins (None: it pins
    none, nothing to show)."""
    if want is None:
        return []
    if "tls_hellos" not in facts:
        why = facts.get("tls_hellos_problem", "not captured")
        return [f"the load's hellos were not read: {why}"]
    seen = [h for h in facts["tls_hellos"] if h.get("group") is not None]
    if not seen:
        return ["no ServerHello in the load's hello capture: its key exchange is unknown"]
    wrong = sorted({str(h["group_name"]) for h in seen if h["group"] != NAMES[want]})
    if wrong:
        return [
            f"the server chose {','.join(wrong)} (its ServerHello), not {want}, the arm's "
            "key_exchange"
        ]
    return []


class HelloCapture:
    """One tcpdump on the client for a server's lifetime, keeping only the packets that
    carry hellos of its port; read per load from where the last load's packets ended."""

    def __init__(self, tb: Testbed, port: int, transport: str, name: str) -> None:
        self.tb, self.port = tb, port
        folder = tb.workdir("client") / "hellos"
        self.pcap: RPath = folder / f"{name}.pcap"
        self.log: RPath = folder / f"{name}.log"
        if transport == "tcp":  # a segment whose payload begins with a handshake record
            what = f"tcp port {port} and tcp[((tcp[12:1] & 0xf0) >> 2):1] = 0x16"
        else:  # a datagram whose first packet has a long header
            what = f"udp port {port} and udp[8] & 0x80 != 0"
        self.filter = what
        self.process: Process | None = None
        self._offset = pcap.FILE_HEADER
        self._head: bytes | None = None  # the file's header, read once

    def start(self) -> None:
        from quicbed.traces.capture import client_interface, start_tcpdump

        tb = self.tb
        tb.mkdir("client", self.pcap.parent)
        tb.remove("client", self.pcap)
        argv = ["tcpdump", "-i", client_interface(tb), "-w", str(self.pcap), "-s", "65535"]
        argv += ["-U", "--immediate-mode", "-n", "-Z", "root", self.filter]
        self.process, _ = start_tcpdump(tb, "client", argv, self.log)
        # the file's header, written as tcpdump opened it: each load reads from its own
        # packets on (a long transfer's file grows, and the ssh testbed copies what it reads)
        try:
            self._head = tb.read_bytes("client", self.pcap)[: pcap.FILE_HEADER]
        except (OSError, QuicbedError):
            self._head = None  # not there yet: the first read takes it

    def mark(self) -> None:
        """Where this load's packets begin (between loads nothing is being written)."""
        if self.process is not None:
            self._offset = max(pcap.FILE_HEADER, self.tb.size("client", self.pcap))

    def read(self) -> dict[str, Any]:
        """``tls_hellos``: the hellos since ``mark`` (or ``tls_hellos_problem``)."""
        if self.process is None or self.process.poll() is not None:
            return {"tls_hellos_problem": "the hello capture is not running"}
        try:
            if not self._head:  # written after "listening" on a slow host
                self._head = self.tb.read_bytes("client", self.pcap)[: pcap.FILE_HEADER]
            body = self.tb.read_bytes("client", self.pcap, self._offset)
            found = hellos(self._head + body, self.port)
        except (OSError, QuicbedError) as exc:
            return {"tls_hellos_problem": f"the hello capture could not be read: {exc}"}
        return {"tls_hellos": [h.as_dict() for h in found]}

    def stop(self) -> None:
        from quicbed.traces.capture import stop_tcpdump

        if self.process is not None:
            stop_tcpdump(self.process)
            self.process = None
        self.tb.remove("client", self.pcap)
        self.tb.remove("client", self.log)
