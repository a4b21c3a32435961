"""Bulk and compete experiments: goodput of one flow per arm, and flows sharing a bottleneck.

Both run on a link shaped and proven the one way the project does it
(quicbed.link.session.shaped_link, then a fidelity receipt, quicbed.link.proof.prove;
a link out of tolerance is never measured on), with the arms' own servers
(quicbed.servers, the stacks of quicbed.arms) serving a generated bulk object
(quicbed.bulkobjects) with the testbed's certificate (quicbed.certs).

The client of every flow, whatever its arm, is ``quicbed-bulk`` (go/cmd/quicbed-bulk):
Go's net/http with its bundled HTTP/2 over TCP+TLS 1.3 for h2 arms, quic-go's http3
client for h3 arms, the same receive windows for both. Not the browser: a bulk flow
has no page to render, a browser's own scheduling and flow-control tuning would be a
confound of the TCP/QUIC comparison, and the same program for both arms makes the
client side equal. It samples the bytes received every 100 ms.

- ``bulk``: N repetitions per arm, arms interleaved, one flow at a time: goodput
  (application bytes / time), completion time, retransmissions (TCP: the server
  kernel's ``ss -ti`` for the flow's connection; QUIC: the server's ``conn_close``
  counters where the stack logs them: quiche does, quic-go does not), the packets the
  bottleneck dropped (the emulator's counters, protocol neutral), Welch's t-test and
  Mann-Whitney U per QUIC arm against the TCP arm (quicbed.stats.compare).
- ``compete``: K flows of arm A and M of arm B started together (or staggered) on one
  bottleneck: per-flow throughput every 100 ms, each flow's share and Jain's fairness
  index over the steady part, and the bottleneck queue's occupancy sampled from the
  emulator (quicbed-linkem's ``queue_bytes``/``queue_packets``) every 100 ms.

Results are pydantic models (JSON-able, with the receipt and provenance) written to
``<out>/bulk.json`` or ``<out>/compete.json`` with their figures (quicbed.plots).
"""

from __future__ import annotations

import itertools
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from quicbed import provenance
from quicbed.arms import Arm, resolve
from quicbed.cellconfig import TEST_HOST
from quicbed.errors import QuicbedError
from quicbed.link.model import LinkCondition
from quicbed.link.proof import ProvenLink, prove
from quicbed.link.session import shaped_link
from quicbed.servers import get_stack
from quicbed.servers.base import ServeSpec, WebServer
from quicbed.stats import compare
from quicbed.store import now
from quicbed.testbed.base import Process, RPath, Testbed
from quicbed.testbed.local import LocalTestbed

CLIENT = "quicbed-bulk"
INTERVAL_S = 0.1
#: how long a client keeps its connection after its final record, so the server's
#: kernel can still be asked about it (``ss``)
LINGER_S = 1.5
#: the steady part of a compete run starts this long after the last flow started,
#: or after this fraction of the duration, whichever is later
STEADY_MIN_S = 2.0
STEADY_FRACTION = 0.2
#: a TCP segment's payload in a 1514-byte frame (1500 - 20 IP - 32 TCP with timestamps)
TCP_PAYLOAD = 1448
FRAME = 1514

Progress = Callable[[str], None]


# --- records --------------------------------------------------------------------------
class FlowResult(BaseModel):
    """One flow as its client and the server side saw it."""

    flow: str
    arm: str
    protocol: str  # h2 | h3
    ok: bool
    error: str | None = None
    http_proto: str | None = None
    bytes: int = 0
    completion_s: float | None = None
    goodput_bps: float | None = None
    connect_s: float | None = None
    ttfb_s: float | None = None
    #: when it started, seconds after the run's common start (its stagger + lag)
    start_offset_s: float = 0.0
    start_lag_s: float | None = None
    #: (t_s since the flow's own start, bytes received so far), every 100 ms
    samples: list[tuple[float, int]] = Field(default_factory=list)
    #: retransmitted segments (TCP) or packets (QUIC) by the server; None: not known
    retransmissions: int | None = None
    retrans_bytes: int | None = None
    retrans_source: str = ""
    #: the server side's transport facts: TCP from ``ss -ti``, QUIC from its log
    server: dict[str, Any] = Field(default_factory=dict)
    quic_client: dict[str, Any] | None = None
    local_addr: str | None = None

    def timeline(self, offset: bool = True) -> list[tuple[float, float]]:
        """(t_s, bit/s over the interval ending at t_s); t on the run's clock if ``offset``."""
        out, pt, pb = [], 0.0, 0
        for t, b in self.samples:
            if t > pt:
                out.append((t + (self.start_offset_s if offset else 0.0), (b - pb) * 8 / (t - pt)))
            pt, pb = t, b
        return out


class BulkRun(BaseModel):
    arm: str
    rep: int
    seq: int
    flow: FlowResult
    #: the emulator's down-direction counters over this run: drops, peak queue
    bottleneck: dict[str, Any] | None = None


