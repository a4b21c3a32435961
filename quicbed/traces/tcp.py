"""The TCP sender's state during each h2 load, from the kernel's own tracepoints.

``tcp:tcp_probe`` fires when an established socket receives a segment (on the server:
each ACK of the response), *before* the segment is processed, with the sender's
``snd_nxt``, ``snd_una``, ``snd_cwnd`` (segments), ``ssthresh``, ``snd_wnd`` (the
peer's receive window, bytes) and ``srtt`` (microseconds: the kernel stores
``srtt_us`` scaled by 8 and the tracepoint shifts it back; checked against the
emulated RTT in tests/test_traces.py). ``tcp:tcp_retransmit_skb`` fires per
retransmitted segment. Nothing polls: the kernel writes into a ring buffer, ``begin``
clears it, ``end`` reads it once.

The tracepoints are kernel-wide, so the tracer uses a private tracefs *instance*
(``instances/quicbed-<prefix>``: its own buffer, clock and filters, so two testbeds,
or a user's own ftrace session, never touch each other's settings), with the clock
``mono`` (CLOCK_MONOTONIC, the clock of Python's ``time.monotonic()``, so trace
times line up with :attr:`LoadTrace.began_mono`) and an in-kernel filter on the
server's port (only the server's sockets send from it; the client's sockets go *to*
it). The kernel cannot filter on the address (an array field), so lines from other
addresses are dropped when parsed.

**Two local testbeds share 10.10.1.1:443** (every testbed's namespaces use the same
addresses). The tracepoint carries no network namespace, so a second testbed loading
pages over h2 at the same time would put its ACKs into our buffer. To keep only our
flows, ``end`` reads the TCP table of *our* server namespace (``/proc/<pid>/net/tcp``
of a process in it: one file read, no command) and keeps the flows whose client port
is in it (a flow that ended during the load stays in the table in TIME_WAIT). What is
left: a foreign flow that uses the same client port as one of ours at the same time
(each namespace picks ports on its own, so this is rare, not impossible); if the table
cannot be read the flows are kept unfiltered and the load's notes say so.

MSS: ``snd_cwnd`` counts segments. cwnd in bytes uses 1448 bytes per segment (the
1500-byte MTU of every testbed link, less 20 bytes IPv4, 20 TCP and 12 of the
timestamp option Linux negotiates by default); the tracepoint does not carry the MSS.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from quicbed import proc
from quicbed.errors import QuicbedError
from quicbed.traces.tracer import LoadTrace, TraceContext, Tracer, write_gz

#: where tracefs is mounted (module level so a test can point it at a path that fails)
TRACEFS = Path("/sys/kernel/tracing")
#: bytes per segment of snd_cwnd on a 1500-byte link with TCP timestamps (see above)
MSS = 1448
#: the kernel's TCP_INFINITE_SSTHRESH: no ssthresh yet (slow start never ended)
INFINITE_SSTHRESH = 0x7FFFFFFF
#: per CPU; a 10 MB page is ~3,500 ACK events of ~150 bytes: ample, and overruns are noted
BUFFER_KB = 4096
#: per CPU for transfer flows (TraceContext.tcp_buffer_kb): 20 s at 100 Mbit/s is about
#: 90,000 ACK events, ~25 MB, which may all land on one CPU
TRANSFER_BUFFER_KB = 32768
#: arms whose loads run over TCP
EVENTS = ("tcp_probe", "tcp_retransmit_skb")

_LINE = re.compile(r"\s(\d+\.\d+): (tcp_probe|tcp_retransmit_skb): (.*)$")
_KV = re.compile(r"(\w+)=(\S+)")
_ENTRIES = re.compile(r"entries-in-buffer/entries-written: (\d+)/(\d+)")


def tracefs_problem(root: Path | None = None) -> str | None:
    """Why tracefs cannot be used at ``root`` (mounting it if it is not), or None."""
    root = root or TRACEFS
    if (root / "instances").is_dir():
        return None
    cp = proc.run(["mount", "-t", "tracefs", "nodev", str(root)], check=False, timeout=10)
    if cp.returncode != 0 or not (root / "instances").is_dir():
        why = (cp.stderr or cp.stdout).strip().splitlines()[-1:] or ["no instances folder"]
        return f"tracefs cannot be mounted at {root}: {why[0]}"
    return None


def parse_probe_lines(
    lines: list[str],
    *,
    began_mono: float,
    server_ips: Collection[str],
    port: int,
    client_ports: set[int] | None = None,
    mss: int = MSS,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Sample rows (base.SAMPLE_COLUMNS) from tracepoint lines, and the lines kept.

    Keeps the flows from ``port`` on any of ``server_ips`` (and, given ``client_ports``,
    only to those ports). A flow is named by its client port (``conn``), as the wire
    timeline names it (quicbed.traces.wire). ``delivered_bytes`` is ``snd_una`` less the
    first ``snd_una`` of the connection in these lines, modulo 2**32 (sequence numbers
    wrap); ``in_flight_bytes`` is ``snd_nxt - snd_una`` (sent and not cumulatively
    acknowledged: SACKed and lost bytes included). A ``handshake_done`` row marks, per
    connection, the first client segment that carries data after the server has sent some:
    the client's second TLS flight (its Finished; the ClientHello, even split over two
    segments, arrives before the server sends anything), the moment the server's handshake
    is done. On a connection that existed before the load this is no handshake: the caller
    drops those (:func:`drop_handshakes_of`).
    """
    rows: list[dict[str, Any]] = []
    kept: list[str] = []
    first_una: dict[tuple[str, int], int] = {}
    hs_done: set[tuple[str, int]] = set()
    src_want = {f"{ip}:{port}" for ip in server_ips}
    for line in lines:
        m = _LINE.search(line)
        if not m:
            continue
        ts, name, rest = float(m.group(1)), m.group(2), m.group(3)
        kv = dict(_KV.findall(rest))
        t_ms = round((ts - began_mono) * 1000.0, 3)
        if name == "tcp_probe":
            if kv.get("src") not in src_want:
                continue
            cport = int(kv.get("dest", ":0").rsplit(":", 1)[1])
            flow = (kv["src"], cport)
            if client_ports is not None and cport not in client_ports:
                continue
            kept.append(line)
            nxt, una = int(kv["snd_nxt"], 16), int(kv["snd_una"], 16)
            first = first_una.setdefault(flow, una)
            delivered = (una - first) % (1 << 32)
            ssthresh = int(kv["ssthresh"])
            srtt_ms = int(kv["srtt"]) / 1000.0
            row = {
                "t_ms": t_ms,
                "event": "sample",
                "conn": str(cport),
                "cwnd_bytes": int(kv["snd_cwnd"]) * mss,
                "ssthresh_bytes": None if ssthresh >= INFINITE_SSTHRESH else ssthresh * mss,
                "in_flight_bytes": (nxt - una) % (1 << 32),
                "delivered_bytes": delivered,
                "srtt_ms": srtt_ms if srtt_ms > 0 else None,
                "snd_wnd_bytes": int(kv["snd_wnd"]),
                # below ssthresh the window grows per ACK by what it acked: slow start
                # (no ssthresh yet is slow start too); the tracepoint marks no recovery
                "phase": "slow_start" if int(kv["snd_cwnd"]) < ssthresh else "congestion_avoidance",
                "source": "tcp_probe",
            }
            rows.append(row)
            if flow not in hs_done and int(kv.get("data_len", 0)) > 0 and nxt != first:
                hs_done.add(flow)
                rows.append(
                    {
                        "t_ms": t_ms,
                        "event": "handshake_done",
                        "conn": str(cport),
                        "srtt_ms": row["srtt_ms"],
                        "source": "tcp_probe",
                    }
                )
        else:
            if kv.get("saddr") not in server_ips or int(kv.get("sport", -1)) != port:
                continue
            cport = int(kv.get("dport", 0))
            if client_ports is not None and cport not in client_ports:
                continue
            kept.append(line)
            rows.append(
                {"t_ms": t_ms, "event": "retransmit", "conn": str(cport), "source": "tcp_probe"}
            )
    return rows, kept


