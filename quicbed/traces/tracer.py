"""Per-load transport traces: the instruments that answer *why* a load took its time.

A cell runs at one capture level (``--traces``; recorded in the attempt's provenance,
not in the cell's identity: traces observe a load, they are not a condition of it):

- ``none``: HARs and server logs only, as before;
- ``light`` (default): the QUIC server's qlog per connection, and the TCP sender's
  state during each load (the kernel's ``tcp:tcp_probe`` tracepoint, per ACK);
- ``full``: also a packet capture per load on the client, Chromium's NetLog and the
  TLS key log of both arms (so the capture opens decrypted in Wireshark/tshark).

Every instrument is a :class:`Tracer`. The cell runner calls :meth:`TraceSet.begin`
before each load and :meth:`TraceSet.end` after it, and :meth:`TraceSet.finish` once
the servers have stopped (qlog files are complete only when their connections have
closed). A trace problem never fails a load: the load is stored, and the trace's
absence is recorded with its reason (``missing``).

Layout, beside the HARs, addressed by (cell, attempt, arm, rep)::

    DIR/traces/<cell>/<attempt>/<arm>-<rep:03d>/   one load's files (below), and
        trace.json                                 what was captured, sizes, SHA-256,
                                                   what is missing and why
        transport.csv.gz                           the load's transport samples (below)
        qlog/<odcid>_server.sqlog.gz               h3: quic-go's qlog (JSON-SEQ)
        tcp_probe.txt.gz                           h2: the raw tracepoint lines
        capture.pcap.gz                            full: the load's packets (client side)
    DIR/traces/<cell>/<attempt>/<arm>-keys.log     full: Chromium's TLS key log (a secret)
    DIR/traces/<cell>/<attempt>/<arm>-netlog.json.gz  full: Chromium's NetLog of the arm

``transport.csv.gz`` has one shape for both protocols, so both arms are compared on
the same axes (columns :data:`SAMPLE_COLUMNS`; empty cell = not known):

- ``t_ms``: ms since the load began (``begin``), the same clock for every source;
- ``event``: ``sample`` (the sender's state after an ACK), ``sent``, ``retransmit``
  (TCP) or ``lost`` (QUIC), ``spurious`` (QUIC: declared lost, acknowledged later),
  ``thresholds`` (QUIC: the loss-detection thresholds as the server set them, from then
  on), ``handshake_done``;
- ``conn``: the connection (TCP: the client's port; QUIC: the ODCID);
- ``cwnd_bytes``, ``ssthresh_bytes``, ``in_flight_bytes``, ``delivered_bytes``
  (acknowledged so far on this connection), ``srtt_ms``, ``rtt_sample_ms``,
  ``snd_wnd_bytes`` (the peer's receive window), ``bytes`` (of a sent or lost packet);
- ``packet_threshold`` (packets; 0: switched off) and ``time_threshold`` (a factor of
  the RTT) of a ``thresholds`` row: quic-go logs them (``recovery:parameters_set``) at
  the start and whenever a spurious loss makes it adapt them;
- ``phase``: the sender's congestion phase at a sample (:data:`PHASES`): QUIC's from
  its qlog, TCP's slow start while cwnd < ssthresh, else avoidance; empty: unknown;
- ``source``: ``tcp_probe``, ``ss`` or ``qlog``.

A run's ``detail["traces"]`` says where its files are (relative to DIR) and what is
missing; ``detail["transport"]`` holds the derived facts (quicbed.traces.facts).
"""

from __future__ import annotations

import gzip
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.paths import sha256_file
from quicbed.testbed.lifecycle import RPath, Testbed

LEVELS = ("none", "light", "full")
SAMPLE_COLUMNS = (
    "t_ms",
    "event",
    "conn",
    "cwnd_bytes",
    "ssthresh_bytes",
    "in_flight_bytes",
    "delivered_bytes",
    "srtt_ms",
    "rtt_sample_ms",
    "snd_wnd_bytes",
    "bytes",
    "phase",
    "source",
    "packet_threshold",
    "time_threshold",
)
#: a sender's congestion phase (column ``phase``): as quic-go's qlog names them
#: (recovery:congestion_state_updated), and as tcp_probe's cwnd against ssthresh shows
#: them (TCP: slow start or avoidance; the tracepoint marks no recovery)
PHASES = ("slow_start", "congestion_avoidance", "recovery", "application_limited")
#: one load's trace files together may not exceed this; a larger one is cut and says so
MAX_LOAD_BYTES = 64 * 1024 * 1024


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise QuicbedError(f"--traces: unknown level {level!r} (one of {', '.join(LEVELS)})")
    return level


