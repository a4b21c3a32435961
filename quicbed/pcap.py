"""The IPv4 packets of a pcap file, read in-process: the per-load captures that verify a
setting from the wire (TCP options' SYNs, the key exchange's hellos) are a few packets
each, and a program per load (tshark) would cost more than the load's own checks.

pcap only (tcpdump's ``-w``), either byte order, over Ethernet (802.1Q tags skipped),
Linux cooked (v1, v2) or raw IP; pcapng is refused by name."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from quicbed.errors import QuicbedError

#: link types: how many bytes precede the IP header and where the EtherType is
_LINKTYPES = {1: "ethernet", 101: "raw", 12: "raw", 113: "sll", 276: "sll2"}
#: a pcap file's header, and each record's
FILE_HEADER, RECORD_HEADER = 24, 16


@dataclass(frozen=True)
class Packet:
    """One captured IPv4 packet: when (seconds, the capture's clock) and its bytes."""

    t_s: float
    ip: bytes


def packets(data: bytes) -> Iterator[Packet]:
    """Every whole IPv4 packet of ``data`` (a pcap file, or the part of one written so
    far: a record cut short at the end is left for the next read)."""
    if len(data) < FILE_HEADER:
        return
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = ">"
    else:
        raise QuicbedError(f"not a pcap file (magic {magic.hex()}; pcapng is not read here)")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    link = _LINKTYPES.get(struct.unpack(order + "I", data[20:24])[0] & 0x0FFFFFFF)
    if link is None:
        raise QuicbedError("pcap link type not Ethernet, Linux cooked or raw IP")
    pos = FILE_HEADER
    while pos + RECORD_HEADER <= len(data):
        sec, frac, incl = struct.unpack(order + "III", data[pos : pos + 12])
        end = pos + RECORD_HEADER + incl
        if end > len(data):
            return
        ip = _ip_payload(data[pos + RECORD_HEADER : end], link)
        pos = end
        if ip is not None:
            yield Packet(sec + frac / (1e9 if nano else 1e6), ip)


def _ip_payload(frame: bytes, link: str) -> bytes | None:
    if link == "raw":
        return frame
    if link == "sll2":
        etype, start = frame[0:2], 20
    elif link == "sll":
        etype, start = frame[14:16], 16
    else:
        etype, start = frame[12:14], 14
        while etype == b"\x81\x00" and len(frame) >= start + 4:  # 802.1Q tags
            etype, start = frame[start + 2 : start + 4], start + 4
    return frame[start:] if etype == b"\x08\x00" else None
