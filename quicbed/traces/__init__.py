"""Per-load transport traces: qlog, TCP sender state, packet captures, TLS keys.

Levels, layout and the common sample shape are in :mod:`quicbed.traces.tracer`.
"""

from __future__ import annotations

from quicbed.traces.tracer import LEVELS, TraceContext, Tracer, TraceSet, check_level

__all__ = ["LEVELS", "TraceContext", "TraceSet", "Tracer", "check_level", "instruments"]


def instruments() -> list[Tracer]:
    """Every instrument, cheapest first; a TraceSet keeps those of its level."""
    from quicbed.traces.capture import CaptureTracer
    from quicbed.traces.qlog import QlogTracer
    from quicbed.traces.tcp import TcpTracer

    return [QlogTracer(), TcpTracer(), CaptureTracer()]