@dataclass(frozen=True)
class LoadKey:
    """Which load a trace belongs to."""

    cell_id: str
    attempt: int
    arm: str
    rep: int

    def rel(self) -> Path:
        """The load's folder, relative to the results folder."""
        return Path("traces") / self.cell_id / str(self.attempt) / f"{self.arm}-{self.rep:03d}"

    def arm_rel(self, name: str) -> Path:
        """A per-arm file of the attempt (key log, NetLog), relative to the results folder."""
        return Path("traces") / self.cell_id / str(self.attempt) / f"{self.arm}-{name}"


@dataclass
class LoadTrace:
    """What the tracers made of one load, filled in as they go."""

    key: LoadKey
    began_mono: float  # time.monotonic() at begin: t_ms = 0
    began_wall: float  # time.time() at begin (qlog times are wall-clock based)
    files: dict[str, str] = field(default_factory=dict)  # name -> path relative to DIR
    missing: dict[str, str] = field(default_factory=dict)  # instrument -> why
    samples: list[dict[str, Any]] = field(default_factory=list)  # SAMPLE_COLUMNS rows
    notes: list[str] = field(default_factory=list)
    #: when the browser started the page (its HAR), ms after ``began``
    page_start_ms: float | None = None

    def page_started(self, har: dict[str, Any] | None) -> None:
        """Note when the HAR's page started, on this trace's clock (same machine's wall
        clock; the HAR keeps whole milliseconds)."""
        from datetime import datetime

        try:
            started = datetime.fromisoformat(har["log"]["pages"][0]["startedDateTime"])  # type: ignore[index]
        except (TypeError, KeyError, IndexError, ValueError):
            return
        self.page_start_ms = round(started.timestamp() * 1000 - self.began_wall * 1000, 3)


@dataclass
class TraceContext:
    """What tracers need to know about the cell they observe."""

    level: str
    testbed: Testbed
    results: Path  # the results folder (local)
    cell_id: str
    attempt: int
    arms: tuple[str, ...]
    server_port: int = 443
    #: per arm, a folder on the server role where the QUIC server writes its qlog files
    qlog_dirs: dict[str, RPath] = field(default_factory=dict)
    #: per arm, its transport (tcp or udp), as its resolved arm says (the runner knows
    #: every arm's stack; tracers sit below the spec and ask nothing of it)
    transports: dict[str, str] = field(default_factory=dict)
    #: kernel trace buffer per CPU for the TCP tracer (KiB); None: its default, sized for
    #: a page load. A transfer flow runs for seconds at the link's rate: its cell asks
    #: for more (quicbed.traces.tcp reads the buffer once, at the end of a load)
    tcp_buffer_kb: int | None = None
    #: server ports whose packets are not the loads' (a page cell's background flows,
    #: quicbed.run.background): left out of a load's capture
    other_ports: tuple[int, ...] = ()
    #: the server role's addresses the loads reach, where they are not the testbed's
    #: server_ip alone: a replayed page's origins, each at its own (quicbed.replay.serve)
    server_ips: tuple[str, ...] = ()

    def servers(self) -> tuple[str, ...]:
        """The addresses whose packets and flows are the loads'."""
        return self.server_ips or (self.testbed.server_ip,)

    def transport(self, arm: str) -> str:
        try:
            return self.transports[arm]
        except KeyError:
            raise QuicbedError(f"tracing: arm {arm} has no transport in the context") from None

    def quic_arms(self) -> list[str]:
        return [a for a in self.arms if self.transport(a) == "udp"]

    def tcp_arms(self) -> list[str]:
        return [a for a in self.arms if self.transport(a) == "tcp"]


class Tracer(ABC):
    """One instrument over a cell's loads (qlog, TCP sender state, packet capture)."""

    name: str
    #: the lowest level that uses this instrument
    level: str = "light"

    def unavailable(self, ctx: TraceContext) -> str | None:
        """Why this instrument cannot run here (recorded per load as missing), or None."""
        return None

    def start(self, ctx: TraceContext) -> None:  # noqa: B027 - most instruments need none
        """Before the cell's first load (servers not yet started)."""

    @abstractmethod
    def begin(self, trace: LoadTrace) -> None:
        """Just before one load."""

    @abstractmethod
    def end(self, trace: LoadTrace) -> None:
        """Just after that load: write its files into the load's folder, add samples."""

    def finish(self, traces: list[LoadTrace]) -> None:  # noqa: B027
        """After the cell's last load, servers stopped: complete what only completes then."""

    def stop(self) -> None:  # noqa: B027
        """Undo ``start`` (also after an error); idempotent."""


