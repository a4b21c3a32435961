"""A load's transport timeline from the wire (quicbed.traces.wire): its rules on tshark's
output shape (re-sent, reordered and spurious data; RTT samples; ECN counts; the
cross-check's tolerance), then the suite's level-full cell read by the module and checked
against its stack's own logs and against tshark's own TCP analysis."""

from __future__ import annotations

from typing import Any

import pytest
from tshark import fields

from quicbed.traces.tracer import read_samples
from quicbed.traces.wire import _FIELDS, agree, cross_check, derive

SERVER = 443
BEGAN = 1000.0  # the load's t_ms = 0, seconds since the epoch


def _line(t_ms: float, **kw: Any) -> str:
    """One packet as tshark prints :data:`_FIELDS` (``-E occurrence=a``)."""
    kw["frame.time_epoch"] = f"{BEGAN + t_ms / 1000:.6f}"
    return "\t".join(str(kw.get(f, "")) for f in _FIELDS)


def _quic(t: float, pn: int, sid: int, off: int, n: int, **kw: Any) -> str:
    """A server 1-RTT packet with one STREAM frame (offset and length present)."""
    return _line(
        t,
        **{
            "udp.srcport": SERVER,
            "udp.dstport": 5000,
            "quic.packet_number": pn,
            "quic.frame_type": 14,
            "quic.stream.stream_id": sid,
            "quic.stream.off": 1,
            "quic.stream.len": 1,
            "quic.stream.offset": off,
            "quic.stream.length": n,
            "ip.dsfield.ecn": 2,
        }
        | kw,
    )


def _ack(t: float, pn: int, **kw: Any) -> str:
    """A client 1-RTT packet with an ACK frame."""
    return _line(
        t,
        **{"udp.srcport": 5000, "udp.dstport": SERVER, "quic.packet_number": pn}
        | {"quic.frame_type": 2}
        | kw,
    )


def test_quic_resent_reordered_and_spurious_data_are_told_apart() -> None:
    lines = [
        _quic(10, 0, 0, 0, 1000),
        _quic(11, 1, 0, 1000, 1000),
        # pn 2 (1000 bytes at 2000) lost on the way down: pn 3 opens a hole at t=12
        _quic(12, 3, 0, 3000, 1000),
        # pn 5 arrives before pn 4 (reordered): its hole at 5000 is filled by pn 4 later
        _quic(13, 5, 0, 5000, 1000),
        _quic(14, 4, 0, 4000, 1000),
        _ack(15, 0),
        # the re-send of pn 2's data, in a new packet (sent after the hole appeared)
        _quic(40, 6, 0, 2000, 1000),
        # a spurious re-send: data the client already had
        _quic(41, 7, 0, 1000, 1000, **{"ip.dsfield.ecn": 3}),
        _ack(42, 1, **{"quic.ack.ecn_ce_count": 1, "quic.frame_type": 3}),
    ]
    w = derive(lines, {SERVER}, BEGAN)
    (c,) = w.conns
    assert (c.transport, c.client_port, c.server_port) == ("quic", 5000, SERVER)
    assert (c.lost, c.lost_bytes, c.reordered, c.spurious, c.spurious_bytes) == (
        1,
        1000,
        1,
        1,
        1000,
    )
    assert c.delivered_bytes == 6000 and c.server_packets == 7 and c.client_packets == 2
    assert c.missing_packets == 1  # pn 2, lost on the way down; 0, 1, 3..7 were seen
    assert (c.ect0, c.ce, c.ce_echoed) == (6, 1, 1)
    lost = [s for s in w.samples if s["event"] == "lost"]
    assert [(s["t_ms"], s["bytes"]) for s in lost] == [(12.0, 1000)]  # when the hole appeared
    assert [s["t_ms"] for s in w.samples if s["event"] == "spurious"] == [41.0]
    acks = [s for s in w.samples if s["event"] == "sample"]
    assert [s["delivered_bytes"] for s in acks] == [5000, 6000]
    assert all(s["source"] == "wire" and s["conn"] == "5000" for s in w.samples)
    assert [s["t_ms"] for s in w.samples] == sorted(s["t_ms"] for s in w.samples)


def test_quic_missing_packet_numbers_and_a_frame_without_offset_or_length() -> None:
    """A STREAM frame without its offset starts at 0; one without its length runs to
    the end of the packet (its data's hex says how long); skipped numbers count."""
    frame = {
        "quic.stream.off": 0,
        "quic.stream.len": 0,
        "quic.stream.offset": "",
        "quic.stream.length": "",
        "quic.stream_data": "ab" * 700,
    }
    lines = [_quic(1, 0, 4, 0, 0, **frame), _quic(2, 3, 4, 700, 100)]
    (c,) = derive(lines, {SERVER}, BEGAN).conns
    assert c.delivered_bytes == 800 and c.lost == 0 and c.missing_packets == 2


