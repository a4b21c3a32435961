"""quic-go's qlog per QUIC connection, assigned to the load that opened it.

The QUIC server (``-qlog-dir``) writes ``<odcid>_server.sqlog`` per connection: JSON
text sequences (RFC 7464: each record starts with RS, 0x1e), a header record, then one
record per event, schema ``urn:ietf:params:qlog:events:quic-14``. A file is created
when its connection starts but is complete only when the connection closes (the browser
closes it at the start of the next load; the server at the end of the cell), so
``begin``/``end`` only note which files are new during each h3 load, and ``finish``
(servers stopped) reads them: gzipped into the load's folder, checked with
:func:`validate_qlog`, and turned into sample rows (base.SAMPLE_COLUMNS) by
:func:`qlog_samples`.

Listing the folder is the only per-load cost: ``os.listdir`` on the local testbed
(one file system; its ``read_bytes`` reads in place too), ``ls`` over the testbed
elsewhere.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.testbed.lifecycle import RPath
from quicbed.traces.tracer import PHASES, LoadTrace, TraceContext, Tracer, write_gz

RS = b"\x1e"
#: packet types -> packet number space (0-RTT and 1-RTT share the application space)
SPACE = {"initial": "initial", "handshake": "handshake", "0RTT": "app", "1RTT": "app"}
_HS_DONE = ("handshake_complete", "handshake_confirmed")
#: the qlog QUIC event schema's newer names (quiche writes draft 12's "quic:" events) for
#: the ones quic-go writes; the data fields read here are the same in both
ALIASES = {
    "quic:packet_sent": "transport:packet_sent",
    "quic:packet_received": "transport:packet_received",
    "quic:recovery_metrics_updated": "recovery:metrics_updated",
    "quic:packet_lost": "recovery:packet_lost",
    "quic:recovery_parameters_set": "recovery:parameters_set",  # quic-go's loss thresholds
    # quiche names its CUBIC/Reno states as quic-go does (slow_start, recovery, ...);
    # its BBR's own (startup, drain, ...) are no PHASES and leave the phase unknown
    "quic:congestion_state_updated": "recovery:congestion_state_updated",
}
_FRACTION = re.compile(r"^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
#: the client's address in a quicbed quiche server's qlog description (its port)
_PEER = re.compile(r"\bpeer=\S*:(\d+)\b")


def wall_clock_s(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time with up to nanoseconds (Go's
    ``RFC3339Nano``; Python 3.11's ``fromisoformat`` stops at microseconds)."""
    m = _FRACTION.match(text)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    base, frac, tz = m.groups()
    whole = datetime.fromisoformat(base + ("+00:00" if tz == "Z" else tz)).timestamp()
    return whole + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _records(data: bytes) -> list[bytes]:
    return [r for r in data.split(RS)[1:] if r.strip()]


def validate_qlog(data: bytes) -> list[str]:
    """Problems of a quic-go JSON-SEQ qlog file (empty: none), each one named.

    Checks: JSON-SEQ framing (starts with RS; every record one JSON object), the header
    (``qlog_version``, ``qlog_format`` JSON-SEQ, ``serialization_format``, the trace's
    ``vantage_point``, ``common_fields.reference_time.wall_clock_time`` readable), and
    every event (a number ``time`` that never goes backwards, a ``category:event``
    ``name``, an object ``data``).
    """
    if not data:
        return ["empty file"]
    if not data.startswith(RS):
        return ["not JSON-SEQ: the file does not start with the record separator 0x1e"]
    recs = _records(data)
    problems: list[str] = []
    parsed: list[Any] = []
    for i, r in enumerate(recs):
        try:
            parsed.append(json.loads(r))
        except ValueError as exc:
            last = " (the last: truncated, never closed?)" if i == len(recs) - 1 else ""
            problems.append(f"record {i} is not JSON{last}: {exc}")
            parsed.append(None)
    if not parsed or not isinstance(parsed[0], dict):
        return [*problems, "no header record"]
    h = parsed[0]
    for k, want in (
        ("qlog_version", None),
        ("qlog_format", "JSON-SEQ"),
        ("serialization_format", "application/qlog+json-seq"),
    ):
        if k not in h:
            problems.append(f"header: no {k}")
        elif want and h[k] != want:
            problems.append(f"header: {k} is {h[k]!r}, not {want!r}")
    tr = h.get("trace")
    if not isinstance(tr, dict):
        problems.append("header: no trace object")
    else:
        if "vantage_point" not in tr:
            problems.append("header: trace has no vantage_point")
        ref = ((tr.get("common_fields") or {}).get("reference_time") or {}).get("wall_clock_time")
        if ref is None:
            problems.append("header: no trace.common_fields.reference_time.wall_clock_time")
        else:
            try:
                wall_clock_s(ref)
            except ValueError as exc:
                problems.append(f"header: reference_time: {exc}")
    events = parsed[1:]
    if not events:
        problems.append("no events")
    last_t = None
    for i, e in enumerate(events, start=1):
        if e is None:
            continue
        if not isinstance(e, dict):
            problems.append(f"record {i} is not an object")
            continue
        t = e.get("time")
        if not isinstance(t, (int, float)):
            problems.append(f"record {i}: no number 'time'")
        elif last_t is not None and t < last_t:
            problems.append(f"record {i}: time {t} goes backwards (after {last_t})")
        else:
            last_t = t
        if not isinstance(e.get("name"), str) or ":" not in e["name"]:
            problems.append(f"record {i}: no 'category:event' name")
        if not isinstance(e.get("data"), dict):
            problems.append(f"record {i}: no data object")
        if len(problems) >= 20:
            problems.append("(more problems not listed)")
            break
    return problems


