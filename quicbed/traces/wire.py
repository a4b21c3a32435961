"""A load's transport timeline from the wire: what every connection delivered, lost,
re-sent and measured, read from the client's capture whatever the stack wrote.

A stack's own log (quic-go's and quiche's qlog, the kernel's tcp_probe for TCP) is the
sender's view, but Envoy's QUICHE, Firefox's neqo and gQUIC write none that quicbed
keeps, and a stack's log may itself be wrong. At ``--traces full`` every load keeps
its capture and its key log (quicbed.traces.capture), so the same facts can be taken
from the packets for every stack. :func:`read` decrypts the capture with tshark and
gives, per connection (keyed by the client's port) and as sample rows in the shape of
quicbed.traces.tracer.SAMPLE_COLUMNS (``source`` = ``wire``):

- ``delivered_bytes``: new application bytes from the server that reached the client
  (QUIC: STREAM frame bytes; TCP: payload), at every packet the client sends (it
  acknowledges what arrived). Bytes that arrived twice count once;
- losses, from the receiver's side of the bottleneck, by the server's data: a packet
  whose bytes fill a hole below the highest byte received is **re-sent data** (a
  ``lost`` row, timed when the hole first appeared, ``bytes`` = the hole's bytes it
  filled) when it was sent after the packets past the hole (a higher QUIC packet
  number; for TCP a higher IPv4 identification, which Linux counts up per packet of a
  connection), or **reordered** when it was sent before them (counted, no row); a
  packet whose bytes had all arrived before is a **spurious** re-send (a ``spurious``
  row: the sender declared lost what was delivered). QUIC only: ``missing_packets``,
  the server's 1-RTT packet numbers never seen (an upper bound on packets lost on
  the way down: quic-go and others skip numbers on purpose);
- RTT samples (``rtt_sample_ms``, with ``srtt_ms`` smoothed as RFC 9002 5.3 does,
  1/8 weight): QUIC, from the server's ACK frames that newly acknowledge a client
  packet, less the ACK delay the server reports (exponent 3, the default: quicbed's
  servers keep it); TCP, from timestamps: a client segment first carrying TSval V to
  the first server segment echoing V. Either spans client -> server -> client as the
  client sees it; the server's own wait is in the TCP sample (the ACK delay takes it
  out of QUIC's);
- ECN, per connection: the server's packets that arrived ECT(0), ECT(1) and CE, and
  what the client echoed (QUIC: the largest ECN-CE count in its ACK frames; TCP:
  client segments with ECE set) and the server's CWR answers (TCP);
- QUIC flow control: the server's DATA_BLOCKED and STREAM_DATA_BLOCKED frames (a
  ``blocked`` row each: the sender had data the client's windows held back) and the
  client's MAX_DATA and MAX_STREAM_DATA updates.

**Packets tshark cannot decrypt.** quic-go updates its 1-RTT keys after its first 100
packets, to prove the peer can. Debian's tshark 4.0 follows an update in order, but
where packets of both key phases arrive interleaved (reordering around the update)
it loses the keys and decrypts none of the connection's later packets. Deep reordering
alone (the step jitter at 50 Mbit/s: hundreds of packets) also leaves tshark a few runs
of 4-8 packets it cannot open, with no key update (seen on Envoy's QUICHE; why is not
known). Those packets are counted (``undecrypted``): a timeline missing more than
:data:`PARTIAL_SHARE` of a connection's packets is **partial** and explain does not
take it for a load's samples (it says why); below that its counts are short by those
few packets, and explain says so.

**gQUIC** (Chromium 72's own QUIC crypto; its keys are in no key log) shows only its
packet numbers and sizes: its timeline has delivered bytes (the server's UDP payload of
packets seen the first time, re-sent data included), losses (numbers skipped and never
sent, timed when the gap appeared) and reordering; no RTT, no spurious losses, no ECN
echo, transport ``gquic``.

What the client's capture cannot give: the sender's congestion window and bytes in
flight (no sample carries them), and packets lost on the way *up* (the client sees
only what it sent). ACK frames of datagrams that coalesce long-header packets are
left out (tshark's field lists do not say which packet of the datagram an ACK frame
belongs to); they are the handshake's, whose timing quicbed.traces.handshake gives.

:func:`cross_check` compares the wire's counts with a stack's own log of the same
load, so neither is trusted alone (docs/explain.md states the rule).
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from quicbed.traces.tsharkfields import fields, ints

#: IP ECN codepoints (RFC 3168)
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3
#: QUIC frame types: ACK (2; 3 with ECN counts) and STREAM (0x08-0x0f)
ACK_FRAMES = (2, 3)
STREAM_FRAMES = range(8, 16)
#: a sender held by flow control says so (DATA_BLOCKED, STREAM_DATA_BLOCKED; RFC 9000
#: 19.12-13); a receiver opens its windows with MAX_DATA and MAX_STREAM_DATA (19.9-10)
BLOCKED_FRAMES = (0x14, 0x15)
WINDOW_FRAMES = (0x10, 0x11)
#: the share of a connection's packets tshark may fail to decrypt before its timeline
#: is too partial to stand for the load (module docstring)
PARTIAL_SHARE = 0.01
#: QUIC's default ack_delay_exponent (RFC 9000 18.2): ACK delays are in 8 us units
ACK_DELAY_UNIT_MS = 8 / 1000
#: RFC 9002 5.3's smoothing weight of a new RTT sample
SRTT_WEIGHT = 1 / 8

_FIELDS = (
    "frame.time_epoch",
    "ip.dsfield.ecn",
    "ip.id",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "gquic.packet_number",
    "quic.long.packet_type",
    "quic.packet_number",
    "quic.frame_type",
    "quic.ack.largest_acknowledged",
    "quic.ack.ack_delay",
    "quic.ack.ecn_ce_count",
    "quic.stream.stream_id",
    "quic.stream.off",
    "quic.stream.len",
    "quic.stream.offset",
    "quic.stream.length",
    "quic.stream_data",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.len",
    "tcp.flags.ack",
    "tcp.flags.ece",
    "tcp.flags.cwr",
    "tcp.options.timestamp.tsval",
    "tcp.options.timestamp.tsecr",
)


@dataclass
class Conn:
    """One connection's counts from the wire (module docstring)."""

    transport: str
    client_port: int
    server_port: int
    server_packets: int = 0
    client_packets: int = 0
    delivered_bytes: int = 0
    #: packets that re-sent data lost on the way down, and that data's bytes
    lost: int = 0
    lost_bytes: int = 0
    reordered: int = 0
    #: packets whose every byte had arrived before
    spurious: int = 0
    spurious_bytes: int = 0
    missing_packets: int | None = None
    #: QUIC 1-RTT packets tshark could not decrypt (module docstring): the counts above
    #: leave their data out, so a connection with any is partial
    undecrypted: int = 0
    rtt_samples: int = 0
    rtt_min_ms: float | None = None
    rtt_median_ms: float | None = None
    ect0: int = 0
    ect1: int = 0
    ce: int = 0
    ce_echoed: int = 0
    cwr: int | None = None
    #: QUIC: the server's DATA_BLOCKED and STREAM_DATA_BLOCKED frames (held by the
    #: client's flow-control windows) and the client's MAX_DATA and MAX_STREAM_DATA
    blocked_frames: int | None = None
    window_updates: int | None = None
    first_ms: float | None = None
    last_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Wire:
    """A load's connections and its sample rows, in capture order."""

    conns: list[Conn] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def partial(self) -> bool:
        """More than :data:`PARTIAL_SHARE` of some connection's packets undecrypted."""
        return any(is_partial(c.as_dict()) for c in self.conns)

    def summary(self) -> dict[str, Any]:
        """What a run row keeps: totals over the load's connections, and each one."""
        total = {
            k: sum(getattr(c, k) for c in self.conns)
            for k in (
                "delivered_bytes",
                "lost",
                "lost_bytes",
                "reordered",
                "spurious",
                "ce",
                "undecrypted",
            )
        }
        return total | {"connections": len(self.conns), "all": [c.as_dict() for c in self.conns]}


