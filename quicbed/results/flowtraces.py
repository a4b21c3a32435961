"""Transport traces of transfer flows (bulk, compete), from the page loads' instruments.

A transfer cell traced at ``light`` or ``full`` runs the instruments page cells run
(quicbed.traces: the QUIC server's qlog, the TCP sender's ``tcp_probe``; at ``full``
also a packet capture on the client) through the same :class:`TraceSet`, so files,
sample shape, ``trace.json``, facts and what is missing are what a page load has. The
one difference is what a "load" is:

- ``bulk``: one flow at a time, so a flow is a load, keyed (arm, rep) as the flow is;
- ``compete``: the flows of a repetition run at once, so a repetition is one load per
  arm (keyed (arm, repetition)), holding every flow of that arm, each its own
  connection. A TCP arm's load holds every TCP connection of the server during the
  repetition (tcp_probe cannot tell the arms apart: they share the server's port), so
  each flow takes only the rows of its own connection.

Each flow's record (``FlowResult.trace``) says where its load's files are, which
connection in them is the flow's (TCP: the client's port; QUIC: the original
destination connection ID, matched by the client port that quic-go's qlog logs when a
load holds several), ``t0_ms`` (the trace time that is t = 0 of the flow's throughput
timeline: the compete run's common start; a bulk flow's trace begins as its client is
started) and the facts derived from its rows (quicbed.traces.facts: losses, spurious
losses, window limit, ...). :func:`flow_samples` reads a flow's rows back on the
throughput timeline's clock, which the report's window figures draw.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quicbed.errors import QuicbedError
from quicbed.traces import wire
from quicbed.traces.facts import derive
from quicbed.traces.tracer import LoadTrace, TraceSet, read_samples
from quicbed.traces.wire import Wire

if TYPE_CHECKING:
    from quicbed.results.transfers import BulkResult, CompeteResult, FlowResult


@dataclass
class FlowLoad:
    """One traced load of a transfer cell: a bulk flow, or one arm of a compete run."""

    trace: LoadTrace
    arm: str
    rep: int
    #: wall-clock time (s) of t = 0 of its flows' throughput timelines
    zero_wall: float


class FlowTracing:
    """A transfer cell's TraceSet and the loads it traced, as the transfers go."""

    def __init__(self, tracing: TraceSet) -> None:
        self.tracing = tracing
        self.loads: list[FlowLoad] = []

    def begin(self, arm: str, rep: int) -> LoadTrace:
        """Just before the flow (bulk) or the repetition's flows (compete) start."""
        return self.tracing.begin(arm, rep)

    def end(self, lt: LoadTrace, zero_wall: float) -> None:
        """Once the flows are done, their clients lingering (their connections still in
        the server's table); ``zero_wall``: t = 0 of their throughput timelines."""
        self.tracing.end(lt)
        self.loads.append(FlowLoad(lt, lt.key.arm, lt.key.rep, zero_wall))

    def seal(
        self,
        result: BulkResult | CompeteResult,
        *,
        spurious: dict[str, bool],
        qlog_writers: dict[str, bool],
        ports: set[int],
    ) -> None:
        """Servers stopped: every flow of ``result`` gets its ``trace`` (:func:`seal`)."""
        seal(
            self.tracing,
            self.loads,
            result,
            spurious=spurious,
            qlog_writers=qlog_writers,
            ports=ports,
        )


