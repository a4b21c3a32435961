"""Measurements across the emulated link, run from the client and server namespaces.

Each probe returns plain data; judging it against the configured link is the
receipt's job (quicbed.link.receipt), so the same numbers can be re-judged later.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.roles.interface import PREFIX_LEN
from quicbed.testbed.lifecycle import Process, RPath, Testbed

IPERF_PORT = 5201
_PING_RE = re.compile(r"icmp_seq=(\d+) .*time=([\d.]+) ms")


def resolve_neighbours(tb: Testbed, role: str, ip: str) -> None:
    """One unmeasured ping from ``role`` to ``ip`` before a measurement.

    Until ARP has resolved (one RTT of the emulated link), packets wait in the
    neighbour queue: each would count up to one extra RTT, and the queue's flush races
    the packets sent after it, which the receiver sees as reordering.
    """
    tb.exec(role, ["ping", "-n", "-c", "1", "-W", "5", ip], timeout=15, check=False)


def ping(
    tb: Testbed, *, count: int = 200, interval: float = 0.01, ip: str | None = None
) -> dict[str, Any]:
    """RTT samples from client to server (ICMP echo, 56-byte payload, 98-byte frames):
    to its testbed address, or to another address ``ip`` it holds (a replayed page's
    origin: server_addresses)."""
    ip = ip or tb.server_ip
    resolve_neighbours(tb, "client", ip)
    wait = max(2.0, count * interval + 5)
    cp = tb.exec(
        "client",
        ["ping", "-n", "-c", str(count), "-i", f"{interval:g}", "-W", "3", ip],
        timeout=wait + 10,
        check=False,
    )
    samples = [float(m.group(2)) for m in _PING_RE.finditer(cp.stdout)]
    seqs = {int(m.group(1)) for m in _PING_RE.finditer(cp.stdout)}
    return ping_summary(samples, count, len(seqs))


def server_interface(tb: Testbed) -> str:
    """The server's interface that holds its testbed address."""
    cp = tb.exec("server", ["ip", "-o", "-4", "addr", "show"])
    for line in cp.stdout.splitlines():
        f = line.split()
        if len(f) > 3 and f[2] == "inet" and f[3].split("/")[0] == tb.server_ip:
            return f[1]
    raise QuicbedError(f"{tb.name('server')}: no interface holds {tb.server_ip}")


@contextmanager
def server_addresses(tb: Testbed, ips: list[str]) -> Iterator[None]:
    """The server holds ``ips`` (of its testbed subnet) beside its own address, on the
    same interface, while the block runs: a replayed page's origins, each at an address
    of its own (quicbed.replay.serve), for its cell or for a receipt's pings to them."""
    dev = server_interface(tb)
    added: list[str] = []
    try:
        for ip in ips:
            tb.exec("server", ["ip", "addr", "replace", f"{ip}/{PREFIX_LEN}", "dev", dev])
            added.append(ip)
        yield
    finally:
        for ip in added:
            tb.exec("server", ["ip", "addr", "del", f"{ip}/{PREFIX_LEN}", "dev", dev], check=False)


def ping_summary(samples: list[float], sent: int, received: int) -> dict[str, Any]:
    """The figures of RTT samples (one ping run's, or several runs' joined)."""
    out: dict[str, Any] = {"sent": sent, "received": received, "samples_ms": samples}
    if samples:
        out.update(
            mean_ms=statistics.fmean(samples),
            median_ms=statistics.median(samples),
            sd_ms=statistics.stdev(samples) if len(samples) > 1 else 0.0,
            min_ms=min(samples),
            max_ms=max(samples),
        )
    return out


def ping_more(tb: Testbed, first: dict[str, Any], count: int) -> dict[str, Any]:
    """``first`` joined by ``count`` more pings: a probe that stops early where its first
    samples already have the power it needs, and goes on where they do not."""
    more = ping(tb, count=count)
    return ping_summary(
        first["samples_ms"] + more["samples_ms"],
        first["sent"] + more["sent"],
        first["received"] + more["received"],
    )


#: the UDP probe's port on the receiving role
UDP_PROBE_PORT = 5301


def udp_probe(
    tb: Testbed, direction: str, *, count: int, pps: float, idle: float = 2.0
) -> dict[str, Any]:
    """One paced stream of ``count`` 64-byte datagrams: one-way delay, loss, reordering."""
    return udp_probes(tb, {direction: (count, pps)}, idle=idle)[direction]


@dataclass(frozen=True)
class _Stream:
    """One direction of the UDP probe: which role sends, which receives, where to and
    the receiver's result file. Starting, waiting for and reading back a stream each need
    all of them, so they are decided once."""

    direction: str
    count: int
    pps: float
    sender: str
    receiver: str
    dst: str
    out: RPath