def is_partial(conn: dict[str, Any]) -> bool:
    """Whether a connection's counts (:class:`Conn` as a dict) miss more than
    :data:`PARTIAL_SHARE` of its packets to tshark."""
    packets = (conn.get("server_packets") or 0) + (conn.get("client_packets") or 0)
    return (conn.get("undecrypted") or 0) > PARTIAL_SHARE * max(packets, 1)


class _Stream:
    """The bytes of one server stream that reached the client, and its holes."""

    def __init__(self) -> None:
        self.have: list[tuple[int, int]] = []  # disjoint, sorted [a, b)
        self.front = 0
        self.holes: list[tuple[int, int, float]] = []  # [a, b) missing since t

    def _overlap(self, a: int, b: int) -> int:
        i = max(0, bisect.bisect_right(self.have, (a, a)) - 1)
        got = 0
        for x, y in self.have[i:]:
            if x >= b:
                break
            got += max(0, min(b, y) - max(a, x))
        return got

    def arrive(self, a: int, b: int, t: float) -> tuple[int, list[tuple[float, int]]]:
        """Add bytes [a, b) arriving at ``t``: how many were new, and the holes they
        filled (when each appeared, bytes filled)."""
        if b <= a:
            return 0, []
        new = (b - a) - self._overlap(a, b)
        filled: list[tuple[float, int]] = []
        keep: list[tuple[int, int, float]] = []
        for x, y, since in self.holes:
            lo, hi = max(a, x), min(b, y)
            if hi <= lo:
                keep.append((x, y, since))
                continue
            filled.append((since, hi - lo))
            if x < lo:
                keep.append((x, lo, since))
            if hi < y:
                keep.append((hi, y, since))
        if a > self.front:
            keep.append((self.front, a, t))
        self.holes = sorted(keep)
        self.front = max(self.front, b)
        merged: list[tuple[int, int]] = []
        for x, y in sorted([*self.have, (a, b)]):
            if merged and x <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], y))
            else:
                merged.append((x, y))
        self.have = merged
        return new, filled