def drop_handshakes_of(rows: list[dict[str, Any]], old_ports: set[int]) -> list[dict[str, Any]]:
    """Without ``handshake_done`` rows of connections that existed before the load."""
    return [r for r in rows if not (r["event"] == "handshake_done" and int(r["conn"]) in old_ports)]


def client_ports_in(table_texts: list[str], port: int) -> set[int]:
    """Remote ports of the sockets on local ``port`` in /proc/net/tcp{,6} text."""
    out: set[int] = set()
    for text in table_texts:
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) < 4:
                continue
            local, remote = f[1], f[2]
            if int(local.rsplit(":", 1)[1], 16) == port:
                out.add(int(remote.rsplit(":", 1)[1], 16))
    return out


class TcpTracer(Tracer):
    """``tcp_probe`` and ``tcp_retransmit_skb`` per h2 load (module docstring)."""

    name = "tcp"
    level = "light"

    def __init__(self) -> None:
        self.dir: Path | None = None
        self.ctx: TraceContext | None = None
        self._ns_pid: int | None = None
        self._before: dict[int, set[int] | None] = {}

    # --- set-up -----------------------------------------------------------------------
    def unavailable(self, ctx: TraceContext) -> str | None:
        if not ctx.tcp_arms():
            return None  # nothing to observe; start does nothing
        if not ctx.testbed.controller_is_host:  # the tracefs read is the controller's
            return (
                f"not on the {ctx.testbed.kind} testbed yet (tcp_probe runs in the server's kernel)"
            )
        if os.geteuid() != 0:
            return "kernel tracepoints need root"
        why = tracefs_problem()
        if why:
            return why
        if not (TRACEFS / "events" / "tcp" / "tcp_probe").is_dir():
            return "this kernel has no tcp:tcp_probe tracepoint"
        return None

    def start(self, ctx: TraceContext) -> None:
        self.ctx = ctx
        if not ctx.tcp_arms():
            return
        d = TRACEFS / "instances" / f"quicbed-{ctx.testbed.prefix}"
        try:
            if d.exists():  # left by a killed run of this testbed: ours to replace
                self._remove(d)
            d.mkdir()
            self.dir = d
            (d / "trace_clock").write_text("mono")
            (d / "buffer_size_kb").write_text(str(ctx.tcp_buffer_kb or BUFFER_KB))
            for ev in EVENTS:
                e = d / "events" / "tcp" / ev
                (e / "filter").write_text(f"sport == {ctx.server_port}")
                (e / "enable").write_text("1")
            (d / "tracing_on").write_text("1")
        except OSError as exc:
            self.stop()
            raise QuicbedError(f"tracefs instance {d}: {exc}") from exc

    def stop(self) -> None:
        if self.dir is not None:
            self._remove(self.dir)
            self.dir = None

    @staticmethod
    def _remove(d: Path) -> None:
        """Disable the instance's events, then remove it (the kernel frees its buffer)."""
        for p in (d / "tracing_on", d / "events" / "enable"):
            with contextlib.suppress(OSError):
                p.write_text("0")
        try:
            d.rmdir()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise QuicbedError(f"cannot remove tracefs instance {d}: {exc}") from exc

    # --- per load ---------------------------------------------------------------------
    def begin(self, trace: LoadTrace) -> None:
        if self.dir is None or self.ctx is None or trace.key.arm not in self.ctx.tcp_arms():
            return  # an h3 load: nothing to do
        self._before[id(trace)] = self._client_ports()
        try:
            with open(self.dir / "trace", "w"):
                pass  # opening `trace` for writing with O_TRUNC clears the buffer
        except OSError as exc:
            raise QuicbedError(f"cannot clear {self.dir}/trace: {exc}") from exc

    def end(self, trace: LoadTrace) -> None:
        if self.dir is None or self.ctx is None or trace.key.arm not in self.ctx.tcp_arms():
            return
        t0 = time.monotonic()
        # our flows first: a flow's connection may close while a long trace is read
        ports = self._client_ports()
        try:
            text = (self.dir / "trace").read_text(errors="replace")
        except OSError as exc:
            raise QuicbedError(f"cannot read {self.dir}/trace: {exc}") from exc
        lines = text.splitlines()
        if ports is None:
            trace.notes.append(
                "tcp: the server namespace's TCP table could not be read: "
                "another testbed's flows to this address would mix in"
            )
        rows, kept = parse_probe_lines(
            lines,
            began_mono=trace.began_mono,
            server_ips=self.ctx.servers(),
            port=self.ctx.server_port,
            client_ports=ports,
        )
        before = self._before.pop(id(trace), None)
        if before:
            rows = drop_handshakes_of(rows, before)
        m = _ENTRIES.search(text)
        if m and int(m.group(2)) > int(m.group(1)):
            trace.notes.append(
                f"tcp: {int(m.group(2)) - int(m.group(1))} tracepoint events "
                f"lost (ring buffer full)"
            )
        header = [ln for ln in lines if ln.startswith("#")]
        rel = trace.key.rel() / "tcp_probe.txt.gz"
        write_gz(self.ctx.results / rel, "\n".join(header + kept + [""]).encode())
        trace.files["tcp_probe"] = str(rel)
        trace.samples.extend(rows)
        n = sum(1 for r in rows if r["event"] == "sample")
        conns = len({r["conn"] for r in rows})
        ms = (time.monotonic() - t0) * 1000
        trace.notes.append(f"tcp: {n} samples of {conns} connection(s), {ms:.1f} ms to read")

    # --- our server namespace's flows -------------------------------------------------
    def _client_ports(self) -> set[int] | None:
        """Client ports of the server namespace's sockets on the server port, or None."""
        assert self.ctx is not None
        pid = self._pid_in_server_ns()
        if pid is None:
            return None
        texts = []
        for name in ("tcp", "tcp6"):
            try:
                texts.append(Path(f"/proc/{pid}/net/{name}").read_text())
            except OSError:
                if name == "tcp":
                    self._ns_pid = None
                    return None
        return client_ports_in(texts, self.ctx.server_port)

    def _pid_in_server_ns(self) -> int | None:
        """A process in the server namespace (found once, checked on every use)."""
        assert self.ctx is not None
        name = getattr(self.ctx.testbed, "ns", None)
        if name is None:
            return None
        try:
            want = os.stat(f"/run/netns/{name('server')}")
        except OSError:
            return None
        key = (want.st_dev, want.st_ino)

        def same(pid: int) -> bool:
            try:
                st = os.stat(f"/proc/{pid}/ns/net")
            except OSError:
                return False
            return (st.st_dev, st.st_ino) == key

        if self._ns_pid is not None and same(self._ns_pid):
            return self._ns_pid
        self._ns_pid = None
        for entry in os.listdir("/proc"):
            if entry.isdigit() and same(int(entry)):
                self._ns_pid = int(entry)
                break
        return self._ns_pid
