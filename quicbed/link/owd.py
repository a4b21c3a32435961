"""One-way delay probe: ``python -m quicbed.link.owd send|recv``.

Runs in two network namespaces of one machine. Namespaces share CLOCK_MONOTONIC,
so the receiver subtracts the sender's timestamp carried in each datagram.
Internal to quicbed.link.probes.one_way_delay.
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import statistics
import struct
import time

_FMT = "!IQ"  # sequence number, send time (ns, CLOCK_MONOTONIC)


def _addr(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host, int(port)


def send(to: str, count: int, interval: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dst = _addr(to)
    start = time.monotonic()
    for seq in range(count):
        # pace on a schedule so a late wake-up does not stretch the whole run
        delay = start + seq * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sock.sendto(struct.pack(_FMT, seq, time.monotonic_ns()).ljust(64, b"\0"), dst)


def recv(bind: str, count: int, out: str, idle: float = 3.0) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(_addr(bind))
    sock.settimeout(30.0)  # first packet
    delays: dict[int, float] = {}
    order: list[int] = []
    try:
        while len(delays) < count:
            data = sock.recv(2048)
            now = time.monotonic_ns()
            seq, sent = struct.unpack_from(_FMT, data)
            delays[seq] = (now - sent) / 1e6
            order.append(seq)
            sock.settimeout(idle)
    except TimeoutError:
        pass
    vals = list(delays.values())
    reordered = sum(1 for a, b in itertools.pairwise(order) if b < a)
    result = {"sent": count, "received": len(vals), "reordered": reordered}
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
    ap = argparse.ArgumentParser(prog="quicbed.link.owd")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--count", type=int, default=100)
    s.add_argument("--interval", type=float, default=0.01)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--count", type=int, default=100)
    r.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "send":
        send(a.to, a.count, a.interval)
    else:
        recv(a.bind, a.count, a.out)


if __name__ == "__main__":
    main()