def qlog_samples(
    data: bytes, *, began_wall: float, conn: str, until_wall: float | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Sample rows of one qlog file, times in ms since ``began_wall``, and notes.

    - ``recovery:metrics_updated`` with a congestion window -> ``sample``:
      ``congestion_window``, ``bytes_in_flight``, ``smoothed_rtt``, ``latest_rtt``
      (quic-go logs no ssthresh and no single peer window: those stay empty);
    - ``recovery:packet_lost`` -> ``lost`` with the lost packet's size (the size its
      ``packet_sent`` logged, matched by packet number space and number);
    - ``recovery:congestion_state_updated`` -> the ``phase`` of the samples after it
      (slow_start, congestion_avoidance, recovery, application_limited);
    - ``recovery:spurious_loss`` (quic-go: a packet declared lost, then acknowledged)
      -> ``spurious``, its ``rtt_sample_ms`` the time by which it was overtaken;
    - ``recovery:parameters_set`` with a reordering or time threshold (quic-go: at the
      start, and each time a spurious loss makes it switch the packet threshold off or
      raise the time threshold) -> ``thresholds``: ``packet_threshold`` (0: off),
      ``time_threshold`` (a factor of the RTT);
    - ``quic:connection_state_updated`` to ``handshake_complete`` (quic-go's server logs
      ``handshake_confirmed`` at the same moment) -> ``handshake_done``;
    - ``delivered_bytes``: the sizes (``raw.length``, whole UDP payload: QUIC headers
      and AEAD tags included, unlike TCP's sequence numbers) of the sent packets newly
      acknowledged by the ACK frames the server received, summed.

    No ``sent`` rows: TCP has none to compare with, and they would double the file.
    Events at or after ``until_wall`` (the next h3 load's start) are left out: a
    connection that outlives its load must not describe the next one.
    """
    notes: list[str] = []
    recs = _records(data)
    if not recs:
        return [], ["no records"]
    try:
        head = json.loads(recs[0])
        ref_s = wall_clock_s(head["trace"]["common_fields"]["reference_time"]["wall_clock_time"])
    except (ValueError, KeyError, TypeError) as exc:
        return [], [f"no usable reference time: {exc}"]
    offset_ms = (ref_s - began_wall) * 1000.0
    limit_ms = None if until_wall is None else (until_wall - began_wall) * 1000.0
    sent: dict[str, dict[int, int]] = {"initial": {}, "handshake": {}, "app": {}}
    floor: dict[str, int] = {"initial": 0, "handshake": 0, "app": 0}
    top: dict[str, int] = {"initial": -1, "handshake": -1, "app": -1}
    delivered = 0
    srtt: float | None = None
    cwnd: int | None = None
    in_flight: int | None = None
    hs = False
    phase: str | None = None
    rows: list[dict[str, Any]] = []
    cut = bad = 0
    for r in recs[1:]:
        try:
            e = json.loads(r)
            name, d = ALIASES.get(e["name"], e["name"]), e["data"]
            t_ms = round(float(e["time"]) + offset_ms, 3)
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        if limit_ms is not None and t_ms >= limit_ms:
            cut += 1
            continue
        if name == "transport:packet_sent":
            hd = d.get("header", {})
            sp, pn = SPACE.get(hd.get("packet_type", "")), hd.get("packet_number")
            if sp and isinstance(pn, int):
                sent[sp][pn] = int(d.get("raw", {}).get("length", 0))
                top[sp] = max(top[sp], pn)
        elif name == "transport:packet_received":
            sp = SPACE.get(d.get("header", {}).get("packet_type", ""))
            if not sp:
                continue
            for f in d.get("frames") or ():
                if f.get("frame_type") != "ack":
                    continue
                for rng in f.get("acked_ranges") or ():
                    lo, hi = rng[0], rng[-1]
                    for pn in range(max(lo, floor[sp]), hi + 1):
                        delivered += sent[sp].pop(pn, 0)
                while floor[sp] <= top[sp] and floor[sp] not in sent[sp]:
                    floor[sp] += 1
        elif name == "recovery:metrics_updated":
            # quic-go logs only the metrics that changed: the row carries the sender's
            # whole state, the last known value of each (srtt unknown before an RTT sample)
            if "smoothed_rtt" in d:
                srtt = float(d["smoothed_rtt"])
            if "congestion_window" in d:
                cwnd = d["congestion_window"]
            if "bytes_in_flight" in d:
                in_flight = d["bytes_in_flight"]
            if cwnd is None or not (
                {"congestion_window", "bytes_in_flight", "smoothed_rtt", "latest_rtt"} & d.keys()
            ):
                continue  # pto_count only, or nothing known yet
            rows.append(
                {
                    "t_ms": t_ms,
                    "event": "sample",
                    "conn": conn,
                    "cwnd_bytes": cwnd,
                    "in_flight_bytes": in_flight,
                    "delivered_bytes": delivered,
                    "srtt_ms": srtt,
                    "rtt_sample_ms": d.get("latest_rtt"),
                    "phase": phase,
                    "source": "qlog",
                }
            )
        elif name == "recovery:congestion_state_updated":
            phase = str(d.get("new")) if d.get("new") in PHASES else None
        elif name == "recovery:packet_lost":
            hd = d.get("header", {})
            sp, pn = SPACE.get(hd.get("packet_type", "")), hd.get("packet_number")
            size = sent[sp].pop(pn, None) if sp and isinstance(pn, int) else None
            rows.append(
                {"t_ms": t_ms, "event": "lost", "conn": conn, "bytes": size, "source": "qlog"}
            )
        elif name == "recovery:spurious_loss":
            # a packet declared lost that the peer acknowledged after all (quic-go:
            # detectSpuriousLosses), with how far it was overtaken
            rows.append(
                {
                    "t_ms": t_ms,
                    "event": "spurious",
                    "conn": conn,
                    "rtt_sample_ms": d.get("reordering_time"),
                    "source": "qlog",
                }
            )
        elif name == "recovery:parameters_set" and (
            "reordering_threshold" in d or "time_threshold" in d
        ):
            pkt = d.get("reordering_threshold")
            rows.append(
                {
                    "t_ms": t_ms,
                    "event": "thresholds",
                    "conn": conn,
                    "packet_threshold": 0 if pkt == "disabled" else pkt,
                    "time_threshold": d.get("time_threshold"),
                    "source": "qlog",
                }
            )
        elif name == "quic:connection_state_updated" and not hs and d.get("new") in _HS_DONE:
            hs = True
            rows.append(
                {
                    "t_ms": t_ms,
                    "event": "handshake_done",
                    "conn": conn,
                    "srtt_ms": srtt,
                    "source": "qlog",
                }
            )
    if cut:
        notes.append(f"{cut} events after the next load began left out")
    if bad:
        notes.append(f"{bad} records unreadable")
    return rows, notes


def qlog_client_port(data: bytes) -> int | None:
    """The peer's UDP port of a server's qlog, to tell which flow a connection was:
    quic-go's ``transport:connection_started`` logs it; quiche's qlog logs no such
    event, and quicbed's quiche server names the peer in the qlog's description
    (``peer=IP:PORT``). None where neither does (an older quiche server's qlog)."""
    records = _records(data)
    try:
        head = json.loads(records[0]) if records else {}
    except ValueError:
        head = {}
    described = _PEER.search(str(head.get("description") or "")) if isinstance(head, dict) else None
    if described:
        return int(described.group(1))
    for r in records[1:40]:
        try:
            e = json.loads(r)
        except ValueError:
            continue
        if e.get("name") == "transport:connection_started":
            remote = (e.get("data") or {}).get("remote") or {}
            for addr in remote.values():
                if isinstance(addr, dict) and isinstance(addr.get("port"), int):
                    return int(addr["port"])
    return None


class QlogTracer(Tracer):
    """The QUIC server's qlog files, per h3 load (module docstring)."""

    name = "qlog"
    level = "light"

    def __init__(self) -> None:
        self.ctx: TraceContext | None = None
        self.dirs: dict[str, RPath] = {}  # arm -> its server's qlog folder
        self._seen: dict[str, set[str]] = {}
        self._owned: dict[int, list[str]] = {}  # id(LoadTrace) -> its files

    def unavailable(self, ctx: TraceContext) -> str | None:
        missing = [a for a in ctx.quic_arms() if a not in ctx.qlog_dirs]
        if missing:
            return f"the QUIC server of {', '.join(missing)} was given no qlog folder"
        return None

    def start(self, ctx: TraceContext) -> None:
        self.ctx = ctx
        self.dirs = {a: d for a, d in ctx.qlog_dirs.items() if a in ctx.quic_arms()}
        tb = ctx.testbed
        for d in self.dirs.values():
            tb.remove("server", d)  # a rerun's attempt starts empty
            tb.mkdir("server", d)

    def _list(self, arm: str) -> set[str]:
        assert self.ctx is not None
        d = self.dirs[arm]
        tb = self.ctx.testbed
        if tb.controller_is_host:  # the server's folder is the controller's
            try:
                names = os.listdir(d)
            except FileNotFoundError:
                names = []
            except OSError as exc:
                raise QuicbedError(f"cannot list the qlog folder {d}: {exc}") from exc
        else:
            cp = tb.exec("server", ["ls", "-1", "--", str(d)], check=False)
            names = cp.stdout.split() if cp.returncode == 0 else []
        return {n for n in names if n.endswith((".sqlog", ".qlog"))}

    def begin(self, trace: LoadTrace) -> None:
        arm = trace.key.arm
        if arm not in self.dirs:
            return
        self._seen.setdefault(arm, set()).update(self._list(arm))  # between loads: no load's

    def end(self, trace: LoadTrace) -> None:
        arm = trace.key.arm
        if arm not in self.dirs:
            return
        now = self._list(arm)
        seen = self._seen.setdefault(arm, set())
        new = sorted(now - seen)
        seen |= now
        self._owned[id(trace)] = new
        if not new:
            trace.missing["qlog"] = (
                "no new QUIC connection during this load (the server wrote no qlog file)"
            )

    def finish(self, traces: list[LoadTrace]) -> None:
        if not self.dirs or self.ctx is None:
            return
        tb, root = self.ctx.testbed, self.ctx.results
        try:
            for arm in self.dirs:
                mine = [t for t in traces if t.key.arm == arm]
                for i, trace in enumerate(mine):
                    until = mine[i + 1].began_wall if i + 1 < len(mine) else None
                    for fname in self._owned.get(id(trace), []):
                        self._collect(tb, arm, root, trace, fname, until)
                orphans = sorted(self._list(arm) - self._seen.get(arm, set()))
                if orphans and mine:
                    mine[-1].notes.append(
                        f"qlog: {len(orphans)} file(s) made outside any load, not kept"
                    )
        finally:
            self.stop()

    def _collect(
        self, tb: Any, arm: str, root: Path, trace: LoadTrace, fname: str, until: float | None
    ) -> None:
        odcid = fname.split("_", 1)[0].split(".", 1)[0]
        data = tb.read_bytes("server", self.dirs[arm] / fname)
        rel = trace.key.rel() / "qlog" / f"{fname}.gz"
        write_gz(root / rel, data)
        trace.files[f"qlog:{odcid}"] = str(rel)
        problems = validate_qlog(data)
        if problems:
            trace.notes.append(f"qlog {odcid}: {'; '.join(problems[:5])}")
        rows, notes = qlog_samples(data, began_wall=trace.began_wall, conn=odcid, until_wall=until)
        trace.samples.extend(rows)
        trace.notes.extend(f"qlog {odcid}: {n}" for n in notes)

    def stop(self) -> None:
        if self.ctx is not None:
            # the arms' folders and the attempt's folder that holds them: a testbed that
            # stays up for the next cell (a sweep's) keeps nothing of this one
            for d in {*self.dirs.values(), *(d.parent for d in self.dirs.values())}:
                self.ctx.testbed.remove("server", d)
        self.dirs = {}