def write_gz(path: Path, data: bytes) -> int:
    """Write ``path`` compressed, atomically; the compressed size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wb", compresslevel=6) as f:
        f.write(data)
    tmp.replace(path)
    return path.stat().st_size


def write_samples(path: Path, rows: list[dict[str, Any]]) -> int:
    """``transport.csv.gz`` in the documented shape, ordered by time."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=SAMPLE_COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in sorted(rows, key=lambda r: (r.get("t_ms") is None, r.get("t_ms") or 0)):
        w.writerow({k: ("" if r.get(k) is None else r[k]) for k in SAMPLE_COLUMNS})
    return write_gz(path, buf.getvalue().encode())


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``transport.csv.gz``, numbers as floats, empty as None."""
    import csv
    import io

    rows = []
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(io.StringIO(f.read())):
            row: dict[str, Any] = {}
            for k, v in r.items():
                if v == "":
                    row[k] = None
                elif k in ("event", "conn", "source", "phase"):
                    row[k] = v
                else:
                    row[k] = float(v)
            rows.append(row)
    return rows


class TraceSet:
    """The tracers of one level over one cell; what the cell runner talks to."""

    def __init__(self, ctx: TraceContext, tracers: list[Tracer]) -> None:
        self.ctx = ctx
        self.tracers: list[Tracer] = []
        self.unavailable: dict[str, str] = {}
        for t in tracers:
            if LEVELS.index(t.level) > LEVELS.index(ctx.level):
                continue
            why = t.unavailable(ctx)
            if why:
                self.unavailable[t.name] = why
            else:
                self.tracers.append(t)
        self.loads: list[LoadTrace] = []

    def start(self) -> None:
        for t in list(self.tracers):
            try:
                t.start(self.ctx)
            except QuicbedError as exc:
                self.unavailable[t.name] = str(exc)
                self.tracers.remove(t)

    def begin(self, arm: str, rep: int) -> LoadTrace:
        key = LoadKey(self.ctx.cell_id, self.ctx.attempt, arm, rep)
        trace = LoadTrace(key, time.monotonic(), time.time(), missing=dict(self.unavailable))
        for t in self.tracers:
            self._guard(t, trace, t.begin)
        self.loads.append(trace)
        return trace

    def end(self, trace: LoadTrace) -> None:
        for t in self.tracers:
            self._guard(t, trace, t.end)

    def finish(self) -> None:
        """Complete every load's traces, then write its samples and ``trace.json``."""
        for t in self.tracers:
            try:
                t.finish(self.loads)
            except QuicbedError as exc:
                for trace in self.loads:
                    trace.missing.setdefault(t.name, str(exc))
        for trace in self.loads:
            self._seal(trace)

    def stop(self) -> None:
        for t in self.tracers:
            t.stop()

    def detail(self, trace: LoadTrace) -> dict[str, Any]:
        """What a run row records about its traces (before ``finish``: the plan)."""
        return {
            "level": self.ctx.level,
            "dir": str(trace.key.rel()),
            "files": trace.files,
            "missing": trace.missing,
            "notes": trace.notes,
        }

    @staticmethod
    def _guard(t: Tracer, trace: LoadTrace, fn: Any) -> None:
        try:
            fn(trace)
        except QuicbedError as exc:
            trace.missing[t.name] = str(exc)

    def _seal(self, trace: LoadTrace) -> None:
        root = self.ctx.results
        folder = root / trace.key.rel()
        if trace.samples:
            path = folder / "transport.csv.gz"
            write_samples(path, trace.samples)
            trace.files["transport"] = str(path.relative_to(root))
        total = 0
        manifest: dict[str, Any] = {}
        for name, rel in sorted(trace.files.items()):
            p = root / rel
            if p.exists():
                size = p.stat().st_size
                total += size
                manifest[name] = {"path": rel, "bytes": size, "sha256": sha256_file(p)}
        if total > MAX_LOAD_BYTES:
            trace.notes.append(
                f"trace files of this load total {total} bytes, over the cap of {MAX_LOAD_BYTES}"
            )
        folder.mkdir(parents=True, exist_ok=True)
        body = {
            "format": 1,
            "load": trace.key.__dict__,
            "level": self.ctx.level,
            "began_wall": trace.began_wall,
            "files": manifest,
            "missing": trace.missing,
            "notes": trace.notes,
        }
        tmp = folder / "trace.json.tmp"
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True))
        tmp.replace(folder / "trace.json")