def seal(
    tracing: TraceSet,
    loads: list[FlowLoad],
    result: BulkResult | CompeteResult,
    *,
    spurious: dict[str, bool],
    qlog_writers: dict[str, bool],
    ports: set[int],
) -> None:
    """Complete the loads' traces (servers stopped: qlog files are closed), then give
    every flow of ``result`` its ``trace`` record. ``spurious``: per arm, whether its
    server logs spurious losses; ``qlog_writers``: per QUIC arm, whether its server
    writes qlog at all (Envoy's QUICHE and gQUIC's server do not); ``ports``: the
    arms' server ports. At level full a flow's record also holds its connection's
    counts from the wire (``wire``: quicbed.traces.wire), read from its load's capture
    with its client's key log."""
    root = tracing.ctx.results
    for held in loads:  # the clients' key logs (level full), as a page load's
        keys = held.trace.key.arm_rel("keys.log")
        if (root / keys).exists():
            held.trace.files["keys"] = str(keys)
    tracing.finish()
    by_key = {(ld.arm, ld.rep): ld for ld in loads}
    wires: dict[tuple[str, int], Wire | str] = {}
    for rep, f in _flows(result):
        ld = by_key.get((f.arm, rep))
        if ld is None:
            continue
        lt = ld.trace
        detail = tracing.detail(lt)
        if not qlog_writers.get(f.arm, True):
            detail["missing"] = {
                **detail["missing"],
                "qlog": "this arm's QUIC server writes no qlog: no window, RTT or losses",
            }
        conn = flow_conn(f, lt, tracing.ctx.results)
        rows = [r for r in lt.samples if conn is not None and r.get("conn") == conn]
        facts = derive(
            rows, arm=f.flow, ttfb_ms=None, plt_ms=None, logs_spurious=spurious.get(f.arm, False)
        )
        t0_ms = round((ld.zero_wall - lt.began_wall) * 1000.0, 3)
        f.trace = detail | {"conn": conn, "t0_ms": t0_ms, "facts": facts}
        if "capture" in lt.files:
            key = (f.arm, rep)
            if key not in wires:
                wires[key] = _wire(root, lt, ports)
            f.trace["wire"] = _flow_wire(wires[key], f)


def _wire(root: Path, lt: LoadTrace, ports: set[int]) -> Wire | str:
    """A load's wire timeline (quicbed.traces.wire), or why there is none."""
    try:
        return wire.read_stored(root, lt.files, ports, lt.began_wall)
    except QuicbedError as exc:
        return str(exc)


def _flow_wire(w: Wire | str, f: FlowResult) -> dict[str, Any]:
    """The flow's connection's counts from the wire, found by its client port."""
    from quicbed.servers.webserver import port_of

    if isinstance(w, str):
        return {"error": w}
    port = port_of(f.local_addr)
    hit = [c for c in w.conns if c.client_port == port]
    return hit[0].as_dict() if hit else {"error": f"no connection from client port {port}"}


def _flows(result: BulkResult | CompeteResult) -> list[tuple[int, FlowResult]]:
    from quicbed.results.transfers import BulkResult

    if isinstance(result, BulkResult):
        return [(r.rep, r.flow) for r in result.runs]
    return [(r.rep, f) for r in result.runs for f in r.flows]


def flow_conn(f: FlowResult, lt: LoadTrace, root: Path) -> str | None:
    """The connection in ``lt``'s rows that is flow ``f``'s, or None."""
    from quicbed.servers.webserver import port_of

    port = port_of(f.local_addr)
    if f.protocol == "h2":
        return str(port) if port is not None else None
    conns = sorted({str(r["conn"]) for r in lt.samples if r.get("source") == "qlog"})
    if len(conns) == 1:
        return conns[0]
    from quicbed.traces.qlog import qlog_client_port

    for name, rel in lt.files.items():
        if name.startswith("qlog:") and name[5:] in conns and port is not None:
            with gzip.open(root / rel, "rb") as fh:
                if qlog_client_port(fh.read()) == port:
                    return name[5:]
    return None


def flow_samples(root: Path, f: FlowResult, *, offset: bool = True) -> list[dict[str, Any]]:
    """A traced flow's rows (base.SAMPLE_COLUMNS) with ``t_s``: seconds on its
    throughput timeline's clock (the compete run's with ``offset``, else the flow's
    own, as FlowResult.timeline); [] when it has none."""
    tr = f.trace or {}
    rel, conn = (tr.get("files") or {}).get("transport"), tr.get("conn")
    if not rel or conn is None or not (root / rel).exists():
        return []
    shift = (tr.get("t0_ms") or 0.0) + (0.0 if offset else f.start_offset_s * 1000.0)
    out = []
    for r in read_samples(root / rel):
        if r.get("conn") == conn and r.get("t_ms") is not None:
            out.append(r | {"t_s": (r["t_ms"] - shift) / 1000.0})
    return out
