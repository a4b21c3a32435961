"""Each connection's TLS handshake, read from a load's capture: the same facts for TCP
and QUIC, whatever the stack or the browser.

quicbed promises arms that differ only in the protocol under test. The handshake is
part of that: Chromium offers an X25519MLKEM768 key share beside X25519, and a server
whose TLS library has ML-KEM (quic-go, quiche, Envoy's QUIC) answers with the hybrid
group while Apache on OpenSSL 3.0 answers with X25519, so the two arms of a cell may
run different key exchanges with server flights 1.1 KB apart. Nothing in a HAR or a
server log says so; the packets do. At ``--traces full`` every load keeps its capture
and its arm's TLS key log (quicbed.traces.capture), and :func:`read` gives, per
connection (keyed by the client's port):

- ``transport`` (tcp / quic), ``client_port``, ``server_port``;
- ``offered_key_shares``: the groups of the first ClientHello's key shares (IANA ids;
  GREASE values left out);
- ``group``: the group the server's ServerHello chose (``group_name``: quicbed's name,
  quicbed.traces.hellos.GROUPS), ``hello_retry``: whether the server asked for
  another key share first (a HelloRetryRequest costs a round trip);
- ``cipher`` (IANA id) and ``cipher_name``;
- ``resumed``: the ServerHello accepted a pre-shared key (a session ticket);
- ``certificates``, ``certificate_bytes``: the chain the server sent (0: resumed, none
  sent; None: not decrypted); ``signature_algorithm`` of its CertificateVerify;
- ``client_hello_bytes``: the first ClientHello's handshake message;
- ``server_flight_bytes``: the server's handshake messages up to its Finished
  (ServerHello, EncryptedExtensions, Certificate, CertificateVerify, Finished; None if
  the encrypted ones could not be read: no key log);
- ``span_ms``: from the client's first ClientHello to its Finished, as the client's
  capture saw them, and ``round_trips``: that over the link's base RTT, one decimal
  (None on a link without delay);
- QUIC only: ``client_first_bytes``: the UDP payload the client sent before the
  server's first packet (the server's budget before the client's address is validated
  is three times what it has received, RFC 9000 §8.1); ``server_flight_udp_bytes``:
  the UDP payload of the server's packets up to the datagram that completed its
  Finished; ``amplification_held``: the server's flight was more than three times the
  client's first bytes, so the server must have waited for more from the client before
  it could send the rest (an extra partial round trip).

A field a capture cannot give is None; ``decrypted`` says whether the encrypted
handshake messages were readable. tshark (Debian's 4.0) does the dissection: QUIC's
Initial packets decrypt without keys, its Handshake packets and TLS 1.3's encrypted
records need the key log.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quicbed.traces.hellos import CIPHERS, HRR_RANDOM, PRE_SHARED_KEY, grease, group_name
from quicbed.traces.tsharkfields import fields, ints

#: handshake message types (RFC 8446 4)
CLIENT_HELLO, SERVER_HELLO, ENCRYPTED_EXTENSIONS, FINISHED = 1, 2, 8, 20
CERTIFICATE, CERTIFICATE_VERIFY = 11, 15
#: the server's first flight: ServerHello up to its Finished (no NewSessionTicket)
_FLIGHT = {SERVER_HELLO, ENCRYPTED_EXTENSIONS, 13, CERTIFICATE, CERTIFICATE_VERIFY, FINISHED}
#: RFC 9000 8.1: before validating the client's address a server sends at most 3 x
AMPLIFICATION = 3

_FIELDS = (
    "frame.time_relative",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "quic.long.packet_type",
    "tls.handshake.type",
    "tls.handshake.length",
    "tls.handshake.extensions_key_share_group",
    "tls.handshake.ciphersuite",
    "tls.handshake.certificate_length",
    "tls.handshake.sig_hash_alg",
    "tls.handshake.extension.type",
    "tls.handshake.random",
    "tls.record.content_type",
)
#: the packets read: every QUIC long-header packet (the handshake's, for the byte
#: counts), every frame tshark completes a TLS handshake message in, and over TCP every
#: TLS record after the handshake's (ChangeCipherSpec, encrypted records: whether the
#: client went on after the server's flight)
_DISPLAY = (
    "tls.handshake || quic.long.packet_type"
    " || tls.record.content_type == 20 || tls.record.content_type == 23"
)
#: TLS record types that show the client went on after the server's hello
_CLIENT_ON = {20, 23}


@dataclass
class Handshake:
    """One connection's handshake (module docstring)."""

    transport: str
    client_port: int
    server_port: int
    offered_key_shares: list[int] = field(default_factory=list)
    group: int | None = None
    group_name: str | None = None
    hello_retry: bool = False
    cipher: int | None = None
    cipher_name: str | None = None
    resumed: bool | None = None
    certificates: int | None = None
    certificate_bytes: int | None = None
    signature_algorithm: int | None = None
    client_hello_bytes: int | None = None
    server_flight_bytes: int | None = None
    span_ms: float | None = None
    round_trips: float | None = None
    client_first_bytes: int | None = None
    server_flight_udp_bytes: int | None = None
    amplification_held: bool | None = None
    decrypted: bool = False
    #: TCP: whether the client sent any TLS record after the server's first packet (its
    #: Finished, its requests); False: the client left the connection before finishing
    #: its handshake (a socket it raced and dropped), None: QUIC, or no server packet
    client_continued: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Packet:
    t_ms: float
    transport: str
    src: int
    dst: int
    udp_bytes: int
    long_header: bool
    types: list[int]
    lengths: list[int]
    key_shares: list[int]
    ciphers: list[int]
    cert_lengths: list[int]
    sig_algs: list[int]
    extensions: list[int]
    randoms: list[str]
    records: list[int] = field(default_factory=list)  # TLS record content types


