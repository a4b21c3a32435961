"""Mahimahi's trace format, the one way quicbed reads and writes it: one integer per
line, a millisecond offset at which one delivery opportunity of
:data:`OPPORTUNITY_BYTES` IP bytes (one MTU-sized packet) occurs, non-decreasing,
repeated with the period of its last offset. Users' existing traces work as they
are; quicbed.model.tracegen writes the same format; go/internal/linkmodel reads it.
"""

from __future__ import annotations

from quicbed.errors import QuicbedError

#: the IP bytes one delivery opportunity carries: one 1500-byte packet (Mahimahi's own
#: queue counts 1504, its TUN frame, which quicbed's Ethernet frames do not have)
OPPORTUNITY_BYTES = 1500
#: a trace longer than this is a typo or the wrong file (Mahimahi's own traces run
#: minutes, with some 10^5-10^6 lines)
MAX_TRACE_LINES = 20_000_000
MAX_PERIOD_MS = 24 * 3600 * 1000


def parse_trace(text: str, what: str) -> list[int]:
    """A Mahimahi trace's offsets (ms), or an error naming ``what`` and the bad line."""
    out: list[int] = []
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        if not s.isdigit():
            raise QuicbedError(
                f"{what}: line {n}: {s[:40]!r} is not a millisecond offset (Mahimahi's "
                "format: one whole number >= 0 per line)"
            )
        v = int(s)
        if out and v < out[-1]:
            raise QuicbedError(
                f"{what}: line {n}: {v} comes after {out[-1]} (offsets must not decrease)"
            )
        out.append(v)
        if len(out) > MAX_TRACE_LINES:
            raise QuicbedError(f"{what}: more than {MAX_TRACE_LINES} lines")
    if not out:
        raise QuicbedError(f"{what}: no delivery opportunity (the trace is empty)")
    if out[-1] == 0:
        raise QuicbedError(f"{what}: the last offset is 0 ms: the trace has no length to repeat")
    if out[-1] > MAX_PERIOD_MS:
        raise QuicbedError(f"{what}: it runs {out[-1]} ms, more than a day")
    return out


def trace_text(offsets: list[int]) -> str:
    """The canonical file of a trace: one offset per line (what the store keeps)."""
    return "".join(f"{v}\n" for v in offsets)


def mean_mbit(offsets: list[int]) -> float:
    """A trace's mean rate in Mbit/s of IP bytes."""
    return len(offsets) * OPPORTUNITY_BYTES * 8 / (offsets[-1] / 1000) / 1e6