class ArmBulk(BaseModel):
    arm: str
    n: int
    goodput_mbit_mean: float | None
    goodput_mbit_sd: float | None
    goodput_mbit_median: float | None
    completion_s_mean: float | None
    retransmissions_mean: float | None
    #: the mean goodput against the link's ideal (:func:`ideal_goodput_bps`)
    of_ideal: float | None


class BulkResult(BaseModel):
    kind: str = "bulk"
    created: str
    condition: dict[str, Any]
    arms: list[dict[str, Any]]
    object: str
    object_bytes: int
    duration_s: float | None
    reps: int
    ideal_goodput_bps: float | None
    runs: list[BulkRun]
    summary: dict[str, ArmBulk]
    #: per QUIC arm against the TCP arm, ``tcp/quic``: ``goodput_bps`` and ``completion_s``
    #: each a quicbed.stats.Comparison (pct_diff = (tcp - quic) / quic of that metric;
    #: the bootstrap interval in the metric's unit, not ms)
    comparisons: dict[str, dict[str, Any]]
    receipt: dict[str, Any] | None
    provenance: dict[str, Any]
    versions: dict[str, Any] = Field(default_factory=dict)
    figures: list[str] = Field(default_factory=list)


class QueueSample(BaseModel):
    t_s: float
    bytes: int
    packets: int
    drops: int


class CompeteResult(BaseModel):
    kind: str = "compete"
    created: str
    condition: dict[str, Any]
    groups: list[tuple[str, int]]
    arms: list[dict[str, Any]]
    duration_s: float
    stagger_s: float
    object: str
    flows: list[FlowResult]
    steady_from_s: float
    steady_to_s: float
    #: each flow's share of the bytes all flows received in the steady part
    shares: dict[str, float]
    arm_shares: dict[str, float]
    #: each flow's mean throughput in the steady part (bit/s)
    steady_bps: dict[str, float]
    jain: float | None
    #: the bottleneck's queue (server to client) every ~100 ms; empty if the shaper
    #: cannot say (only the userspace emulator reports its occupancy)
    queue: list[QueueSample]
    queue_note: str = ""
    queue_limit_bytes: int | None = None
    receipt: dict[str, Any] | None
    provenance: dict[str, Any]
    versions: dict[str, Any] = Field(default_factory=dict)
    figures: list[str] = Field(default_factory=list)


# --- numbers --------------------------------------------------------------------------
def ideal_goodput_bps(cond: LinkCondition) -> float | None:
    """The most application bytes per second the bottleneck carries for a TCP flow: its
    rate (which counts Ethernet frames, quicbed.link.model) times a full frame's TCP
    payload share (1448 of 1514 bytes). TLS records cost another ~0.1 %, counted
    against the flow. None for an unlimited link."""
    if cond.rate_mbit is None:
        return None
    rate = cond.rate_mbit * 1e6
    return rate * (TCP_PAYLOAD if cond.count == "ethernet" else TCP_PAYLOAD + 14) / FRAME