def _packets(out: str) -> list[_Packet]:
    """tshark's tab-separated fields (:data:`_FIELDS`), one packet per line."""
    packets = []
    for line in out.splitlines():
        cols = line.split("\t")
        if len(cols) < len(_FIELDS):
            cols += [""] * (len(_FIELDS) - len(cols))
        t, tsrc, tdst, usrc, udst, ulen, lh, types, lens, ks, cs, cl, sa, ext, rnd, rec = cols[
            : len(_FIELDS)
        ]
        udp = bool(usrc)
        if not (udp or tsrc):
            continue
        src, dst = (usrc, udst) if udp else (tsrc, tdst)
        packets.append(
            _Packet(
                t_ms=float(t) * 1000,
                transport="quic" if udp else "tcp",
                src=int(src.split(",")[0]),
                dst=int(dst.split(",")[0]),
                udp_bytes=max(0, int(ulen.split(",")[0]) - 8) if ulen else 0,
                long_header=bool(lh.strip()),
                types=ints(types),
                lengths=ints(lens),
                key_shares=ints(ks),
                ciphers=ints(cs),
                cert_lengths=ints(cl),
                sig_algs=ints(sa),
                extensions=ints(ext),
                randoms=[r for r in rnd.split(",") if r],
                records=ints(rec),
            )
        )
    return packets


def derive(packets: list[_Packet], server_ports: set[int], rtt_ms: float) -> list[Handshake]:
    """Each connection's :class:`Handshake` from its packets in capture order; a
    connection is keyed by the client's port, the side that is not a server port."""
    conns: dict[tuple[str, int], list[tuple[bool, _Packet]]] = {}
    for p in packets:
        from_server = p.src in server_ports
        client = p.dst if from_server else p.src
        if not from_server and p.dst not in server_ports:
            continue  # neither end is a server of the cell
        conns.setdefault((p.transport, client), []).append((from_server, p))
    out = []
    for (transport, client), seen in conns.items():  # in order of their first packet
        if not any(p.types or p.long_header for _, p in seen):
            continue  # records only: a connection whose handshake came before this load
        server = next(p.src if s else p.dst for s, p in seen)
        out.append(_one(transport, client, server, seen, rtt_ms))
    return out