@dataclass
class _Side:
    """What one connection's reader keeps between packets."""

    conn: Conn
    streams: dict[int, _Stream] = field(default_factory=dict)
    newest_sent: int = -1  # the highest packet number (QUIC) or unwrapped IP id (TCP)
    last_ip_id: int | None = None
    last_order: int = 0
    seen_pns: set[int] = field(default_factory=set)
    client_sent: dict[int, float] = field(default_factory=dict)  # QUIC pn / TCP TSval -> t
    largest_acked: int = -1
    echoed: set[int] = field(default_factory=set)
    srtt: float | None = None
    rtts: list[float] = field(default_factory=list)
    isn: int | None = None
    gaps: dict[int, float] = field(default_factory=dict)  # gQUIC: pn -> when skipped


def _split(value: str) -> list[str]:
    return [v for v in value.split(",")] if value else []


def read(capture: Path, keylog: Path | None, server_ports: set[int], began_wall: float) -> Wire:
    """The wire timeline of one load's capture (``.pcap`` or ``.pcap.gz``), decrypted
    with ``keylog``; sample times in ms since ``began_wall`` (the load's t_ms = 0)."""
    lines = fields(capture, keylog, "quic || gquic || tcp", _FIELDS, timeout=600)
    return derive(lines, server_ports, began_wall)


def read_stored(root: Path, files: dict[str, str], ports: set[int], began_wall: float) -> Wire:
    """:func:`read` of a stored load: its trace files (``capture``, ``keys`` where kept)
    relative to the results folder ``root``."""
    keys = root / files["keys"] if "keys" in files else None
    return read(root / files["capture"], keys, ports, began_wall)


