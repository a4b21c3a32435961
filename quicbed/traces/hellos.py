"""The TLS hellos of each connection in a capture, read in-process: the ClientHello's
key shares and size, the ServerHello's group, cipher and resumption, and whether a
HelloRetryRequest came first.

TCP's hellos are cleartext; QUIC's travel in Initial packets, opened here with the keys
RFC 9001 5.2 derives from the client's first Destination Connection ID (QUIC v1). It
reads what a few packets per connection hold, in milliseconds, so a load's check of its
key exchange (quicbed.settings.keyexchange) needs no program per load. The decrypted
handshake (certificates, flights, round trips) of a level-full capture is
quicbed.traces.handshake's, read by tshark with the key log; the tests read one capture
both ways.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from quicbed import pcap

#: names of the groups quicbed's browsers and servers offer or choose (IANA id -> name)
GROUPS = {
    23: "secp256r1",
    24: "secp384r1",
    25: "secp521r1",
    29: "x25519",
    30: "x448",
    4587: "secp256r1mlkem768",
    4588: "x25519mlkem768",
    25497: "x25519kyber768draft00",
}
#: TLS 1.3 cipher suites (RFC 8446 B.4)
CIPHERS = {
    0x1301: "TLS_AES_128_GCM_SHA256",
    0x1302: "TLS_AES_256_GCM_SHA384",
    0x1303: "TLS_CHACHA20_POLY1305_SHA256",
}
#: the ServerHello random that marks a HelloRetryRequest (RFC 8446 4.1.3)
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
#: QUIC v1's Initial salt (RFC 9001 5.2)
INITIAL_SALT = bytes.fromhex("38762cf7f55934b34d179ae6a4c80cadccbb7f0a")
#: TLS extensions read: key_share, and pre_shared_key (accepted: a resumption)
_KEY_SHARE, PRE_SHARED_KEY = 0x0033, 0x0029


def group_name(group: int | None) -> str | None:
    return None if group is None else GROUPS.get(group, str(group))


def grease(value: int) -> bool:
    """A GREASE value (RFC 8701: 0x?A?A), offered only to keep servers tolerant."""
    return value & 0x0F0F == 0x0A0A


# --- the hellos -------------------------------------------------------------------------
@dataclass
class Hello:
    """One connection's hellos as the client's capture saw them."""

    transport: str  # tcp or quic
    client_port: int
    offered: list[int] | None = None  # the first ClientHello's key shares (no GREASE)
    group: int | None = None  # the ServerHello's
    group_name: str | None = None
    hello_retry: bool = False
    cipher: str | None = None
    resumed: bool | None = None
    client_hello_bytes: int | None = None
    #: the server's address: which origin of a replayed page (each at an address of its
    #: own, quicbed.replay.serve) the connection was to, where a TCP ClientHello over two
    #: segments leaves its server name unread
    server_ip: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Conn:
    hello: Hello
    dcid: bytes | None = None  # QUIC: the client's first Destination Connection ID
    crypto: dict[str, dict[int, bytes]] = field(default_factory=lambda: {"c": {}, "s": {}})


def _handshake(msg: bytes, hello: Hello, from_server: bool) -> None:
    """Read one ClientHello or ServerHello into ``hello``; of a message cut short (a
    ClientHello over two TCP segments) only its size."""
    if len(msg) < 4:
        return
    kind, size = msg[0], int.from_bytes(msg[1:4], "big")
    body = msg[4 : 4 + size]
    if kind == 1 and not from_server and hello.client_hello_bytes is None:
        hello.client_hello_bytes = size
        if len(body) < size:
            return
    try:
        pos = 2 + 32  # legacy_version, random
        random = body[2:34]
        sid = body[pos]
        pos += 1 + sid
        if kind == 1 and not from_server and hello.offered is None:
            suites = struct.unpack("!H", body[pos : pos + 2])[0]
            pos += 2 + suites
            pos += 1 + body[pos]  # compression methods
            for ext, data in _extensions(body, pos):
                if ext == _KEY_SHARE:
                    hello.offered = [g for g in _client_shares(data) if not grease(g)]
        elif kind == 2 and from_server and hello.cipher is None:  # the first (after a retry)
            cipher = struct.unpack("!H", body[pos : pos + 2])[0]
            pos += 3  # cipher suite, compression
            if random == HRR_RANDOM:
                hello.hello_retry = True
                return
            if len(body) < size:
                return
            hello.cipher = CIPHERS.get(cipher, f"0x{cipher:04x}")
            hello.resumed = False
            for ext, data in _extensions(body, pos):
                if ext == _KEY_SHARE and len(data) >= 2:
                    hello.group = struct.unpack("!H", data[:2])[0]
                    hello.group_name = group_name(hello.group)
                elif ext == PRE_SHARED_KEY:
                    hello.resumed = True
    except (IndexError, struct.error):
        return


def _hello_record(payload: bytes) -> bool:
    """A TCP segment that begins with a TLS record holding a ClientHello or ServerHello:
    a handshake record (22) of version 3.1 or 3.3 whose first message is of type 1 or 2.
    The capture's filter keeps every segment whose payload begins with byte 22, which
    about one segment in 256 of a long transfer does by chance."""
    return (
        len(payload) >= 9
        and payload[0] == 0x16
        and payload[1] == 3
        and payload[2] in (1, 3)
        and payload[5] in (1, 2)
    )


def _extensions(body: bytes, pos: int) -> list[tuple[int, bytes]]:
    total = struct.unpack("!H", body[pos : pos + 2])[0]
    pos, end, out = pos + 2, pos + 2 + total, []
    while pos + 4 <= min(end, len(body)):
        ext, size = struct.unpack("!HH", body[pos : pos + 4])
        out.append((ext, body[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


def _client_shares(data: bytes) -> list[int]:
    out, pos = [], 2
    while pos + 4 <= len(data):
        group, size = struct.unpack("!HH", data[pos : pos + 4])
        out.append(group)
        pos += 4 + size
    return out


def _tcp(ip: bytes) -> tuple[int, int, bytes] | None:
    ihl = (ip[0] & 0x0F) * 4
    seg = ip[ihl:]
    if len(seg) < 20:
        return None
    sport, dport = struct.unpack("!HH", seg[:4])
    total = struct.unpack("!H", ip[2:4])[0]
    return sport, dport, seg[(seg[12] >> 4) * 4 : total - ihl]


def _udp(ip: bytes) -> tuple[int, int, bytes] | None:
    ihl = (ip[0] & 0x0F) * 4
    dg = ip[ihl:]
    if len(dg) < 8:
        return None
    sport, dport, length = struct.unpack("!HHH", dg[:6])
    return sport, dport, dg[8:length]


def hellos(data: bytes, port: int) -> list[Hello]:
    """Every connection's hellos in a capture (pcap bytes) of server ``port``, in the
    order of their first packet; TCP and QUIC v1 (:mod:`quicbed.pcap`)."""
    conns: dict[tuple[str, str, int], _Conn] = {}
    for p in pcap.packets(data):
        ip = p.ip
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] not in (6, 17):
            continue
        parts = _tcp(ip) if ip[9] == 6 else _udp(ip)
        if parts is None:
            continue
        sport, dport, payload = parts
        if port not in (sport, dport) or not payload:
            continue
        from_server = sport == port
        transport = "tcp" if ip[9] == 6 else "quic"
        # by the server's address too: Linux gives two connections to two addresses (a
        # replayed page's origins) the same client port when it likes
        server = socket.inet_ntoa(ip[12:16] if from_server else ip[16:20])
        client = dport if from_server else sport
        key = (transport, server, client)
        conn = conns.setdefault(key, _Conn(Hello(transport, client, server_ip=server)))
        if transport == "tcp":
            if _hello_record(payload):
                size = struct.unpack("!H", payload[3:5])[0]
                _handshake(payload[5 : 5 + size], conn.hello, from_server)
        else:
            _quic_datagram(payload, conn, from_server)
    for conn in conns.values():  # QUIC: each Initial CRYPTO stream's messages in turn
        for side, chunks in conn.crypto.items():
            stream, pos = _contiguous(chunks), 0
            while pos + 4 <= len(stream):  # after a HelloRetryRequest, the second hellos
                _handshake(stream[pos:], conn.hello, side == "s")
                pos += 4 + int.from_bytes(stream[pos + 1 : pos + 4], "big")
    # a connection of which only later packets were seen (the last load's, closing)
    return [c.hello for c in conns.values() if c.hello.client_hello_bytes or c.hello.cipher]


# --- QUIC Initial packets (RFC 9000 17.2.2, RFC 9001 5) ----------------------------------
def _hkdf_extract(salt: bytes, ikm: bytes) -> bytes:
    h = hmac.HMAC(salt, hashes.SHA256())
    h.update(ikm)
    return h.finalize()


def _expand_label(secret: bytes, label: str, length: int) -> bytes:
    full = b"tls13 " + label.encode()
    info = struct.pack("!HB", length, len(full)) + full + b"\x00"
    out, block, i = b"", b"", 1
    while len(out) < length:
        h = hmac.HMAC(secret, hashes.SHA256())
        h.update(block + info + bytes([i]))
        block = h.finalize()
        out += block
        i += 1
    return out[:length]


def initial_keys(dcid: bytes, side: str) -> tuple[bytes, bytes, bytes]:
    """(key, iv, hp) of the client's (``c``) or the server's (``s``) Initial packets."""
    secret = _expand_label(
        _hkdf_extract(INITIAL_SALT, dcid), "client in" if side == "c" else "server in", 32
    )
    return (
        _expand_label(secret, "quic key", 16),
        _expand_label(secret, "quic iv", 12),
        _expand_label(secret, "quic hp", 16),
    )


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    size = 1 << (first >> 6)
    value = first & 0x3F
    for b in buf[pos + 1 : pos + size]:
        value = (value << 8) | b
    return value, pos + size


def _quic_datagram(dg: bytes, conn: _Conn, from_server: bool) -> None:
    """The Initial packets of one datagram (coalesced packets in turn) into the
    connection's CRYPTO chunks; other packets are skipped by their Length."""
    pos = 0
    while pos + 7 < len(dg) and dg[pos] & 0x80:  # long header
        try:
            first = dg[pos]
            version = struct.unpack("!I", dg[pos + 1 : pos + 5])[0]
            q = pos + 5
            dcid = dg[q + 1 : q + 1 + dg[q]]
            q += 1 + dg[q]
            q += 1 + dg[q]  # source connection ID
            kind = (first >> 4) & 0x03
            if version != 1:
                return
            if kind == 0:  # Initial: a token first
                token, q = _varint(dg, q)
                q += token
            elif kind == 3:  # Retry: no Length, the rest of the datagram
                return
            length, q = _varint(dg, q)
        except IndexError:
            return
        end = q + length
        if kind == 0:
            if not from_server and conn.dcid is None:
                conn.dcid = dcid
            if conn.dcid is not None:
                _open_initial(dg[pos:end], q - pos, conn, "s" if from_server else "c")
        pos = end