def test_quic_rtt_from_the_servers_ack_less_its_ack_delay() -> None:
    lines = [
        _line(
            0,
            **{"udp.srcport": 5000, "udp.dstport": SERVER, "quic.packet_number": 7}
            | {"quic.frame_type": 1},  # a PING
        ),
        # the server acknowledges client packet 7 at 50 ms with 1250 x 8 us = 10 ms delay
        _line(
            50,
            **{"udp.srcport": SERVER, "udp.dstport": 5000, "quic.packet_number": 1}
            | {"quic.frame_type": 2, "quic.ack.largest_acknowledged": 7}
            | {"quic.ack.ack_delay": 1250},
        ),
        # acknowledged again: no second sample
        _line(
            60,
            **{"udp.srcport": SERVER, "udp.dstport": 5000, "quic.packet_number": 2}
            | {"quic.frame_type": 2, "quic.ack.largest_acknowledged": 7},
        ),
    ]
    w = derive(lines, {SERVER}, BEGAN)
    rtts = [s["rtt_sample_ms"] for s in w.samples if s.get("rtt_sample_ms") is not None]
    assert rtts == [pytest.approx(40.0)]
    assert w.conns[0].rtt_samples == 1 and w.conns[0].rtt_min_ms == pytest.approx(40.0)


def _tcp(t: float, seq: int, n: int, ip_id: int, **kw: Any) -> str:
    return _line(
        t,
        **{"tcp.srcport": SERVER, "tcp.dstport": 6000, "tcp.seq_raw": seq, "tcp.len": n}
        | {"ip.id": hex(ip_id), "tcp.flags.ack": 1}
        | kw,
    )


def test_tcp_order_from_the_ip_id_and_rtt_from_timestamps() -> None:
    isn = 2**32 - 1000  # the sequence space wraps inside the load
    lines = [
        _tcp(0, isn, 0, 0),  # SYN-ACK: IP id 0 gives no order
        _line(
            1,
            **{"tcp.srcport": 6000, "tcp.dstport": SERVER, "tcp.flags.ack": 1}
            | {"tcp.options.timestamp.tsval": 77},
        ),
        _tcp(40, isn + 1, 1448, 65535, **{"tcp.options.timestamp.tsecr": 77}),
        # the next segment lost; id 1 after 65535 is the newer one (ids wrap)
        _tcp(42, isn + 1 + 2 * 1448, 1448, 2),
        _tcp(43, isn + 1 + 1448, 1448, 3),  # the re-send, sent after: lost
        _tcp(44, isn + 1 + 1448, 1448, 4),  # again: spurious
    ]
    w = derive(lines, {SERVER}, BEGAN)
    (c,) = w.conns
    assert (c.transport, c.lost, c.lost_bytes, c.spurious, c.reordered) == ("tcp", 1, 1448, 1, 0)
    assert c.delivered_bytes == 3 * 1448
    assert c.rtt_samples == 1 and c.rtt_min_ms == pytest.approx(39.0)
    # the same three segments, the middle one delayed (sent before the one past it)
    lines[4] = _tcp(43, isn + 1 + 1448, 1448, 1)
    (c,) = derive(lines[:5], {SERVER}, BEGAN).conns
    assert (c.lost, c.reordered) == (0, 1)


def test_tcp_late_packets_in_a_row_are_reordered_not_resent() -> None:
    """Two segments overtaken by the next three (a delay step down): each late one
    reads older than the newest, the second too (read against the first)."""
    seg = [(1, 0), (4, 3), (5, 4), (2, 1), (3, 2)]  # (IP id, segment index), in arrival
    lines = [_tcp(10 + i, 1 + k * 1448, 1448, ip) for i, (ip, k) in enumerate(seg)]
    (c,) = derive(lines, {SERVER}, BEGAN).conns
    assert (c.lost, c.reordered, c.spurious, c.delivered_bytes) == (0, 2, 0, 5 * 1448)


def test_quic_flow_control_frames_are_counted() -> None:
    """A server held by the client's windows says so (DATA_BLOCKED 0x14,
    STREAM_DATA_BLOCKED 0x15); the client opens them (MAX_DATA 0x10, MAX_STREAM_DATA
    0x11)."""
    lines = [
        _quic(1, 0, 0, 0, 1000, **{"quic.frame_type": "21,14"}),  # blocked + STREAM
        _ack(2, 0, **{"quic.frame_type": "2,16,17"}),
        _quic(3, 1, 0, 1000, 1000),
    ]
    w = derive(lines, {SERVER}, BEGAN)
    (c,) = w.conns
    assert (c.blocked_frames, c.window_updates) == (1, 2)
    assert [(r["event"], r["t_ms"]) for r in w.samples if r["event"] == "blocked"] == [
        ("blocked", 1.0)
    ]