def derive(lines: list[str], server_ports: set[int], began_wall: float) -> Wire:
    """:class:`Wire` from tshark's tab-separated :data:`_FIELDS`, a packet per line."""
    sides: dict[tuple[str, int], _Side] = {}
    wire = Wire()
    for line in lines:
        cols = line.split("\t")
        cols += [""] * (len(_FIELDS) - len(cols))
        row = dict(zip(_FIELDS, cols, strict=False))
        udp = bool(row["udp.srcport"])
        src = row["udp.srcport"] if udp else row["tcp.srcport"]
        dst = row["udp.dstport"] if udp else row["tcp.dstport"]
        if not src or not dst:
            continue
        s, d = int(src.split(",")[0]), int(dst.split(",")[0])
        from_server = s in server_ports
        if not from_server and d not in server_ports:
            continue
        client, server = (d, s) if from_server else (s, d)
        gquic = udp and bool(row["gquic.packet_number"])
        key = ("gquic" if gquic else "quic" if udp else "tcp", client)
        side = sides.get(key)
        if side is None:
            side = sides[key] = _Side(Conn(key[0], client, server))
            wire.conns.append(side.conn)
        t = round((float(row["frame.time_epoch"]) - began_wall) * 1000, 3)
        c = side.conn
        c.first_ms = t if c.first_ms is None else c.first_ms
        c.last_ms = t
        if from_server:
            c.server_packets += 1
            ecn = ints(row["ip.dsfield.ecn"])
            if ecn:
                c.ect0 += ecn[0] == ECT0
                c.ect1 += ecn[0] == ECT1
                c.ce += ecn[0] == CE
        else:
            c.client_packets += 1
        if gquic:
            _gquic(side, row, from_server, t, wire.samples)
        elif udp:
            _quic(side, row, from_server, t, wire.samples)
        else:
            _tcp(side, row, from_server, t, wire.samples)
    for side in sides.values():
        c = side.conn
        if side.rtts:
            c.rtt_samples = len(side.rtts)
            c.rtt_min_ms = round(min(side.rtts), 3)
            c.rtt_median_ms = round(statistics.median(side.rtts), 3)
        if c.transport != "tcp" and side.seen_pns:
            first = 0 if c.transport == "quic" else min(side.seen_pns)
            c.missing_packets = max(side.seen_pns) + 1 - first - len(side.seen_pns)
        if c.transport == "gquic":  # a number never seen: lost when its gap appeared
            for pn, since in sorted(side.gaps.items()):
                if pn not in side.seen_pns:
                    c.lost += 1
                    wire.samples.append(_row(side, since, "lost"))
    wire.samples.sort(key=lambda r: r["t_ms"])
    return wire


def _row(side: _Side, t: float, event: str, **values: Any) -> dict[str, Any]:
    conn = str(side.conn.client_port)
    return {"t_ms": t, "event": event, "conn": conn, "source": "wire"} | values


def _rtt(side: _Side, sample: float, t: float, rows: list[dict[str, Any]]) -> None:
    if sample <= 0:
        return
    side.rtts.append(sample)
    side.srtt = sample if side.srtt is None else side.srtt + SRTT_WEIGHT * (sample - side.srtt)
    rows.append(
        _row(
            side,
            t,
            "sample",
            rtt_sample_ms=round(sample, 3),
            srtt_ms=round(side.srtt, 3),
            delivered_bytes=side.conn.delivered_bytes,
        )
    )


def _data(
    side: _Side,
    ranges: list[tuple[int, int, int]],
    sent_after: bool,
    t: float,
    rows: list[dict[str, Any]],
) -> None:
    """One server packet's data (stream, start, end): new bytes, holes it filled
    (re-sent when ``sent_after`` the packets past the hole, else reordered) or nothing
    new at all (spurious)."""
    c = side.conn
    total = new = 0
    filled: list[tuple[float, int]] = []
    for sid, a, b in ranges:
        n, f = side.streams.setdefault(sid, _Stream()).arrive(a, b, t)
        total += b - a
        new += n
        filled += f
    if total == 0:
        return
    c.delivered_bytes += new
    if new == 0:
        c.spurious += 1
        c.spurious_bytes += total
        rows.append(_row(side, t, "spurious", bytes=total))
    elif filled and sent_after:
        c.lost += 1
        c.lost_bytes += sum(n for _, n in filled)
        for since, n in filled:
            rows.append(_row(side, since, "lost", bytes=n))
    elif filled:
        c.reordered += 1