def _stream(tb: Testbed, direction: str, count: int, pps: float) -> _Stream:
    """The stream of ``direction``: down is sent by the server to the client, up the other
    way, each to the receiver's address so it crosses the link."""
    sender, receiver = ("server", "client") if direction == "down" else ("client", "server")
    dst = tb.client_ip if direction == "down" else tb.server_ip
    out = tb.workdir(receiver) / f"udpprobe-{direction}.json"
    return _Stream(direction, count, pps, sender, receiver, dst, out)


def udp_probes(
    tb: Testbed, plans: dict[str, tuple[int, float]], *, idle: float = 2.0
) -> dict[str, dict[str, Any]]:
    """Paced streams of 64-byte datagrams, ``plans``: direction -> (count, pps), both
    directions at once (each has its own pipe, and 64-byte datagrams at a third of the
    rate leave the link idle most of the time): one-way delay, loss and reordering.

    Each receiver stops when it has every datagram, or once the link has been idle for
    ``idle`` seconds, longer than any configured delay, so nothing in flight is counted
    as lost.
    """
    streams = [_stream(tb, d, count, pps) for d, (count, pps) in plans.items()]
    seconds = max(count / pps for count, pps in plans.values())
    _run_streams(tb, streams, seconds, idle)
    return {s.direction: _stream_result(tb, s) for s in streams}


def _run_streams(tb: Testbed, streams: list[_Stream], seconds: float, idle: float) -> None:
    """Every receiver listening, and the path to it resolved, before any sender starts, so
    no datagram is lost to a closed port or waits in the neighbour queue; every process
    stopped whatever happens, so a failed probe leaves none behind."""
    receivers: list[Process] = []
    senders: list[Process] = []
    try:
        for s in streams:
            tb.remove(s.receiver, s.out)
            receivers.append(tb.spawn(s.receiver, _receiver_argv(tb, s, idle)))
        for s in streams:
            tb.wait_listening(s.receiver, "udp", UDP_PROBE_PORT)
            resolve_neighbours(tb, s.sender, s.dst)
        for s in streams:
            senders.append(tb.spawn(s.sender, _sender_argv(tb, s)))
        for s, tx in zip(streams, senders, strict=True):
            rc = tx.wait(timeout=seconds + 30)
            if rc not in (0, -1):  # -1: a remote daemon's code is unknown (Process.poll)
                raise QuicbedError(f"the UDP probe's sender ({s.direction}) exited {rc}")
        for rx in receivers:
            rx.wait(timeout=idle + 60)
    finally:
        for p in [*receivers, *senders]:
            p.stop()


def _receiver_argv(tb: Testbed, s: _Stream, idle: float) -> list[str]:
    """quicbed.link.udpprobe's receiver of ``s``, on its role's own Python (the roles may
    be other machines)."""
    return [
        *tb.python(s.receiver),
        "-m",
        "quicbed.link.udpprobe",
        "recv",
        "--bind",
        f"{s.dst}:{UDP_PROBE_PORT}",
        "--count",
        str(s.count),
        "--out",
        str(s.out),
        "--idle",
        str(idle),
    ]


def _sender_argv(tb: Testbed, s: _Stream) -> list[str]:
    """quicbed.link.udpprobe's paced sender of ``s``, on its role's own Python."""
    return [
        *tb.python(s.sender),
        "-m",
        "quicbed.link.udpprobe",
        "send",
        "--to",
        f"{s.dst}:{UDP_PROBE_PORT}",
        "--count",
        str(s.count),
        "--pps",
        f"{s.pps:g}",
    ]


def _stream_result(tb: Testbed, s: _Stream) -> dict[str, Any]:
    """The receiver's figures of ``s``, its file removed once read so the next probe
    cannot read a stale one; with the direction and rate, as the receipt judges by them."""
    text = tb.read_text(s.receiver, s.out)
    if not text:
        raise QuicbedError(f"the UDP probe ({s.direction}) wrote no result")
    data: dict[str, Any] = json.loads(text)
    tb.remove(s.receiver, s.out)
    data.update(direction=s.direction, pps=s.pps)
    return data


@contextmanager
def iperf3_server(tb: Testbed, interval: float = 1.0) -> Iterator[None]:
    """An iperf3 server in the server namespace for the duration of a receipt;
    ``interval``: its reporting interval (s), the upward UDP rate probe's."""
    log = tb.workdir("server") / "iperf3-server.log"
    argv = ["iperf3", "-s", "-J", "-B", tb.server_ip, "-p", str(IPERF_PORT)]
    p = tb.spawn("server", [*argv, "-i", f"{interval:g}"], log=log)
    try:
        tb.wait_listening("server", "tcp", IPERF_PORT)
        yield
    finally:
        p.stop()