def test_a_packet_tshark_could_not_decrypt_is_counted_not_read() -> None:
    lines = [_quic(1, 0, 0, 0, 1000), _quic(2, 1, 0, 1000, 1000)]
    lines[1] = lines[1].replace("\t14\t", "\t\t", 1)  # no frames: its payload not read
    w = derive(lines, {SERVER}, BEGAN)
    assert w.conns[0].undecrypted == 1 and w.summary()["undecrypted"] == 1
    assert w.conns[0].delivered_bytes == 1000
    assert w.partial()  # half its packets: too few read to stand for the load
    many = [_quic(i, i, 0, 1000 * i, 1000) for i in range(200)]
    many[100] = many[100].replace("\t14\t", "\t\t", 1)
    few = derive(many, {SERVER}, BEGAN)
    assert few.conns[0].undecrypted == 1 and not few.partial()  # 1 of 200: short by one


def test_gquic_is_read_as_far_as_its_clear_header_goes() -> None:
    """gQUIC's payload is sealed with keys no key log holds: its packet numbers and
    sizes are all there is. A number skipped and never sent later is a loss."""

    def g(t: float, pn: int, server: bool = True, size: int = 1358) -> str:
        ports = (SERVER, 7000) if server else (7000, SERVER)
        return _line(
            t,
            **{"udp.srcport": ports[0], "udp.dstport": ports[1], "udp.length": size}
            | {"gquic.packet_number": pn},
        )

    lines = [g(1, 1), g(2, 3), g(3, 5), g(4, 2), g(5, 1, server=False), g(6, 6)]
    w = derive(lines, {SERVER}, BEGAN)
    (c,) = w.conns
    assert (c.transport, c.lost, c.reordered, c.missing_packets) == ("gquic", 1, 1, 1)
    assert c.delivered_bytes == 5 * 1350 and c.rtt_samples == 0
    assert [(r["event"], r["t_ms"]) for r in w.samples] == [("lost", 3.0), ("sample", 5.0)]


def test_other_ports_are_not_the_loads() -> None:
    w = derive([_line(1, **{"udp.srcport": 9, "udp.dstport": 10})], {SERVER}, BEGAN)
    assert w.conns == [] and w.samples == []


def test_the_cross_check_and_its_tolerance() -> None:
    assert agree(0, 3) and not agree(0, 4)
    assert agree(100, 80) and not agree(100, 79)
    rows = [{"event": "lost", "source": "qlog"}] * 10 + [{"event": "sample", "source": "qlog"}]
    got = cross_check({"lost": 7, "spurious": 2}, rows)
    assert got["stack_log"] == "qlog" and (got["stack_losses"], got["wire_resent"]) == (10, 9)
    assert got["agree"] and "20%" in got["rule"]
    assert not cross_check({"lost": 40, "spurious": 0}, rows)["agree"]
    # a log that names spurious losses: those must agree too
    named = [*rows, *[{"event": "spurious", "source": "qlog"}] * 8]
    assert cross_check({"lost": 2, "spurious": 7}, named)["agree"]
    assert not cross_check({"lost": 9, "spurious": 0}, named)["agree"]


# --- the suite's real cell ----------------------------------------------------------
@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_real_wire_timelines_against_the_stacks_own_logs_and_tshark(
    cell_1mb_full: dict[str, Any],
) -> None:
    """Every measured load of the suite's level-full cell (1 MB, 10 Mbit/s, 36 ms) has
    its wire timeline stored beside its capture: the page's bytes delivered, an RTT
    near the link's, the re-sends the stack's own log declares, and (TCP) every payload
    byte tshark counts in the capture either delivered or a duplicate."""
    out = cell_1mb_full["out"]
    for run in cell_1mb_full["runs"]:
        if not run.valid or run.warmup:
            continue
        wire = run.detail["wire"]
        assert "error" not in wire, wire
        rows = read_samples(out / wire["file"])
        assert rows and {r["source"] for r in rows} == {"wire"}
        assert wire["delivered_bytes"] > 1_000_000, (run.arm, wire)
        page = max(wire["all"], key=lambda c: c["delivered_bytes"])
        assert page["rtt_samples"] >= 1, page
        assert 30 <= page["rtt_min_ms"] < 100, page  # the link's 36 ms, seen from the client
        assert wire["undecrypted"] == 0, wire  # no reordering here: every key update read
        own = read_samples(out / run.detail["traces"]["files"]["transport"])
        check = cross_check(wire, own)
        assert check["agree"], (run.arm, run.rep, check)
        if run.arm == "h2":  # every payload byte tshark counts is delivered or a duplicate
            files = run.detail["traces"]["files"]
            sizes = fields(out / files["capture"], None, "tcp.srcport == 443", "tcp.len")
            dup = sum(c["spurious_bytes"] for c in wire["all"])
            assert sum(int(x) for x in sizes) == wire["delivered_bytes"] + dup, wire
