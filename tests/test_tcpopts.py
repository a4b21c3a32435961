"""TCP options as arm parameters, without a testbed: the pcap/IPv4/TCP option parser on
packets built by hand, the reasons a mismatched handshake gets, the settings' checks
and dumps, and the sweeps/tcp-options.yaml preset."""

from __future__ import annotations

import struct
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.settings import tcpopts
from quicbed.spec.arms import ArmSettings, parse_cli, resolve
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec, plan

ROOT = Path(__file__).resolve().parent.parent
SERVER, CLIENT = "10.10.1.1", "10.10.1.2"
SYN, ACK, ECE, CWR = 0x02, 0x10, 0x40, 0x80
MSS = bytes([2, 4, 0x05, 0xB4])
SACK_PERM = bytes([4, 2])
TS = bytes([8, 10]) + bytes(8)
NOP = bytes([1])


def wscale(shift: int) -> bytes:
    return bytes([3, 3, shift])


def tcp_packet(src: str, dst: str, sport: int, dport: int, flags: int, opts: bytes) -> bytes:
    """IPv4 + TCP with ``opts`` (padded to 32 bits), checksums left zero."""
    opts += bytes(-len(opts) % 4)
    tcp = (
        struct.pack(
            "!HHIIBBHHH", sport, dport, 1000, 0, (5 + len(opts) // 4) << 4, flags, 64240, 0, 0
        )
        + opts
    )
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(tcp),
        1,
        0x4000,
        64,
        6,
        0,
        bytes(map(int, src.split("."))),
        bytes(map(int, dst.split("."))),
    )
    return ip + tcp


def ether(ip: bytes) -> bytes:
    return bytes(6) + bytes(6) + b"\x08\x00" + ip


def pcap(frames: list[bytes], linktype: int = 1, order: str = "<") -> bytes:
    out = struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for i, f in enumerate(frames):
        out += struct.pack(order + "IIII", 1700000000 + i, 0, len(f), len(f)) + f
    return out


def syn(opts: bytes, flags: int = SYN) -> bytes:
    return ether(tcp_packet(CLIENT, SERVER, 50000, 443, flags, opts))


def synack(opts: bytes, flags: int = SYN | ACK) -> bytes:
    return ether(tcp_packet(SERVER, CLIENT, 443, 50000, flags, opts))


LINUX_SYN = MSS + SACK_PERM + TS + NOP + wscale(7)  # what Linux sends by default


def test_parser_reads_linux_syn_and_synack() -> None:
    data = pcap(
        [
            syn(LINUX_SYN, SYN | ECE | CWR),
            synack(MSS + NOP + NOP + SACK_PERM + NOP + wscale(10), SYN | ACK | ECE),
            ether(tcp_packet(CLIENT, SERVER, 50000, 443, ACK, b"")),
        ]
    )
    got = tcpopts.read_pcap(data)
    assert len(got) == 2  # the bare ACK is not a SYN
    s, a = got
    assert (s.src, s.sport, s.dst, s.dport, s.ack) == (CLIENT, 50000, SERVER, 443, False)
    assert (s.mss, s.wscale, s.sack, s.timestamps, s.ece, s.cwr, s.tfo) == (
        1460,
        7,
        True,
        True,
        True,
        True,
        False,
    )
    assert (a.ack, a.wscale, a.sack, a.timestamps, a.ece, a.cwr) == (
        True,
        10,
        True,
        False,
        True,
        False,
    )
    # big-endian files, Linux cooked capture (v1) and raw IP read the same
    assert tcpopts.read_pcap(pcap([syn(LINUX_SYN)], order=">"))[0].wscale == 7
    sll = bytes(14) + b"\x08\x00" + tcp_packet(CLIENT, SERVER, 1, 443, SYN, SACK_PERM)
    assert tcpopts.read_pcap(pcap([sll], linktype=113))[0].sack
    raw = tcp_packet(CLIENT, SERVER, 1, 443, SYN, wscale(0))
    assert tcpopts.read_pcap(pcap([raw], linktype=101))[0].wscale == 0