def _iperf3(tb: Testbed, args: list[str], seconds: float, tries: int = 3) -> dict[str, Any]:
    """Run an iperf3 client; retry when its set-up exchange is lost on a lossy link.

    iperf3 3.12 does not retransmit the datagram that opens a UDP test, so with
    loss configured a test can fail before it starts; that is the link doing its
    job, not a measurement, so it is retried (and the retries recorded).
    """
    argv = ["iperf3", "-c", tb.server_ip, "-p", str(IPERF_PORT), "-J", *args]
    problem = ""
    for attempt in range(1, tries + 1):
        cp = tb.exec("client", argv, timeout=seconds + 30, check=False)
        try:
            data: dict[str, Any] = json.loads(cp.stdout)
        except json.JSONDecodeError:
            problem = f"iperf3 gave no JSON (exit {cp.returncode}): {cp.stderr.strip()}"
            continue
        if "error" in data:
            problem = f"iperf3: {data['error']}"
            continue
        data["quicbed_attempts"] = attempt
        return data
    raise QuicbedError(f"{problem} (after {tries} tries)")


def tcp_goodput(
    tb: Testbed,
    direction: str,
    *,
    seconds: float = 10,
    omit: float = 2,
    cc: str = "cubic",
    interval: float = 1.0,
) -> dict[str, Any]:
    """TCP goodput in steady state: iperf3 omits the first ``omit`` s (slow start), and
    the figure is the median of the receiver's reporting intervals without the first
    and the last (:func:`steady_rate`). The whole test's figure divides by the
    receiver's span, which runs past the sender's end by the queue's drain and the
    closing exchange: a 1 s test upward read 3 % below a correct 10 Mbit/s link."""
    args = ["-t", f"{seconds:g}", "-O", f"{omit:g}", "-C", cc, "-i", f"{interval:g}"]
    args.append("-R" if direction == "down" else "--get-server-output")
    d = _iperf3(tb, args, seconds + omit)
    end = d["end"]
    rates, steady = steady_rate(d, direction, end["sum_received"]["bits_per_second"])
    return {
        "attempts": d["quicbed_attempts"],
        "seconds": seconds,
        "omit": omit,
        "interval": interval,
        "goodput_bps": steady,
        "whole_test_bps": end["sum_received"]["bits_per_second"],
        "receiver_intervals_bps": rates,
        "retransmits": end["sum_sent"].get("retransmits"),
        "sender_cc": end.get("sender_tcp_congestion"),
        "receiver_cc": end.get("receiver_tcp_congestion"),
    }


def steady_rate(d: dict[str, Any], direction: str, whole_bps: float) -> tuple[list[float], float]:
    """The receiver's interval rates of an iperf3 test (its client's with -R, else the
    server's) less those in the omitted start, and their median without the first and
    the last; ``whole_bps`` where fewer than three are left."""
    rx = d if direction == "down" else d.get("server_output_json", {})
    rates = [
        iv["sum"]["bits_per_second"]
        for iv in rx.get("intervals", [])
        if not iv["sum"].get("omitted")
    ]
    steady = statistics.median(rates[1:-1]) if len(rates) > 2 else whole_bps
    return rates, steady


def udp(
    tb: Testbed,
    direction: str,
    *,
    bitrate_bps: float,
    seconds: float,
    length: int,
    tos: int | None = None,
    interval: float = 1.0,
) -> dict[str, Any]:
    """A UDP stream at ``bitrate_bps`` (payload): delivery rate, loss and reordering.

    The delivery rate is the median of the receiver's reporting intervals without
    the first and the last: iperf3's whole-test figure divides by the sender's
    duration, while the receiver also gets the queue's drain after the sender stops.
    ``tos``: the datagrams' IP TOS byte (2: ECN-capable, ECT(0)); ``interval``: the
    receiver's reporting interval (s).
    """
    args = ["-u", "-b", str(int(bitrate_bps)), "-l", str(length), "-t", f"{seconds:g}"]
    args += ["-i", f"{interval:g}"]
    if tos is not None:
        args += ["-S", str(tos)]
    if direction == "down":
        args.append("-R")
    else:
        args.append("--get-server-output")
    d = _iperf3(tb, args, seconds)
    end = d["end"]
    recv = end.get("sum_received") or end["sum"]
    streams = end.get("streams") or [{}]
    ooo = sum(s.get("udp", {}).get("out_of_order", 0) for s in streams)
    # lost/packets come from the receiver's sequence numbers
    lost = end["sum"].get("lost_packets", recv.get("lost_packets", 0))
    packets = end["sum"].get("packets", recv.get("packets", 0))
    rates, steady = steady_rate(d, direction, recv["bits_per_second"])
    return {
        "attempts": d["quicbed_attempts"],
        "bitrate_bps": bitrate_bps,
        "length": length,
        "seconds": seconds,
        "interval": interval,
        "packets": packets,
        "lost": lost,
        "out_of_order": ooo,
        "received_bps": recv["bits_per_second"],
        "steady_received_bps": steady,
        "receiver_intervals_bps": rates,
    }