def _stream_ranges(row: dict[str, str]) -> list[tuple[int, int, int]]:
    """The STREAM frames of a packet as (stream, start, end): a frame without its
    offset starts at 0, one without its length runs to the end of the packet (its
    data's length says how far)."""
    ids = ints(row["quic.stream.stream_id"])
    offs, lens = _split(row["quic.stream.off"]), _split(row["quic.stream.len"])
    offsets, lengths = ints(row["quic.stream.offset"]), ints(row["quic.stream.length"])
    data = _split(row["quic.stream_data"])
    out = []
    oi = li = 0
    for i, sid in enumerate(ids):
        start = 0
        if i < len(offs) and offs[i] == "1" and oi < len(offsets):
            start, oi = offsets[oi], oi + 1
        if i < len(lens) and lens[i] == "1" and li < len(lengths):
            n, li = lengths[li], li + 1
        else:
            n = len(data[i]) // 2 if i < len(data) else 0
        out.append((sid, start, start + n))
    return out


def _quic(side: _Side, row: dict[str, str], from_server: bool, t: float, rows: list[Any]) -> None:
    long_types = ints(row["quic.long.packet_type"])
    pns = ints(row["quic.packet_number"])
    # long-header packets come first in a datagram; a short (1-RTT) one can only be last
    short_pn = pns[-1] if len(pns) > len(long_types) else None
    only_short = not long_types
    if only_short and short_pn is not None and not row["quic.frame_type"]:
        side.conn.undecrypted += 1  # its header read, its payload not: no frames
        return
    frames = ints(row["quic.frame_type"])
    c = side.conn
    if from_server:
        blocked = sum(1 for f in frames if f in BLOCKED_FRAMES)
        c.blocked_frames = (c.blocked_frames or 0) + blocked
        if blocked:
            rows.append(_row(side, t, "blocked", delivered_bytes=c.delivered_bytes))
        if short_pn is not None:
            side.seen_pns.add(short_pn)
        ranges = _stream_ranges(row)
        if ranges:
            sent_after = short_pn is None or short_pn > side.newest_sent
            _data(side, ranges, sent_after, t, rows)
        if short_pn is not None:
            side.newest_sent = max(side.newest_sent, short_pn)
        if only_short:
            delays = ints(row["quic.ack.ack_delay"])
            for i, largest in enumerate(ints(row["quic.ack.largest_acknowledged"])):
                if largest > side.largest_acked and largest in side.client_sent:
                    delay = delays[i] * ACK_DELAY_UNIT_MS if i < len(delays) else 0.0
                    _rtt(side, t - side.client_sent[largest] - delay, t, rows)
                side.largest_acked = max(side.largest_acked, largest)
        return
    if short_pn is not None:
        side.client_sent.setdefault(short_pn, t)
    c.window_updates = (c.window_updates or 0) + sum(1 for f in frames if f in WINDOW_FRAMES)
    ce = ints(row["quic.ack.ecn_ce_count"])
    if ce:
        side.conn.ce_echoed = max(side.conn.ce_echoed, max(ce))
    if any(f in ACK_FRAMES for f in frames):
        rows.append(_row(side, t, "sample", delivered_bytes=side.conn.delivered_bytes))


def _gquic(side: _Side, row: dict[str, str], from_server: bool, t: float, rows: list[Any]) -> None:
    """gQUIC (Chromium 72's QUIC crypto, not TLS: no key log opens it): only its
    packet numbers and sizes are in the clear. Delivered bytes are the server's UDP
    payload of packets seen for the first time (re-sent data included: it cannot be
    told apart); a number the server skipped and never sent later is a loss, timed
    when the gap appeared; no RTT, no spurious losses."""
    pns = ints(row["gquic.packet_number"])
    if not pns:
        return
    pn = pns[0]
    if not from_server:
        rows.append(_row(side, t, "sample", delivered_bytes=side.conn.delivered_bytes))
        return
    if pn in side.seen_pns:
        return
    if pn < side.newest_sent:
        side.conn.reordered += 1
    for gap in range(side.newest_sent + 1, pn) if side.seen_pns else ():  # gQUIC counts from 1
        side.gaps.setdefault(gap, t)
    side.seen_pns.add(pn)
    side.newest_sent = max(side.newest_sent, pn)
    size = ints(row["udp.length"]) if "udp.length" in row else []
    side.conn.delivered_bytes += max(0, size[0] - 8) if size else 0