def test_parser_fast_open_and_bad_input() -> None:
    cookie_req = bytes([34, 2])
    with_cookie = bytes([34, 10]) + bytes(8)
    exp = bytes([254, 4, 0xF9, 0x89])
    got = tcpopts.read_pcap(pcap([syn(MSS + cookie_req), synack(MSS + with_cookie), syn(exp)]))
    assert [(p.tfo, p.tfo_cookie) for p in got] == [(True, 0), (True, 8), (True, 0)]
    # a truncated option list keeps what came before it; a zero length does not loop
    s = tcpopts.Syn(CLIENT, 1, SERVER, 443, False, False, False)
    tcpopts.parse_options(MSS + bytes([3, 3]), s)
    assert s.mss == 1460 and s.wscale is None
    tcpopts.parse_options(bytes([4, 0, 4, 2]), s)
    assert not s.sack
    assert tcpopts.read_pcap(b"") == []
    with pytest.raises(QuicbedError, match="not a pcap file"):
        tcpopts.read_pcap(b"\x0a\x0d\x0d\x0a" + bytes(40))  # pcapng


def facts_of(*frames: bytes) -> dict[str, Any]:
    return {"tcp_syn": [asdict(p) for p in tcpopts.read_pcap(pcap(list(frames)))]}


def test_evidence_accepts_a_matching_handshake_and_names_a_mismatched_syn() -> None:
    no_sack = {"tcp_sack": False}
    good = facts_of(syn(MSS + TS + NOP + wscale(7)), synack(MSS + TS + NOP + wscale(7)))
    assert tcpopts.evidence(no_sack, good) == []
    # the client's SACK back on (as a sysctl flipped behind the cell makes it): the SYN
    # offers SACK, the server (still off) does not echo it
    bad = facts_of(syn(LINUX_SYN), synack(MSS + TS + NOP + wscale(7)))
    assert tcpopts.evidence(no_sack, bad) == [
        "the SYN offered SACK, but the arm sets tcp_sack: false"
    ]
    assert tcpopts.evidence({"tcp_sack": True}, good) == [
        "the SYN offered no SACK, but the arm sets tcp_sack: true",
        "the SYN-ACK offered no SACK, but the arm sets tcp_sack: true",
    ]
    ws_off = {"tcp_window_scaling": False}
    assert tcpopts.evidence(ws_off, good) == [
        "the SYN offered window scaling, but the arm sets tcp_window_scaling: false",
        "the SYN-ACK offered window scaling, but the arm sets tcp_window_scaling: false",
    ]
    # a load without SYNs in its capture (a reused connection, a capture gone wrong)
    assert tcpopts.evidence(no_sack, {"tcp_syn": []}) == [
        "the capture holds 0 SYN(s) and 0 SYN-ACK(s) of this load: its TCP options are not verified"
    ]
    assert tcpopts.evidence(no_sack, {"tcp_syn_problem": "x"}) == ["TCP options not verified: x"]
    assert tcpopts.evidence({}, bad) == []  # no options set: nothing to check


def test_evidence_ecn_rmem_and_kernel_readbacks() -> None:
    ecn = facts_of(syn(LINUX_SYN, SYN | ECE | CWR), synack(LINUX_SYN, SYN | ACK | ECE))
    plain = facts_of(syn(LINUX_SYN), synack(LINUX_SYN))
    assert tcpopts.evidence({"tcp_ecn": 1}, ecn) == []
    assert tcpopts.evidence({"tcp_ecn": 2}, plain) == []
    assert tcpopts.evidence({"tcp_ecn": 0}, ecn) == [
        "the SYN asked for ECN (ECE+CWR), but the arm sets tcp_ecn: 0",
        "the SYN-ACK accepted ECN (ECE), but the arm sets tcp_ecn: 0",
    ]
    assert tcpopts.evidence({"tcp_ecn": 1}, plain) == [
        "the SYN did not ask for ECN (ECE+CWR), but the arm sets tcp_ecn: 1",
        "the SYN-ACK did not accept ECN (ECE), but the arm sets tcp_ecn: 1",
    ]
    assert tcpopts.evidence({"rmem": "ws7"}, plain) == []
    assert tcpopts.evidence({"rmem": "ws2"}, plain) == [
        "the SYN offered window scale shift 7, but the arm's rmem ws2 gives shift 2",
        "the SYN-ACK offered window scale shift 7, but the arm's rmem ws2 gives shift 2",
    ]
    tfo = facts_of(syn(LINUX_SYN + bytes([34, 2])), synack(LINUX_SYN))
    kernel = {
        "server": {"tcp_fastopen": 0, "initcwnd": 10},
        "client": {"tcp_fastopen": 1, "initcwnd": None},
    }
    assert tcpopts.evidence({"tcp_fastopen": 0, "initcwnd": 10}, {**tfo, "tcp_kernel": kernel}) == [
        "the SYN carried a TCP Fast Open option, but the arm sets tcp_fastopen: 0",
        "the client's net.ipv4.tcp_fastopen was 1 after this load, not 0",
        "the client's route to its peer had initcwnd None after this load, not 10",
    ]


