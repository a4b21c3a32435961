"""Paced UDP probe: ``python -m quicbed.link.udpprobe send|recv``.

One stream gives one-way delay, loss and reordering of a direction at once. The
namespaces share CLOCK_MONOTONIC, so the receiver subtracts the sender's timestamp
carried in each datagram. Unlike iperf3, the receiver waits for the link to drain
(idle timeout) instead of stopping when the sender says so, so packets still in a
jittered delay line are not miscounted as lost. Internal to quicbed.link.probes.

Reordering is counted as packets that arrived after one sent later ("reordered"),
and measured in how late (``late_max_ms``: arrival after the earliest later-sent
packet's) and how far (``extent_max``: the highest sequence number seen before it,
minus its own): the step jitter kind bounds the first by a half-step.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import statistics
import struct
import time
from typing import Any

_FMT = "!IQ"  # sequence number, send time (ns, CLOCK_MONOTONIC)
PAYLOAD = 64
#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS; Python's socket module lacks it): the
#: kernel's receive time of each datagram, so a receiver that wakes late does not make
#: a packet look later than it arrived. It is CLOCK_REALTIME, moved onto CLOCK_MONOTONIC
#: by the clocks' offset (``clock_offset_ns``)
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")


def _addr(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host, int(port)


def send(to: str, count: int, pps: float) -> None:
    """Send ``count`` datagrams at ``pps``, paced on a schedule (a late wake-up catches up)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    dst = _addr(to)
    start = time.monotonic()
    seq = 0
    while seq < count:
        due = min(count, int((time.monotonic() - start) * pps) + 1)
        while seq < due:
            sock.sendto(struct.pack(_FMT, seq, time.monotonic_ns()).ljust(PAYLOAD, b"\0"), dst)
            seq += 1
        time.sleep(0.0002)


def _kernel_ns(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive time (ns) from a datagram's ancillary data, if it came."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec) * 1_000_000_000 + int(nsec)
    return None


def clock_offset_ns(tries: int = 200) -> int:
    """CLOCK_MONOTONIC minus CLOCK_REALTIME (ns), from the tightest of ``tries`` brackets
    monotonic-realtime-monotonic: one pair read back to back can straddle a preemption
    and be off by a tenth of a millisecond on a busy host, the tightest is off by about
    a microsecond. The two clocks drift apart by microseconds a second (NTP's slew of
    CLOCK_REALTIME), so a probe of seconds calibrates once."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        a = time.monotonic_ns()
        r = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (a + b) // 2 - r)
    assert best is not None
    return best[1]


def lateness_ms(arrivals: dict[int, int]) -> list[float]:
    """How late each overtaken packet arrived (ms): after the earliest arrival of any
    packet sent after it. A packet is in the list exactly when one sent later arrived
    before it, so the list is as long as the receiver's ``reordered`` count."""
    late = []
    earliest_later = math.inf
    for seq in sorted(arrivals, reverse=True):
        at = arrivals[seq]
        if at > earliest_later:
            late.append((at - earliest_later) / 1e6)
        earliest_later = min(earliest_later, at)
    return late


def recv(bind: str, count: int, out: str, idle: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind(_addr(bind))
    sock.settimeout(30.0)  # the first datagram
    offset = clock_offset_ns()
    delays: dict[int, float] = {}
    arrivals: dict[int, int] = {}  # seq -> arrival (ns, CLOCK_MONOTONIC)
    reordered = 0
    extent_max = 0
    highest = -1
    duplicates = 0
    try:
        while len(delays) < count:
            data, anc, _flags, _addr_from = sock.recvmsg(2048, socket.CMSG_SPACE(_TIMESPEC.size))
            now = time.monotonic_ns()
            kernel = _kernel_ns(anc)
            # the delay from the kernel's receive time, not the read's: on a busy host the
            # receiver's late wake-ups made the mean one-way delay a millisecond long
            arrived = now if kernel is None else kernel + offset
            seq, sent = struct.unpack_from(_FMT, data)
            if seq in delays:
                duplicates += 1
                continue
            delays[seq] = (arrived - sent) / 1e6
            arrivals[seq] = arrived
            if seq < highest:
                reordered += 1
                extent_max = max(extent_max, highest - seq)
            highest = max(highest, seq)
            sock.settimeout(idle)
    except TimeoutError:
        pass
    vals = list(delays.values())
    late = lateness_ms(arrivals)
    result: dict[str, Any] = {
        "sent": count,
        "received": len(vals),
        "lost": count - len(vals),
        "reordered": reordered,
        "late_max_ms": max(late, default=0.0),
        "late_mean_ms": statistics.fmean(late) if late else 0.0,
        "extent_max": extent_max,
        "duplicates": duplicates,
    }
    if vals:
        result.update(
            mean_ms=statistics.fmean(vals),
            sd_ms=statistics.stdev(vals) if len(vals) > 1 else 0.0,
            min_ms=min(vals),
            max_ms=max(vals),
        )
    with open(out, "w") as f:
        json.dump(result, f)


def main() -> None:
    ap = argparse.ArgumentParser(prog="quicbed.link.udpprobe")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--pps", type=float, required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--count", type=int, required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--idle", type=float, default=2.0)
    a = ap.parse_args()
    if a.cmd == "send":
        send(a.to, a.count, a.pps)
    else:
        recv(a.bind, a.count, a.out, a.idle)


if __name__ == "__main__":
    main()
