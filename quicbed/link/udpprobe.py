"""Paced UDP probe: ``python -m quicbed.link.udpprobe send|recv``.

One stream gives one-way delay, loss and reordering of a direction at once. The
namespaces share CLOCK_MONOTONIC, so the receiver subtracts the sender's timestamp
carried in each datagram. Unlike iperf3, the receiver waits for the link to drain
(idle timeout) instead of stopping when the sender says so, so packets still in a
jittered delay line are not miscounted as lost. Internal to quicbed.link.probes.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import time
from typing import Any

_FMT = "!IQ"  # sequence number, send time (ns, CLOCK_MONOTONIC)
PAYLOAD = 64


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


def recv(bind: str, count: int, out: str, idle: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(_addr(bind))
    sock.settimeout(30.0)  # the first datagram
    delays: dict[int, float] = {}
    reordered = 0
    highest = -1
    duplicates = 0
    try:
        while len(delays) < count:
            data = sock.recv(2048)
            now = time.monotonic_ns()
            seq, sent = struct.unpack_from(_FMT, data)
            if seq in delays:
                duplicates += 1
                continue
            delays[seq] = (now - sent) / 1e6
            if seq < highest:
                reordered += 1
            highest = max(highest, seq)
            sock.settimeout(idle)
    except TimeoutError:
        pass
    vals = list(delays.values())
    result: dict[str, Any] = {
        "sent": count,
        "received": len(vals),
        "lost": count - len(vals),
        "reordered": reordered,
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