def jain(values: list[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal, 1/n = one takes all."""
    sq = sum(v * v for v in values)
    if not values or sq == 0:
        return None
    return sum(values) ** 2 / (len(values) * sq)


def bytes_at(f: FlowResult, t: float) -> float:
    """Bytes ``f`` had received at time ``t`` of the run's clock (linear between samples)."""
    pts = [(f.start_offset_s, 0.0)] + [(f.start_offset_s + s, float(b)) for s, b in f.samples]
    if t <= pts[0][0]:
        return 0.0
    for (t0, b0), (t1, b1) in itertools.pairwise(pts):
        if t <= t1:
            return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else b1
    return pts[-1][1]


def steady_window(flows: list[FlowResult], duration_s: float) -> tuple[float, float]:
    """From the later of 2 s and 20 % of the duration after the last flow started, to
    the end of the first flow to end (all flows present throughout)."""
    last_start = max(f.start_offset_s for f in flows)
    start = last_start + max(STEADY_MIN_S, STEADY_FRACTION * duration_s)
    ends = [f.start_offset_s + (f.samples[-1][0] if f.samples else 0.0) for f in flows]
    return start, min(ends)


# --- ss -------------------------------------------------------------------------------
_KV = re.compile(r"([a-z_]+):(\S+)")


def ss_connections(text: str) -> dict[int, dict[str, Any]]:
    """Per peer port, what ``ss -tinH`` says of a connection: its CC (quicbed.servers.
    apache.ss_congestion, as the cells verify it), ``retrans`` (total retransmitted
    segments, the second number of ``retrans:a/b``), ``bytes_retrans``, ``bytes_sent``,
    ``bytes_acked``, ``data_segs_out``, ``cwnd``, ``rtt_ms``."""
    from quicbed.servers.apache import ss_congestion

    out: dict[int, dict[str, Any]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line[:1].isspace() or not line.strip():
            continue
        addrs = [tok for tok in line.split() if ":" in tok]
        if len(addrs) < 2:
            continue
        try:
            port = int(addrs[1].rsplit(":", 1)[1])
        except ValueError:
            continue
        detail = lines[i + 1] if i + 1 < len(lines) and lines[i + 1][:1].isspace() else ""
        kv = dict(_KV.findall(detail))
        ccs = ss_congestion(line + "\n" + detail)
        rec: dict[str, Any] = {"cc": ccs[0] if ccs else None}
        if "retrans" in kv:
            rec["retrans"] = int(kv["retrans"].split("/")[-1])
        else:
            rec["retrans"] = 0  # ss omits the field until the first retransmission
        for k in ("bytes_retrans", "bytes_sent", "bytes_acked", "data_segs_out", "cwnd"):
            if k in kv and kv[k].isdigit():
                rec[k] = int(kv[k])
        rec.setdefault("bytes_retrans", 0)
        if "rtt" in kv:
            rec["rtt_ms"] = float(kv["rtt"].split("/")[0])
        out[port] = rec
    return out


def _port(addr: str | None) -> int | None:
    if not addr or ":" not in addr:
        return None
    try:
        return int(addr.rsplit(":", 1)[1])
    except ValueError:
        return None


# --- the run --------------------------------------------------------------------------
class _Rig:
    """Servers of the arms serving the bulk object, and clients started on the client."""

    def __init__(self, tb: Testbed, arms: list[Arm], size: str, out: Path, host: str) -> None:
        from quicbed import bulkobjects, certs

        self.tb, self.arms, self.size, self.out, self.host = tb, arms, size, out, host
        www = tb.local_stage("server", "www")
        self.manifest = bulkobjects.generate_bulk(www, [size])
        self.object_bytes = bulkobjects.parse_size(size)
        pki = certs.ensure(tb.local_stage("server", "tls"), [host], [tb.server_ip])
        work = tb.workdir("server")
        tb.push("server", www / bulkobjects.FOLDER, work / "www" / bulkobjects.FOLDER)
        tb.push("server", pki.cert, work / "tls" / pki.cert.name, mode=0o644)
        tb.push("server", pki.key, work / "tls" / pki.key.name, mode=0o600)
        self.logs = out / "logs"
        self.spec = ServeSpec(docroot=work / "www", cert=work / "tls" / pki.cert.name,
                              key=work / "tls" / pki.key.name,
                              logdir=tb.outbox("server", self.logs))  # fmt: skip
        self.ca = tb.workdir("client") / "tls" / pki.ca_cert.name
        tb.push("client", pki.ca_cert, self.ca, mode=0o644)
        self.path = bulkobjects.object_path(size)
        self.client_logs = tb.outbox("client", self.logs)
        self.servers: dict[str, WebServer] = {
            a.name: get_stack(a.stack)(tb, self.spec, a) for a in arms
        }
        self.by_name = {a.name: a for a in arms}
        self.flows = 0

    def start(self) -> None:
        for s in self.servers.values():
            s.start()

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()
        for role in ("server", "client"):
            self.tb.collect(role, self.logs)

    def client_clock_ns(self) -> int:
        return int(self.tb.exec("client", ["date", "+%s%N"]).stdout.strip())

    def spawn(
        self, arm: str, flow: str, duration_s: float | None, start_at_ns: int | None
    ) -> tuple[Process, RPath]:
        a = self.by_name[arm]
        port = "" if a.port == 443 else f":{a.port}"
        argv = [
            str(self.tb.bin_path("client", CLIENT)), "-proto", a.protocol,
            "-url", f"https://{self.host}{port}/{self.path}",
            "-addr", f"{self.tb.server_ip}:{a.port}", "-ca", str(self.ca),
            "-interval", f"{int(INTERVAL_S * 1000)}ms", "-flow", flow,
            "-linger", f"{int(LINGER_S * 1000)}ms",
            *(["-duration", f"{int(duration_s * 1000)}ms"] if duration_s else []),
            *(["-start-at", str(start_at_ns)] if start_at_ns else []),
        ]  # fmt: skip
        self.flows += 1
        log = self.client_logs / f"{flow}.jsonl"
        self.tb.remove("client", log)
        return self.tb.spawn("client", argv, log=log), log

    def records(self, log: RPath) -> list[dict[str, Any]]:
        from quicbed.servers.quic_go import json_events

        return json_events(self.tb.read_text("client", log).splitlines())

    def wait_done(self, logs: list[RPath], procs: list[Process], timeout: float) -> None:
        """Until every flow's final record is written (or its client has exited)."""
        deadline = time.monotonic() + timeout
        while True:
            done = [any(r.get("event") == "done" for r in self.records(lg)) or p.poll() is not None
                    for lg, p in zip(logs, procs, strict=True)]  # fmt: skip
            if all(done):
                return
            if time.monotonic() > deadline:
                raise QuicbedError(f"{CLIENT}: {done.count(False)} flow(s) not done after "
                                   f"{timeout:g} s")  # fmt: skip
            time.sleep(0.05)

    def server_tcp(self) -> dict[int, dict[str, Any]]:
        cp = self.tb.exec("server", ["ss", "-tinH", "state", "established", "( sport = :443 )"],
                          check=False)  # fmt: skip
        return ss_connections(cp.stdout) if cp.returncode == 0 else {}

    def flow_result(
        self, arm: str, flow: str, recs: list[dict[str, Any]], tcp: dict[int, dict[str, Any]],
        quic_log: list[str] | None, start_offset: float = 0.0, rc: int | None = None,
    ) -> FlowResult:  # fmt: skip
        a = self.by_name[arm]
        final = next((r for r in recs if r.get("event") == "done"), None)
        start = next((r for r in recs if r.get("event") == "start"), {})
        samples = [(float(r["t"]), int(r["bytes"])) for r in recs if r.get("event") == "sample"]
        f = FlowResult(flow=flow, arm=arm, protocol=a.protocol, ok=False,
                       start_lag_s=start.get("lag_s"), samples=samples,
                       start_offset_s=start_offset + float(start.get("lag_s") or 0.0))  # fmt: skip
        if final is None:
            other = [ln for ln in self.tb.read_text("client", self.client_logs / f"{flow}.jsonl")
                     .splitlines() if not ln.startswith("{")]  # fmt: skip
            f.error = f"{CLIENT} wrote no final record (exit {rc}): {' | '.join(other[-2:])}"
            return f
        f.ok = bool(final.get("ok"))
        f.error = final.get("error")
        f.http_proto = final.get("http_proto")
        f.bytes = int(final.get("bytes") or 0)
        f.completion_s = final.get("completion_s")
        f.goodput_bps = final.get("goodput_bps")
        f.connect_s = final.get("connect_s")
        f.ttfb_s = final.get("ttfb_s")
        f.local_addr = final.get("local_addr")
        f.quic_client = final.get("quic_client")
        if f.completion_s and (not samples or samples[-1][0] < f.completion_s):
            f.samples.append((float(f.completion_s), f.bytes))  # the last partial interval
        want = {"h2": "HTTP/2.0", "h3": "HTTP/3.0"}[a.protocol]
        if f.ok and f.http_proto != want:
            f.ok, f.error = False, f"the response came over {f.http_proto}, not {want}"
        port = _port(f.local_addr)
        if a.transport == "tcp":
            conn = tcp.get(port) if port is not None else None
            if conn is None:
                f.retrans_source = "ss found no connection for this flow"
            else:
                f.server = conn
                f.retransmissions, f.retrans_bytes = conn["retrans"], conn["bytes_retrans"]
                f.retrans_source = "ss -ti on the server (retrans segments, bytes_retrans)"
                if conn.get("cc") not in (None, a.cc):
                    f.ok, f.error = False, f"the server's kernel ran {conn.get('cc')}, not {a.cc}"
        else:
            self._quic_server_facts(f, quic_log or [], port)
        return f

    @staticmethod
    def _quic_server_facts(f: FlowResult, lines: list[str], port: int | None) -> None:
        from quicbed.servers.quic_go import json_events

        ev = json_events(lines)
        conn = next((e for e in ev if e.get("event") == "conn"
                     and _port(str(e.get("remote"))) == port), None)  # fmt: skip
        if conn is None:
            f.retrans_source = "the server's log has no connection from this flow"
            return
        f.server = {k: conn.get(k) for k in ("cc", "quic_version", "handshake_ms", "cubic_n")
                    if conn.get(k) is not None}  # fmt: skip
        close = next((e for e in ev if e.get("event") == "conn_close"
                      and e.get("conn_id") == conn.get("conn_id")), None)  # fmt: skip
        stats = (close or {}).get("stats")
        if isinstance(stats, dict) and "retrans" in stats:
            f.server["stats"] = stats
            f.retransmissions = int(stats["retrans"])
            f.retrans_bytes = stats.get("stream_retrans_bytes")
            f.retrans_source = "the server's conn_close stats (retrans packets)"
        elif close is None:
            f.retrans_source = "the server had not logged the connection's close"
        else:
            f.retrans_source = "this stack's server logs no loss counters (quic-go)"

    def quic_lines(self, arm: str, offset: int) -> list[str]:
        srv = self.servers[arm]
        if srv.transport != "udp":
            return []
        return self.tb.read_bytes("server", srv.log, offset).decode(errors="replace").splitlines()

    def log_sizes(self) -> dict[str, int]:
        return {n: self.tb.size("server", s.log) for n, s in self.servers.items()
                if s.transport == "udp"}  # fmt: skip

    def versions(self) -> dict[str, Any]:
        """The servers' own start records, and the client binary by its SHA-256."""
        out: dict[str, Any] = {n: s.version() for n, s in self.servers.items()}
        exe = self.tb.bin_path("client", CLIENT)
        cp = self.tb.exec("client", ["sha256sum", str(exe)], check=False)
        digest = cp.stdout.split()
        out[CLIENT] = {"path": str(exe), "sha256": digest[0] if digest else None}
        return out


def _down(counters: dict[str, Any] | None) -> dict[str, Any]:
    return ((counters or {}).get("directions") or {}).get("down") or {}


def _bottleneck(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    b, a = _down(before), _down(after)
    if not a:
        return {}
    return {k: a.get(k, 0) - b.get(k, 0) for k in ("queue_drops", "loss_drops", "tx_packets",
                                                    "tx_bytes")} | {
        "max_queue_bytes": a.get("max_queue_bytes"),
    }  # fmt: skip


def _quic_wait(
    rig: _Rig, arm: str, offset: int, port: int | None, timeout: float = 3.0
) -> list[str]:
    """The QUIC server's log lines since ``offset`` once it has logged the flow's close."""
    from quicbed.servers.quic_go import json_events

    deadline = time.monotonic() + timeout
    while True:
        lines = rig.quic_lines(arm, offset)
        ev = json_events(lines)
        ids = {e.get("conn_id") for e in ev if e.get("event") == "conn"
               and _port(str(e.get("remote"))) == port}  # fmt: skip
        if any(e.get("event") == "conn_close" and e.get("conn_id") in ids for e in ev):
            return lines
        if time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def _arms(names: list[str], cc: str) -> list[Arm]:
    """The arms by name (quicbed.arms: stack, CC, port), each once."""
    if not names:
        raise QuicbedError("no arms")
    return resolve(tuple(dict.fromkeys(names)), {}, cc)


class _Session:
    """The link shaped and proven, the servers started; undone on exit."""

    def __init__(self, tb: Testbed, cond: LinkCondition, arms: list[Arm], size: str, out: Path,
                 shaper: str, cc: str, receipt_tcp_seconds: float,
                 progress: Progress | None) -> None:  # fmt: skip
        self.tb, self.cond, self.arms, self.size, self.out = tb, cond, arms, size, out
        self.shaper_name, self.cc, self.receipt_tcp_seconds = shaper, cc, receipt_tcp_seconds
        self.say = progress or (lambda _m: None)

    def run(self, body: Callable[[_Rig, ProvenLink], BaseModel]) -> BaseModel:
        for a in self.arms:
            get_stack(a.stack).check_testbed(a, self.tb)
        self.out.mkdir(parents=True, exist_ok=True)
        with self.tb.claim("quicbed bulk"), shaped_link(self.tb, self.cond, self.shaper_name,
                                                        cc=self.cc) as shaped:  # fmt: skip
            self.say("link shaped; taking its receipt")
            proven = prove(shaped, self.receipt_tcp_seconds, self.cc)
            if not proven.receipt.passed:
                # one retry on a freshly applied link, as a sweep gives a cell
                self.say(f"receipt failed ({_failed_names(proven)}); applying the link again")
                shaped.reapply()
                proven = prove(shaped, self.receipt_tcp_seconds, self.cc)
            if not proven.receipt.passed:
                raise QuicbedError(f"the link is out of tolerance ({_failed_names(proven)}) "
                                   "on two receipts; nothing measured")  # fmt: skip
            rig = _Rig(self.tb, self.arms, self.size, self.out, TEST_HOST)
            try:
                rig.start()
                return body(rig, proven)
            finally:
                rig.stop()


def _failed_names(proven: ProvenLink) -> str:
    return ", ".join(c.name for c in proven.receipt.failed_checks())


def _tcp_cc(arms: list[Arm], cc: str) -> str:
    tcp = [a for a in arms if a.transport == "tcp"]
    return tcp[0].cc if tcp else "cubic"


def run_bulk(
    cond: LinkCondition,
    out: Path,
    *,
    arms: list[str] | None = None,
    reps: int = 5,
    size: str = "100MB",
    duration_s: float | None = None,
    cc: str = "cubic",
    testbed: Testbed | None = None,
    shaper: str = "auto",
    receipt_tcp_seconds: float = 10,
    progress: Progress | None = None,
    figures: bool = True,
) -> BulkResult:
    """``reps`` downloads per arm, interleaved (ABBA), one flow at a time.

    With ``duration_s`` each download runs that long (the object again and again on one
    connection), else it fetches the object once. Written to ``out/bulk.json``.
    """
    tb = testbed or LocalTestbed("qb")
    resolved = _arms(arms or ["h2", "h3"], cc)
    names = [a.name for a in resolved]
    if reps < 1:
        raise QuicbedError(f"reps must be >= 1 (got {reps})")
    order: list[tuple[str, int]] = []
    for rep in range(reps):
        order += [(n, rep) for n in (names if rep % 2 == 0 else names[::-1])]
    session = _Session(tb, cond, resolved, size, out, shaper, _tcp_cc(resolved, cc),
                       receipt_tcp_seconds, progress)  # fmt: skip
    expect = duration_s or 0.0

    def body(rig: _Rig, proven: ProvenLink) -> BulkResult:
        runs: list[BulkRun] = []
        link = proven.link
        for seq, (arm, rep) in enumerate(order):
            session.say(f"{arm} #{rep}")
            offsets = rig.log_sizes()
            before = link.shaper.counters(tb)
            p, log = rig.spawn(arm, f"{arm}-{rep}", duration_s, None)
            limit = (expect or rig.object_bytes * 8 / (cond.rate_mbit or 1000) / 1e6 * 4) + 60
            rig.wait_done([log], [p], timeout=limit)
            tcp = rig.server_tcp()
            after = link.shaper.counters(tb)
            recs = rig.records(log)
            final = next((r for r in recs if r.get("event") == "done"), {})
            port = _port(final.get("local_addr"))
            rc = p.wait(LINGER_S + 10)
            quic = _quic_wait(rig, arm, offsets.get(arm, 0), port) if arm in offsets else None
            f = rig.flow_result(arm, f"{arm}-{rep}", rig.records(log), tcp, quic, rc=rc)
            runs.append(BulkRun(arm=arm, rep=rep, seq=seq, flow=f,
                                bottleneck=_bottleneck(before, after) or None))  # fmt: skip
        return _bulk_result(cond, resolved, rig, size, duration_s, reps, runs, proven, tb)

    result = session.run(body)
    assert isinstance(result, BulkResult)
    if figures:
        result.figures = [str(p) for p in plot_bulk(result, out / "bulk")]
    (out / "bulk.json").write_text(result.model_dump_json(indent=1))
    return result


def _mean(v: list[float]) -> float | None:
    return statistics.fmean(v) if v else None


def _bulk_result(
    cond: LinkCondition, arms: list[Arm], rig: _Rig, size: str, duration_s: float | None,
    reps: int, runs: list[BulkRun], proven: ProvenLink, tb: Testbed,
) -> BulkResult:  # fmt: skip
    ideal = ideal_goodput_bps(cond)
    summary: dict[str, ArmBulk] = {}
    for a in arms:
        ok = [r.flow for r in runs if r.arm == a.name and r.flow.ok]
        gp = [f.goodput_bps / 1e6 for f in ok if f.goodput_bps]
        rt = [float(f.retransmissions) for f in ok if f.retransmissions is not None]
        summary[a.name] = ArmBulk(
            arm=a.name, n=len(ok), goodput_mbit_mean=_mean(gp),
            goodput_mbit_sd=statistics.stdev(gp) if len(gp) > 1 else None,
            goodput_mbit_median=statistics.median(gp) if gp else None,
            completion_s_mean=_mean([f.completion_s for f in ok if f.completion_s]),
            retransmissions_mean=_mean(rt),
            of_ideal=(statistics.fmean(gp) * 1e6 / ideal) if gp and ideal else None,
        )  # fmt: skip
    comparisons: dict[str, dict[str, Any]] = {}
    tcp = next((a for a in arms if a.transport == "tcp"), None)
    if tcp is not None:
        for a in arms:
            if a.transport != "udp":
                continue
            cmp: dict[str, Any] = {}
            for metric in ("completion_s", "goodput_bps"):
                vals = {n: [float(getattr(r.flow, metric)) for r in runs
                            if r.arm == n and r.flow.ok and getattr(r.flow, metric)]
                        for n in (tcp.name, a.name)}  # fmt: skip
                cmp[metric] = compare(vals[tcp.name], vals[a.name], planned=reps,
                                      tcp_arm=tcp.name, quic_arm=a.name).model_dump()  # fmt: skip
            comparisons[f"{tcp.name}/{a.name}"] = cmp
    return BulkResult(
        created=now(), condition=cond.model_dump(mode="json"), arms=[a.as_dict() for a in arms],
        object=rig.path, object_bytes=rig.object_bytes, duration_s=duration_s, reps=reps,
        ideal_goodput_bps=ideal, runs=runs, summary=summary, comparisons=comparisons,
        receipt=proven.receipt.model_dump(mode="json"), provenance=provenance.collect(tb),
        versions=rig.versions(),
    )  # fmt: skip


class _QueueSampler(threading.Thread):
    """The emulator's down-direction queue every ``INTERVAL_S`` on the run's clock."""

    def __init__(self, tb: Testbed, link: Any, t0_ns: int) -> None:
        super().__init__(daemon=True)
        self.tb, self.link, self.t0_ns = tb, link, t0_ns
        self.samples: list[QueueSample] = []
        self.problem = ""
        self.halt = threading.Event()

    def run(self) -> None:
        k, begin = 0, time.time_ns()
        while not self.halt.is_set():
            try:
                c = self.link.shaper.counters(self.tb)
            except (QuicbedError, OSError, ValueError) as exc:  # the emulator went away
                self.problem = f"queue sampling stopped: {exc}"
                return
            d = _down(c)
            if c is None or "queue_bytes" not in d:
                self.problem = (f"the {self.link.shaper.name} shaper reports no queue occupancy "
                                "(only quicbed-linkem does)")  # fmt: skip
                return
            t = (time.time_ns() - self.t0_ns) / 1e9
            self.samples.append(QueueSample(t_s=t, bytes=int(d["queue_bytes"]),
                                            packets=int(d["queue_packets"]),
                                            drops=int(d.get("queue_drops", 0))))  # fmt: skip
            k += 1
            next_t = begin + int(k * INTERVAL_S * 1e9)
            self.halt.wait(max(0.0, (next_t - time.time_ns()) / 1e9))


def run_compete(
    cond: LinkCondition,
    out: Path,
    *,
    groups: list[tuple[str, int]],
    duration_s: float = 30.0,
    stagger_s: float = 0.0,
    size: str = "100MB",
    cc: str = "cubic",
    testbed: Testbed | None = None,
    shaper: str = "auto",
    receipt_tcp_seconds: float = 10,
    progress: Progress | None = None,
    figures: bool = True,
) -> CompeteResult:
    """``groups``: (arm, flows), e.g. [("h3", 1), ("h2", 4)]. All flows start at one
    instant on the client's clock, flow i (in order of ``groups``) ``i x stagger_s``
    later, and each runs ``duration_s`` (the object again and again). Written to
    ``out/compete.json``."""
    tb = testbed or LocalTestbed("qb")
    if not groups or any(n < 1 for _, n in groups):
        raise QuicbedError("compete: every group needs at least one flow")
    if duration_s <= 0 or stagger_s < 0:
        raise QuicbedError("compete: duration must be > 0 and stagger >= 0")
    resolved = _arms([a for a, _ in groups], cc)
    session = _Session(tb, cond, resolved, size, out, shaper, _tcp_cc(resolved, cc),
                       receipt_tcp_seconds, progress)  # fmt: skip
    plan = [(arm, f"{arm}-{i}") for arm, n in groups for i in range(n)]

    def body(rig: _Rig, proven: ProvenLink) -> CompeteResult:
        offsets = rig.log_sizes()
        lead_s = 1.0 + 0.15 * len(plan)  # time to spawn every client before the start
        t0_client = rig.client_clock_ns() + int(lead_s * 1e9)
        # the controller's clock for the queue sampler (the same clock locally)
        t0_ctl = time.time_ns() + int(lead_s * 1e9)
        sampler = _QueueSampler(tb, proven.link, t0_ctl)
        sampler.start()
        procs, logs = [], []
        try:
            for i, (arm, flow) in enumerate(plan):
                p, log = rig.spawn(arm, flow, duration_s, t0_client + int(i * stagger_s * 1e9))
                procs.append(p)
                logs.append(log)
            session.say(f"{len(plan)} flows started")
            total = lead_s + stagger_s * len(plan) + duration_s + 60
            rig.wait_done(logs, procs, timeout=total)
            tcp = rig.server_tcp()
        finally:
            sampler.halt.set()
            sampler.join(5)
        rcs = [p.wait(LINGER_S + 10) for p in procs]
        flows = []
        for i, ((arm, flow), log, rc) in enumerate(zip(plan, logs, rcs, strict=True)):
            recs = rig.records(log)
            final = next((r for r in recs if r.get("event") == "done"), {})
            quic = (_quic_wait(rig, arm, offsets[arm], _port(final.get("local_addr")))
                    if arm in offsets else None)  # fmt: skip
            flows.append(rig.flow_result(arm, flow, recs, tcp, quic, i * stagger_s, rc))
        return _compete_result(cond, resolved, groups, rig, duration_s, stagger_s, flows,
                               sampler, proven, tb)  # fmt: skip

    result = session.run(body)
    assert isinstance(result, CompeteResult)
    if figures:
        result.figures = [str(p) for p in plot_compete(result, out / "compete")]
    (out / "compete.json").write_text(result.model_dump_json(indent=1))
    return result


def _compete_result(
    cond: LinkCondition, arms: list[Arm], groups: list[tuple[str, int]], rig: _Rig,
    duration_s: float, stagger_s: float, flows: list[FlowResult], sampler: _QueueSampler,
    proven: ProvenLink, tb: Testbed,
) -> CompeteResult:  # fmt: skip
    lo, hi = steady_window(flows, duration_s)
    steady: dict[str, float] = {}
    if hi > lo:
        for f in flows:
            steady[f.flow] = (bytes_at(f, hi) - bytes_at(f, lo)) * 8 / (hi - lo)
    total = sum(steady.values())
    shares = {k: v / total for k, v in steady.items()} if total > 0 else {}
    arm_shares: dict[str, float] = {}
    for f in flows:
        if f.flow in shares:
            arm_shares[f.arm] = arm_shares.get(f.arm, 0.0) + shares[f.flow]
    pipe = cond.pipes()["down"]
    return CompeteResult(
        created=now(), condition=cond.model_dump(mode="json"), groups=groups,
        arms=[a.as_dict() for a in arms], duration_s=duration_s, stagger_s=stagger_s,
        object=rig.path, flows=flows, steady_from_s=lo, steady_to_s=hi, shares=shares,
        arm_shares=arm_shares, steady_bps=steady,
        jain=jain(list(steady.values())) if hi > lo else None,
        queue=sampler.samples, queue_note=sampler.problem,
        queue_limit_bytes=pipe.queue_bytes, receipt=proven.receipt.model_dump(mode="json"),
        provenance=provenance.collect(tb), versions=rig.versions(),
    )  # fmt: skip


# --- figures --------------------------------------------------------------------------
_COLORS = {"tcp": ["#c0392b", "#e67e22", "#8e44ad", "#d35400", "#a93226", "#f39c12"],
           "udp": ["#1f77b4", "#17becf", "#2ca02c", "#1abc9c", "#2471a3", "#27ae60"]}  # fmt: skip


def _flow_colors(flows: list[FlowResult], arms: list[dict[str, Any]]) -> dict[str, str]:
    transport = {a["name"]: a["transport"] for a in arms}
    seen: dict[str, int] = {}
    out = {}
    for f in flows:
        t = transport.get(f.arm, "tcp")
        i = seen.get(t, 0)
        seen[t] = i + 1
        out[f.flow] = _COLORS[t][i % len(_COLORS[t])]
    return out


def plot_compete(r: CompeteResult, base: Path) -> list[Path]:
    """Throughput of each flow over time (100 ms bins), one line per flow, as the long
    look at QUIC drew its fairness runs; under it, the bottleneck queue's occupancy."""
    import matplotlib.pyplot as plt

    from quicbed.plots import save_figure

    rows = 2 if r.queue else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 4.2 if rows == 1 else 6), sharex=True,
                             squeeze=False, height_ratios=[3, 1.3][:rows])  # fmt: skip
    ax = axes[0][0]
    colors = _flow_colors(r.flows, r.arms)
    for f in r.flows:
        tl = f.timeline()
        share = r.shares.get(f.flow)
        label = f.flow + (f" ({share * 100:.0f} %)" if share is not None else "")
        ax.plot([t for t, _ in tl], [v / 1e6 for _, v in tl], lw=1.1, color=colors[f.flow],
                label=label)  # fmt: skip
    if r.condition.get("rate_mbit"):
        ax.axhline(r.condition["rate_mbit"], color="grey", lw=0.8, ls=":", label="link rate")
    if r.steady_to_s > r.steady_from_s:
        ax.axvspan(r.steady_from_s, r.steady_to_s, color="0.93", zorder=0)
    ax.set_ylabel("throughput (Mbit/s)")
    jain_s = f", Jain {r.jain:.3f}" if r.jain is not None else ""
    c = r.condition
    ax.set_title(f"{' vs '.join(f'{n} {a}' for a, n in r.groups)}: {c.get('rate_mbit')} Mbit/s, "
                 f"{c.get('rtt_ms')} ms, queue {c.get('queue')}{jain_s}", fontsize=10)  # fmt: skip
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    if r.queue:
        qa = axes[1][0]
        qs = [q for q in r.queue if q.t_s >= 0]
        qa.plot([q.t_s for q in qs], [q.bytes / 1e3 for q in qs], color="black", lw=0.9)
        if r.queue_limit_bytes:
            qa.axhline(r.queue_limit_bytes / 1e3, color="grey", lw=0.8, ls=":")
        qa.set_ylabel("queue (kB)")
        qa.set_ylim(bottom=0)
        qa.grid(alpha=0.3)
    axes[-1][0].set_xlabel("time (s)")
    fig.tight_layout()
    return save_figure(fig, base)


def plot_bulk(r: BulkResult, base: Path) -> list[Path]:
    """Each run's throughput over time (100 ms bins), one line per run, per arm."""
    import matplotlib.pyplot as plt

    from quicbed.plots import save_figure

    fig, ax = plt.subplots(figsize=(8, 4))
    transport = {a["name"]: a["transport"] for a in r.arms}
    first: set[str] = set()
    for run in r.runs:
        tl = run.flow.timeline(offset=False)
        color = _COLORS[transport.get(run.arm, "tcp")][sorted(transport).index(run.arm) % 6]
        ax.plot([t for t, _ in tl], [v / 1e6 for _, v in tl], lw=0.8, alpha=0.7, color=color,
                label=None if run.arm in first else run.arm)  # fmt: skip
        first.add(run.arm)
    if r.ideal_goodput_bps:
        ax.axhline(r.ideal_goodput_bps / 1e6, color="grey", lw=0.8, ls=":", label="ideal goodput")
    c = r.condition
    ax.set_title(f"bulk {r.object}: {c.get('rate_mbit')} Mbit/s, {c.get('rtt_ms')} ms, "
                 f"queue {c.get('queue')}", fontsize=10)  # fmt: skip
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, base)