def _open_initial(packet: bytes, pn_at: int, conn: _Conn, side: str) -> None:
    assert conn.dcid is not None
    key, iv, hp = initial_keys(conn.dcid, side)
    sample = packet[pn_at + 4 : pn_at + 20]
    if len(sample) < 16:
        return
    enc = Cipher(algorithms.AES(hp), modes.ECB()).encryptor()
    mask = enc.update(sample) + enc.finalize()
    first = packet[0] ^ (mask[0] & 0x0F)
    pn_len = (first & 0x03) + 1
    pn_bytes = bytes(b ^ m for b, m in zip(packet[pn_at : pn_at + pn_len], mask[1:], strict=False))
    header = bytes([first]) + packet[1:pn_at] + pn_bytes
    nonce = (int.from_bytes(iv, "big") ^ int.from_bytes(pn_bytes, "big")).to_bytes(12, "big")
    try:
        plain = AESGCM(key).decrypt(nonce, packet[pn_at + pn_len :], header)
    except InvalidTag:  # not ours, or cut: nothing to read from it
        return
    _frames(plain, conn.crypto[side])


def _frames(plain: bytes, chunks: dict[int, bytes]) -> None:
    """CRYPTO frames of an Initial packet's payload into ``chunks`` (offset -> data);
    PADDING, PING and ACK are skipped, anything else ends the reading."""
    pos = 0
    while pos < len(plain):
        kind = plain[pos]
        if kind in (0x00, 0x01):
            pos += 1
        elif kind in (0x02, 0x03):
            pos += 1
            _, pos = _varint(plain, pos)  # largest acknowledged
            _, pos = _varint(plain, pos)  # delay
            ranges, pos = _varint(plain, pos)
            _, pos = _varint(plain, pos)  # first range
            for _ in range(2 * ranges):
                _, pos = _varint(plain, pos)
            if kind == 0x03:
                for _ in range(3):
                    _, pos = _varint(plain, pos)
        elif kind == 0x06:
            offset, pos = _varint(plain, pos + 1)
            size, pos = _varint(plain, pos)
            chunks[offset] = plain[pos : pos + size]
            pos += size
        else:
            return


def _contiguous(chunks: dict[int, bytes]) -> bytes:
    out = b""
    for offset in sorted(chunks):
        if offset > len(out):
            break
        out += chunks[offset][len(out) - offset :]
    return out
