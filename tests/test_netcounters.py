"""Counters per role: UDP receive-buffer errors and interface drops, and the ACK ratio.

The parsing runs on the kernel's own text; the overflow is a real one, in a real
namespace, seen by the role it happened on and no other.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from quicbed.analysis.transfers import counter_totals
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.results.netcounters import RoleCounters, difference, parse
from quicbed.results.transfers import FlowResult
from quicbed.run.netcounters import NetMeter
from quicbed.testbed.local import LocalTestbed

SNMP = """\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 10
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 159214 311 240 83946 230 2 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 9 0 9 0 0 0 0
"""  # noqa: E501
DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 194542447   83569    0    7    0     0          0         0 194542447   83569    0    7    0     0       0          0
  eth0: 1000 10 1 3 0 0 0 0 2000 20 2 4 0 0 0 0
  ctl0: 1000 10 0 5 0 0 0 0 2000 20 0 6 0 0 0 0
"""  # noqa: E501


def test_the_kernels_counters_are_read_by_name_loopback_left_out() -> None:
    got = parse(SNMP, DEV)
    assert got["udp_in_datagrams"] == 159214 and got["udp_out_datagrams"] == 83946
    assert got["udp_in_errors"] == 240 and got["udp_rcvbuf_errors"] == 230  # not UdpLite's
    assert got["udp_sndbuf_errors"] == 2
    assert got["ifaces"] == ["ctl0", "eth0"]
    assert (got["rx_dropped"], got["tx_dropped"], got["rx_errors"], got["tx_errors"]) == (
        8,
        10,
        1,
        2,
    )
    only = parse(SNMP, DEV, ifaces=["eth0"])
    assert (only["rx_dropped"], only["tx_dropped"], only["ifaces"]) == (3, 4, ["eth0"])
    before = parse(SNMP, DEV)
    after = parse(SNMP.replace("240 83946 230", "250 83946 238"), DEV)
    d = difference(before, after)
    assert (d.udp_in_errors, d.udp_rcvbuf_errors, d.drops) == (10, 8, 0)


def test_the_ack_ratio_is_the_clients_sent_per_received() -> None:
    f = FlowResult(flow="h3-0", arm="h3", protocol="h3", ok=True)
    assert f.ack_ratio() is None  # a TCP flow, or no counters
    f.quic_client = {"packets_sent": 500, "packets_received": 2000}
    assert f.ack_ratio() == 0.25
    # without the client's counters: the server's (what it received per what it sent)
    f.quic_client = None
    f.server = {"stats": {"sent": 4000, "recv": 1000}}
    assert f.ack_ratio() == 0.25


def test_counters_add_up_per_role_over_flows() -> None:
    one = {"client": RoleCounters(udp_rcvbuf_errors=3, udp_in_errors=3, rx_dropped=1)}
    two = {"client": RoleCounters(udp_rcvbuf_errors=2, udp_in_errors=4), "server": RoleCounters()}
    assert counter_totals([one, two]) == {
        "udp_rcvbuf_errors": {"client": 5, "server": 0},
        "udp_in_errors": {"client": 7, "server": 0},
        "drops": {"client": 1, "server": 0},
    }


FLOOD = """\
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
s.bind(("0.0.0.0", 9999))
open(sys.argv[1], "w").write("ready")
time.sleep(30)  # never reads
"""


@pytest.mark.root
def test_a_full_receive_buffer_is_counted_on_its_own_role(
    testbed: LocalTestbed, tmp_path: Path
) -> None:
    tb = testbed
    ready = tmp_path / "ready"
    with shaped_link(tb, make_condition(), "none"):
        sink = tb.spawn("client", [sys.executable, "-c", FLOOD, str(ready)])
        try:
            deadline = time.monotonic() + 10
            while not ready.exists():
                assert time.monotonic() < deadline and sink.poll() is None
                time.sleep(0.02)
            meter = NetMeter(tb)
            mark = meter.read()
            send = (
                "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"for _ in range(2000): s.sendto(b'x' * 1200, ('{tb.client_ip}', 9999))\n"
            )
            tb.exec("server", [sys.executable, "-c", send])
            time.sleep(0.2)
            grew = meter.since(mark)
        finally:
            sink.stop()
    client, server = grew["client"], grew["server"]
    assert 0 < client.udp_rcvbuf_errors <= 2000
    assert client.udp_in_errors >= client.udp_rcvbuf_errors  # InErrors counts them too
    assert server.udp_out_datagrams >= 2000 and server.udp_rcvbuf_errors == 0
    assert client.ifaces == ["eth0"] and grew["bridge"].ifaces == ["br0", "cli", "srv"]