def test_settings_checked_refused_on_quic_and_left_out_of_dumps() -> None:
    names, settings = parse_cli("h2:tcp_sack=false:tcp_ecn=1:initcwnd=10:rmem=ws4,h3")
    arms = resolve(names, settings, "cubic")
    assert arms[0].params == {"tcp_sack": False, "tcp_ecn": 1, "initcwnd": 10, "rmem": "ws4"}
    assert arms[0].describe() == (
        "h2 (apache, cubic, tcp_sack false, tcp_ecn 1, initcwnd 10, rmem ws4)"
    )
    # unset options are not in a dump: a cell without them keeps its ID
    assert ArmSettings(cc="bbr").model_dump() == {
        "stack": None,
        "cc": "bbr",
        "cubic_n": None,
        "cubic_beta": None,
    }
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    plain = make_cell(condition=cond, page="5kb", arm_settings={"h2": ArmSettings(cc="cubic")})
    assert "tcp_sack" not in str(plain.model_dump(mode="json"))
    with_opt = make_cell(condition=cond, page="5kb", arms=names, arm_settings=settings)
    assert with_opt.cell_id() != plain.cell_id()
    bad = {
        "h3:tcp_sack=false": "arm h3: tcp_sack is a TCP option, and quic-go runs QUIC over UDP",
        "h2:tcp_ecn=3": "arm h2: tcp_ecn must be 0 (off), 1 (request and accept) or 2",
        "h2:rmem=huge": "arm h2: rmem 'huge' is not a preset (one of ws0, ws1, ws2, ws3, "
        "ws4, ws7, ws9, ws14)",
        "h2:rmem=ws2:tcp_window_scaling=false": "rmem ws2 sets a window scale, but the arm "
        "sets tcp_window_scaling: false",
        "h2:initcwnd=0": "arm h2: initcwnd must be 1..1000 segments (got 0)",
        "h2:tcp_fastopen=-1": "tcp_fastopen is the sysctl's bit mask",
    }
    for text, needle in bad.items():
        n, s = parse_cli(text)
        with pytest.raises(QuicbedError) as exc:
            resolve(n, s, "cubic")
        assert needle in str(exc.value), (text, str(exc.value))


def test_tcp_options_preset_plans_the_tum_scenarios() -> None:
    """sweeps/tcp-options.yaml: BL with SACK, ECN and window scaling off, each on alone,
    ALL on; the TCP arm carries them, the QUIC arm nothing; a few bulk cells."""
    cells = plan(load_spec(ROOT / "sweeps" / "tcp-options.yaml"))
    off = {"tcp_sack": False, "tcp_ecn": 0, "tcp_window_scaling": False}
    want = {
        "BL": off,
        "ECN": {**off, "tcp_ecn": 1},
        "SACK": {**off, "tcp_sack": True},
        "WS": {**off, "tcp_window_scaling": True},
        "ALL": {"tcp_sack": True, "tcp_ecn": 1, "tcp_window_scaling": True},
    }
    assert {pc.scenario for pc in cells} == set(want) and len(cells) <= 12
    for pc in cells:
        assert pc.config.kind == "bulk" and pc.config.page == "bulk/20MB.bin"
        h2, h3 = pc.config.resolved_arms()
        assert (h2.name, h2.params, h3.name, h3.params) == ("h2", want[pc.scenario], "h3", {})
    assert len({pc.config.cell_id() for pc in cells}) == len(cells)