def _one(
    transport: str, client: int, server: int, seen: list[tuple[bool, _Packet]], rtt_ms: float
) -> Handshake:
    h = Handshake(transport=transport, client_port=client, server_port=server)
    hello_t: float | None = None
    server_first_t: float | None = None
    flight: list[int] = []
    flight_done = False
    client_first = 0
    server_udp = 0
    for from_server, p in seen:
        if from_server and server_first_t is None:
            server_first_t = p.t_ms
        if not from_server and server_first_t is None:
            client_first += p.udp_bytes
        if from_server and not flight_done:
            server_udp += p.udp_bytes
        if (
            not from_server
            and server_first_t is not None
            and (p.types or _CLIENT_ON & set(p.records))
        ):
            h.client_continued = True
        for i, kind in enumerate(p.types):
            size = p.lengths[i] if i < len(p.lengths) else 0
            if not from_server and kind == CLIENT_HELLO and hello_t is None:
                hello_t = p.t_ms
                h.client_hello_bytes = size
                h.offered_key_shares = [g for g in p.key_shares if not grease(g)]
            elif from_server and kind == SERVER_HELLO:
                if HRR_RANDOM.hex() in p.randoms:
                    h.hello_retry = True
                    continue
                h.group = p.key_shares[-1] if p.key_shares else None
                h.group_name = group_name(h.group)
                h.cipher = p.ciphers[-1] if p.ciphers else None
                h.cipher_name = CIPHERS.get(h.cipher or -1)
                h.resumed = PRE_SHARED_KEY in p.extensions
                flight.append(size)
            elif from_server and kind in _FLIGHT and not flight_done:
                flight.append(size)
                h.decrypted = True
                if kind == CERTIFICATE:
                    h.certificates = len(p.cert_lengths)
                    h.certificate_bytes = sum(p.cert_lengths)
                elif kind == CERTIFICATE_VERIFY and p.sig_algs:
                    h.signature_algorithm = p.sig_algs[-1]
                elif kind == FINISHED:
                    flight_done = True
            elif not from_server and kind == FINISHED and hello_t is not None:
                h.span_ms = round(p.t_ms - hello_t, 2)
    if flight_done:
        h.server_flight_bytes = sum(flight)
        if h.certificates is None:
            h.certificates, h.certificate_bytes = 0, 0  # resumed: no chain sent
    if h.span_ms is not None and rtt_ms > 0:
        h.round_trips = round(h.span_ms / rtt_ms, 1)
    if transport == "tcp" and server_first_t is not None and not h.client_continued:
        h.client_continued = False
    if transport == "quic" and server_first_t is not None:
        h.client_first_bytes = client_first
        if flight_done:
            h.server_flight_udp_bytes = server_udp
            h.amplification_held = server_udp > AMPLIFICATION * client_first
    return h


def read(
    capture: Path, keylog: Path | None, server_ports: set[int], rtt_ms: float
) -> list[Handshake]:
    """Every connection's handshake in one load's capture (``capture.pcap`` or
    ``.pcap.gz``), decrypted with ``keylog`` where given."""
    out = "\n".join(fields(capture, keylog, _DISPLAY, _FIELDS, timeout=300))
    return derive(_packets(out), server_ports, rtt_ms)


def summary(handshakes: list[dict[str, Any]]) -> dict[str, Any]:
    """What a load's run row keeps: the groups its connections chose, how many were
    resumed or retried, and the first (the page's own) connection whole."""
    groups = sorted({h["group_name"] for h in handshakes if h.get("group_name")})
    return {
        "connections": len(handshakes),
        "groups": groups,
        "resumed": sum(1 for h in handshakes if h.get("resumed")),
        "hello_retries": sum(1 for h in handshakes if h.get("hello_retry")),
        "amplification_held": sum(1 for h in handshakes if h.get("amplification_held")),
        "first": handshakes[0] if handshakes else None,
    }