def _unwrap_id(side: _Side, ip_id: int) -> int | None:
    """The server's IPv4 identification as a count that does not wrap at 2^16 (Linux
    counts it up per packet of a TCP connection, from a random start after its SYN-ACK,
    which carries 0: None, no order). Each id is read against the packet before it (a
    step of less than half the space, forward or back), so a late packet reads older."""
    if side.last_ip_id is None:
        if ip_id == 0:
            return None
        side.last_ip_id, side.last_order = ip_id, ip_id
        return ip_id
    step = (ip_id - side.last_ip_id) % 65536
    order = side.last_order + (step if step < 32768 else step - 65536)
    side.last_ip_id, side.last_order = ip_id, order
    return order


def _tcp(side: _Side, row: dict[str, str], from_server: bool, t: float, rows: list[Any]) -> None:
    c = side.conn
    c.cwr = c.cwr or 0
    tsval = ints(row["tcp.options.timestamp.tsval"])
    tsecr = ints(row["tcp.options.timestamp.tsecr"])
    if from_server:
        c.cwr += row["tcp.flags.cwr"] in ("1", "True")
        seq = ints(row["tcp.seq_raw"])
        size = ints(row["tcp.len"])
        if side.isn is None and seq:
            side.isn = seq[0] + (0 if size and size[0] else 1)  # a SYN-ACK takes one
        ip_ids = ints(row["ip.id"])
        order = _unwrap_id(side, ip_ids[0]) if ip_ids else None
        if seq and size and size[0] > 0 and side.isn is not None:
            a = (seq[0] - side.isn) % 2**32
            sent_after = order is None or order > side.newest_sent
            _data(side, [(0, a, a + size[0])], sent_after, t, rows)
        if order is not None:
            side.newest_sent = max(side.newest_sent, order)
        if tsecr and tsecr[0] in side.client_sent and tsecr[0] not in side.echoed:
            side.echoed.add(tsecr[0])
            _rtt(side, t - side.client_sent[tsecr[0]], t, rows)
        return
    c.ce_echoed += row["tcp.flags.ece"] in ("1", "True")
    if tsval:
        side.client_sent.setdefault(tsval[0], t)
    if row["tcp.flags.ack"] in ("1", "True"):
        rows.append(_row(side, t, "sample", delivered_bytes=c.delivered_bytes))


#: the cross-check's tolerance: two counts agree within this many, or this fraction
TOLERANCE_COUNT = 3
TOLERANCE_FRACTION = 0.2


def agree(a: int, b: int) -> bool:
    """Two counts of the same thing agree (:data:`TOLERANCE_COUNT` or
    :data:`TOLERANCE_FRACTION` of the larger, whichever is more)."""
    return abs(a - b) <= max(TOLERANCE_COUNT, TOLERANCE_FRACTION * max(a, b))


def cross_check(wire: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The wire's re-sends against the stack's own log of the same load: QUIC's
    declared losses (qlog ``lost`` rows) or TCP's retransmitted segments
    (``retransmit``) should be the packets the wire saw re-send data (``lost`` +
    ``spurious``): a declared loss whose data went again, whether it was needed or
    not. Counts the stack logs for packets without data (ACKs, control frames) are in
    its count only, and one packet may re-send the data of several, so the two agree
    within the tolerance, not exactly. Where the log names spurious losses (quic-go's
    qlog), those are compared with the wire's spurious re-sends as well."""
    own = sum(1 for s in samples if s.get("event") in ("lost", "retransmit"))
    own_spurious = sum(1 for s in samples if s.get("event") == "spurious")
    seen = int(wire.get("lost", 0)) + int(wire.get("spurious", 0))
    sources = sorted({str(s.get("source")) for s in samples if s.get("source")})
    out: dict[str, Any] = {
        "stack_log": ",".join(sources) or None,
        "stack_losses": own,
        "wire_resent": seen,
        "stack_spurious": own_spurious if own_spurious else None,
        "wire_spurious": int(wire.get("spurious", 0)),
        "rule": f"within {TOLERANCE_COUNT} or {TOLERANCE_FRACTION:.0%} of the larger",
    }
    out["agree"] = agree(own, seen) and (
        not own_spurious or agree(own_spurious, out["wire_spurious"])
    )
    return out
