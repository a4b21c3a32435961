"""A page cell's background flows, running through every load (quicbed.spec.background).

Each flow has a server of its own, quicbed-h3server on a port of its own
(quicbed.spec.background.PORTS): its QUIC side with the flow's quic-go CC, or its TCP side
(``-tcp-addr``) with the flow's kernel CC set on the listening socket, so a BBR flow
can run beside page arms on CUBIC (the server namespace's default, which Apache's
connections take). Its client is quicbed-bulk, the bulk cells' client: ``-duration``
longer than any cell (stopped with the cell), ``-every`` for chunks, a sample of the
bytes received every 100 ms. Servers and clients join the ``background`` CPU groups,
so a load's proof counts their CPU as the cell's own work, not as other work on the
host (quicbed.link.loadproof).

An upload (``direction=up``) turns the flow around: quicbed-bulk POSTs the objects
(``-upload``) with its own CC (``-tcp-cc`` on its socket, or quic-go's ``-cc``), and
its server answers ``/sink``, counting what arrives and logging the count every 100 ms
on its clock (``-sink-interval``): an upload's bytes are the receiver's, as a
download's are its client's. (The ssh testbed's server and client clocks are taken to
agree; on the local testbed they are one clock.)

The flows start after the arms' servers and browsers and before the first load, and
the first load waits until every flow has delivered bytes. Around each load the runner
reads the client's clock (:meth:`Background.clock_ns`), and after it asks
:meth:`Background.over` for each flow's bytes between the two readings: the samples
interpolated at both ends, waiting until one sample is past the load's end. A load
during which a flow was not running (its client gone or finished, its samples stopped
before the load ended) is invalid, the flow named. The flows' server and client logs
are kept with the attempt's logs.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.jsonlines import json_events
from quicbed.roles.cpuaccounting import EMULATOR, Reading, group_name
from quicbed.run.bulk import client_clock_ns, stage_bulk
from quicbed.run.loadcpu import joining
from quicbed.spec import bulkobjects
from quicbed.spec.background import PORTS, BackgroundFlow
from quicbed.tcpinfo import ss_connections
from quicbed.testbed.lifecycle import Process, RPath, Testbed

#: the CPU groups (server and client role) the flows' processes join
GROUP = "background"
#: what a wait for a quiet host counts as the cell's own work beside the loads: the
#: flows' groups and the emulator's (which carries their packets)
CPU_GROUPS: tuple[tuple[str, str], ...] = (
    ("server", group_name("server", GROUP)),
    ("client", group_name("client", GROUP)),
    ("bridge", EMULATOR),
)
SERVER, CLIENT = "quicbed-h3server", "quicbed-bulk"
#: a client's -duration: longer than any cell; the cell stops it
RUN_S = 24 * 3600
SAMPLE_MS = 100
#: how long the flows have to start and receive their first bytes
START_TIMEOUT_S = 20.0
#: how long after a load's end a flow's samples may take to pass it (a sample every
#: 100 ms; more is a client that stopped sampling)
PAST_END_S = 1.0


def ports(flows: tuple[BackgroundFlow, ...]) -> tuple[int, ...]:
    """The server ports the flows take, in order."""
    return PORTS[: len(flows)]


@dataclass
class _Flow:
    name: str
    spec: BackgroundFlow
    port: int
    server_log: RPath
    client_log: RPath
    server: Process | None = None
    client: Process | None = None
    start_ns: int | None = None
    #: (clock ns, bytes delivered so far), in order: the client's samples of a download,
    #: the server's sink samples of an upload
    samples: list[tuple[int, int]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    #: the client's start record (its clock's start, an h3 client's CC)
    first: dict[str, Any] = field(default_factory=dict)
    #: where each log was read up to, and a line still being written
    read: dict[str, tuple[int, bytes]] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return self.spec.direction == "up"

    @property
    def sender(self) -> str:
        """The role whose CC the flow runs: the client of an upload."""
        return "client" if self.up else "server"


class Background:
    """The background flows of one attempt: started, read around each load, stopped."""

    def __init__(self, tb: Testbed, flows: tuple[BackgroundFlow, ...], host: str, logs: Path):
        self.tb, self.host = tb, host
        self.logs = tb.outbox("server", logs)
        self.client_logs = tb.outbox("client", logs)
        self.flows = [
            _Flow(
                name=f"bg{i + 1}",
                spec=f,
                port=port,
                server_log=self.logs / f"bg{i + 1}.server.jsonl",
                client_log=self.client_logs / f"bg{i + 1}.client.jsonl",
            )
            for i, (f, port) in enumerate(zip(flows, ports(flows), strict=True))
        ]

    # --- start and stop ---------------------------------------------------------------
    def start(self) -> None:
        """Every flow's server, then its client; returns once every flow has received
        bytes. A flow that does not start fails the attempt, naming it and what its
        program said."""
        tb = self.tb
        staged = stage_bulk(tb, sorted({f.spec.size for f in self.flows}), self.host)
        tb.mkdir("server", self.logs)
        tb.mkdir("client", self.client_logs)
        for f in self.flows:
            argv = [
                str(tb.bin_path("server", SERVER)),
                *("-docroot", str(staged.docroot)),
                *("-cert", str(staged.cert)),
                *("-key", str(staged.key)),
                *("-log", str(f.server_log)),
                *("-addr", f"{tb.server_ip}:{f.port}"),
            ]
            if f.spec.transport == "tcp":
                argv += ["-tcp-addr", f"{tb.server_ip}:{f.port}"]
                argv += [] if f.up else ["-tcp-cc", f.spec.cc]
            else:  # an upload's server only receives: its CC sends ACKs
                argv += ["-cc", f.spec.cc]
            argv += ["-sink-interval", f"{SAMPLE_MS}ms"] if f.up else []
            with joining(tb, "server", GROUP):
                f.server = tb.spawn("server", argv, log=self.logs / f"{f.name}.server.stderr")
        for f in self.flows:
            self._ready(f)
        for f in self.flows:
            proto = "h2" if f.spec.transport == "tcp" else "h3"
            path = "sink" if f.up else bulkobjects.object_path(f.spec.size)
            argv = [
                str(tb.bin_path("client", CLIENT)),
                *("-proto", proto),
                *("-url", f"https://{self.host}:{f.port}/{path}"),
                *("-addr", f"{tb.server_ip}:{f.port}"),
                *("-ca", str(staged.ca)),
                *("-interval", f"{SAMPLE_MS}ms"),
                *("-flow", f.name),
                *("-duration", f"{RUN_S}s"),
                *(["-every", f"{int(f.spec.every_s * 1000)}ms"] if f.spec.every_s else []),
            ]
            if f.up:
                argv += ["-upload", "-size", str(bulkobjects.parse_size(f.spec.size))]
                argv += ["-tcp-cc" if proto == "h2" else "-cc", f.spec.cc]
            tb.remove("client", f.client_log)
            with joining(tb, "client", GROUP):
                f.client = tb.spawn("client", argv, log=f.client_log)
        deadline = time.monotonic() + START_TIMEOUT_S
        for f in self.flows:
            while not (f.samples and f.samples[-1][1] > 0):
                self._read(f)
                if f.final is not None or (f.client and f.client.poll() is not None):
                    raise QuicbedError(
                        f"background flow {self.named(f)} ended at its start: {self._said(f)}"
                    )
                if time.monotonic() > deadline:
                    raise QuicbedError(
                        f"background flow {self.named(f)} delivered nothing in "
                        f"{START_TIMEOUT_S:g} s: {self._said(f)}"
                    )
                time.sleep(SAMPLE_MS / 1000)
        for f in self.flows:
            self._verify(f)

    def _verify(self, f: _Flow) -> None:
        """A started flow runs the CC it names on its sending side (the server of a
        download, the client of an upload), by that side's own account: the kernel's
        ``ss -ti`` of its connections for TCP, the quic-go process's own record for QUIC;
        else nothing is measured. (Its HTTP version needs no check here: quicbed-bulk
        fails a flow that is not the protocol it asked for, and the TCP side answers any
        other version 505; the requests' versions are kept with the flow's facts.)"""
        facts = self._facts(f)
        if f.spec.transport == "tcp":
            ran = facts.get("conn_ccs")
            if ran != [f.spec.cc]:
                raise QuicbedError(
                    f"background flow {self.named(f)}: its connections run {ran}, not "
                    f"{f.spec.cc} (ss -ti on the {f.sender}); nothing measured"
                )
        elif facts.get("cc") != f.spec.cc:
            raise QuicbedError(
                f"background flow {self.named(f)}: its {f.sender} runs {facts.get('cc')}, "
                f"not {f.spec.cc}; nothing measured"
            )

    def _ready(self, f: _Flow) -> None:
        transport = "tcp" if f.spec.transport == "tcp" else "udp"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.tb.listening("server", transport, f.port):
            assert f.server is not None
            if f.server.poll() is not None or time.monotonic() > deadline:
                err = self.tb.read_text("server", self.logs / f"{f.name}.server.stderr")
                tail = " | ".join(err.strip().splitlines()[-2:]) or "no output"
                raise QuicbedError(
                    f"background flow {self.named(f)}: {SERVER} did not start: {tail}"
                )
            time.sleep(0.05)

    def stop(self) -> dict[str, Any]:
        """Clients, then servers, stopped; what each flow's server ran (read from the
        kernel for TCP: every background connection's CC), and its client's last record."""
        facts: dict[str, Any] = {}
        for f in self.flows:
            facts[f.name] = {"flow": f.spec.text(), "port": f.port, **self._facts(f)}
        for f in self.flows:
            if f.client is not None:
                f.client.stop(timeout=5)
            self._read(f)
            facts[f.name]["client"] = f.final or {}
            facts[f.name]["samples"] = len(f.samples)
        for f in self.flows:
            if f.server is not None:
                f.server.stop(timeout=5)
        return facts

    def _facts(self, f: _Flow) -> dict[str, Any]:
        """What the flow ran: the server's start record and its requests' HTTP versions,
        and the sending side's CC: for TCP what ``ss -ti`` there says each connection
        runs, for QUIC the sender's own record (the server's start record, or the
        client's)."""
        recs = json_events(self.tb.read_text("server", f.server_log).splitlines())
        start = next((r for r in recs if r.get("event") == "start"), {})
        out: dict[str, Any] = {
            "direction": f.spec.direction,
            "sender": f.sender,
            "server_version": start.get("quic_go_version"),
            "protos": sorted({str(r.get("proto")) for r in recs if r.get("event") == "request"}),
        }
        if f.spec.transport == "tcp":
            if not f.up:
                out["listener_cc"] = (start.get("tcp") or {}).get("cc")
            side = "dport" if f.up else "sport"
            cp = self.tb.exec(
                f.sender,
                ["ss", "-tinH", "state", "established", f"( {side} = :{f.port} )"],
                check=False,
            )
            conns = ss_connections(cp.stdout) if cp.returncode == 0 else {}
            out["conn_ccs"] = sorted({str(c.get("cc")) for c in conns.values()})
        else:
            out["cc"] = f.first.get("quic_cc") if f.up else start.get("cc")
        return out

    def cpu_ns(self) -> int:
        """The CPU the flows' servers and clients and the emulator carrying them have
        used so far (ns): what a wait for a quiet host credits to the cell
        (quicbed.link.quiet.HostWait.own_cpu_ns)."""
        got = self.tb.cpu.read(list(CPU_GROUPS))
        return sum(r.total_ns for r in got.values() if isinstance(r, Reading))

    # --- around each load -------------------------------------------------------------
    def clock_ns(self) -> int:
        """The client's clock, which the flows' samples are on."""
        return client_clock_ns(self.tb)

    def over(
        self, t0_ns: int, t1_ns: int, link_bps: Callable[[str], float | None]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Each flow's bytes, goodput and share of the link between two readings of
        :meth:`clock_ns` (a load's start and end), and why a load over that span is
        invalid: a flow that was not running all through it. ``link_bps``: the link's
        rate in a direction over the span (None: unlimited, no share)."""
        out, reasons = [], []
        seconds = max((t1_ns - t0_ns) / 1e9, 1e-9)
        deadline = time.monotonic() + PAST_END_S
        for f in self.flows:
            self._read(f)
            while not self._past(f, t1_ns) and self._alive(f) and time.monotonic() < deadline:
                time.sleep(SAMPLE_MS / 2000)
                self._read(f)
            row: dict[str, Any] = {
                "flow": f.name,
                "spec": f.spec.text(),
                "direction": f.spec.direction,
                "seconds": round(seconds, 4),
            }
            why = self._not_running(f, t0_ns, t1_ns)
            if why:
                reasons.append(
                    f"background flow {self.named(f)} was not running over this load: {why}"
                )
                row["running"] = False
            else:
                got = bytes_at(f.samples, t1_ns) - bytes_at(f.samples, t0_ns)
                bps = got * 8 / seconds
                row.update(running=True, bytes=int(got), goodput_bps=round(bps))
                rate = link_bps(f.spec.direction)
                if rate:
                    row["share"] = round(bps / rate, 4)
            out.append(row)
        return out, reasons

    def _past(self, f: _Flow, t_ns: int) -> bool:
        return bool(f.samples) and f.samples[-1][0] >= t_ns

    def _alive(self, f: _Flow) -> bool:
        running = [p is not None and p.poll() is None for p in (f.client, f.server)]
        return f.final is None and all(running)

    def _not_running(self, f: _Flow, t0_ns: int, t1_ns: int) -> str | None:
        if not f.samples or f.samples[0][0] > t0_ns:
            return "it had not started when the load began"
        if f.final is not None and not self._past(f, t1_ns):
            return f"its client ended before the load did ({self._said(f)})"
        if not self._past(f, t1_ns):
            state = "its samples stopped"
            for role, proc in (("client", f.client), ("server", f.server)):
                if proc is None or proc.poll() is not None:
                    state = f"its {role} has exited"
            last = (t1_ns - f.samples[-1][0]) / 1e6
            return f"{state}, its last sample {last:.0f} ms before the load's end"
        return None

    # --- the flows' records ---------------------------------------------------------------
    def _read(self, f: _Flow) -> None:
        """The new records since the last read: the client's (its start, a download's
        samples, its final record) and an upload's server's sink samples. The logs grow
        by ten lines a second; each is read from where the last read stopped."""
        for r in self._new(f, "client", f.client_log):
            ev = r.get("event")
            if ev == "start":
                f.first = r
                f.start_ns = int(r["start_unix_ns"])
            elif ev == "sample" and f.start_ns is not None and not f.up:
                f.samples.append((f.start_ns + int(float(r["t"]) * 1e9), int(r["bytes"])))
            elif ev == "done":
                f.final = r
        if f.up:
            for r in self._new(f, "server", f.server_log):
                if r.get("event") == "sink_sample":
                    f.samples.append((int(r["unix_ns"]), int(r["bytes"])))

    def _new(self, f: _Flow, role: str, log: RPath) -> list[dict[str, Any]]:
        """The whole lines ``log`` has gained since the last call, as records."""
        offset, partial = f.read.get(role, (0, b""))
        new = self.tb.read_bytes(role, log, offset)
        lines = (partial + new).split(b"\n")
        f.read[role] = (offset + len(new), lines.pop())  # the last: still being written
        return json_events([ln.decode(errors="replace") for ln in lines])

    def _said(self, f: _Flow) -> str:
        """The client's last words: its final record's error, or its last lines."""
        if f.final is not None:
            return str(f.final.get("error") or "its final record has no error")
        text = self.tb.read_text("client", f.client_log)
        other = [ln for ln in text.splitlines() if not ln.startswith("{")]
        return " | ".join(other[-2:]) or "no output"

    @staticmethod
    def named(f: _Flow) -> str:
        return f"{f.name} ({f.spec.label()})"


def bytes_at(samples: list[tuple[int, int]], t_ns: int) -> float:
    """Bytes received by ``t_ns``: the samples interpolated linearly between the two
    around it (the first sample's before it, the last's after it)."""
    i = bisect.bisect_left(samples, t_ns, key=lambda s: s[0])
    if i == 0:
        return float(samples[0][1])
    if i == len(samples):
        return float(samples[-1][1])
    (ta, ba), (tb_, bb) = samples[i - 1], samples[i]
    return ba + (bb - ba) * (t_ns - ta) / max(tb_ - ta, 1)
