"""Why a load took its time: one load per arm on one time axis, and where the
difference between the arms comes from.

``quicbed explain DIR --cell ID [--rep N]`` picks the cell (as ``cell --from``
does), its latest finished attempt and one measured, valid load per arm: by default
the load whose PLT is closest to its arm's median (a typical load, not a lucky one),
with ``--rep N`` load N of both arms. From the load's transport samples
(``transport.csv.gz``, quicbed.traces.tracer), its HAR and its derived facts it draws
one figure (PNG and SVG), with time in ms since the page load began (the HAR's t=0):

- events: the connection's handshake, each request sent and its first response byte,
  losses (x), the PLT;
- bytes delivered (acknowledged at the server, summed over the load's connections);
- the congestion window and the bytes in flight;
- RTT: the sender's smoothed RTT (line) and its RTT samples (dots).

h2 (TCP) is blue, h3 (QUIC) red, as in the heatmaps. Beside the figure go
``summary.txt`` (plain text), ``explain.json`` (every number) and ``transport.csv``
(the chosen loads' samples: ``arm``, ``rep``, ``t_page_ms``, then the columns of
:data:`quicbed.traces.tracer.SAMPLE_COLUMNS`; docs/explain.md), and ``index.html``,
the page the report links each traced cell to.

**The components of a PLT** (per arm, ms) **partition the load**: each is a disjoint
part of its timeline, from page start to the PLT, so they sum to the PLT exactly:

- ``handshake``: page start to the first request sent (HAR: blocked + dns +
  connect incl. TLS + send). 0-RTT sends the request with the first flight;
- ``first_byte``: first request sent to its first response byte (a round trip plus
  the server);
- then the transfer, from that first byte to the last byte delivered (acknowledged at
  the server) before the PLT, divided by the transport samples into:
  - ``loss_recovery``: the time inside a loss-recovery episode: losses closer than one
    smoothed RTT form one episode, lasting from its first loss to one RTT after its
    last;
  - ``ramp_up``: outside those, until the delivery rate, over a window of two base RTTs
    (ACKs arrive in bursts: over one RTT a rate reads high), first reaches 90 % of its
    peak;
  - ``stalls``: outside those, after the ramp-up, every gap of more than two base RTTs
    (at least 20 ms) in which no byte was delivered: what reordering, a sender held
    back or a browser's late request leaves;
  - ``transfer``: the rest of the transfer, bytes flowing after the ramp-up;
- ``after_last_byte``: the last byte delivered to the PLT: the browser's own parse,
  render and onload.

Without transport samples the five parts of the transfer and the tail are unknown
(the HAR's two are kept). ``ideal_transfer_ms`` (the delivered bytes at the peak
delivery rate) is kept beside them as a reference, not a part.

The difference between the arms is taken component by component (h2 - h3).

**Alignment.** A trace's t_ms=0 is taken just before the load command goes to the
browser; the HAR's t=0 is Chromium's navigation start. Both clocks are wall clocks
of the same kernel on the local testbed, so the offset is the difference of the
trace's ``began_wall`` and the HAR page's ``startedDateTime``; the HAR keeps whole
milliseconds, so the alignment error is within 1 ms. On the ssh testbed the two times
come from different hosts: their clock offset adds to the error and is not known.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import itertools
import json
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from quicbed.analysis.select import find_cell
from quicbed.backends import described
from quicbed.errors import QuicbedError
from quicbed.figsave import save_figure
from quicbed.results.rows import AttemptRow, RunRow
from quicbed.results.store import Store
from quicbed.spec.arms import arm_colour
from quicbed.traces import wire
from quicbed.traces.tracer import SAMPLE_COLUMNS, read_samples

ARMS = ("h2", "h3")
#: the parts of a load's timeline, in their order; they sum to its PLT (see above)
COMPONENTS = (
    "handshake",
    "first_byte",
    "ramp_up",
    "loss_recovery",
    "stalls",
    "transfer",
    "after_last_byte",
)
LABELS = {
    "handshake": "handshake (to first request sent)",
    "first_byte": "first byte (request to response)",
    "ramp_up": "ramp-up (to 90 % of peak rate)",
    "loss_recovery": "loss recovery",
    "stalls": "stalls (nothing delivered for 2 RTTs)",
    "transfer": "transfer after ramp-up",
    "after_last_byte": "after the last byte (browser, onload)",
}
LOSS_EVENTS = ("lost", "retransmit")
RAMP_FRACTION = 0.9
EXPORT_COLUMNS = ("arm", "rep", "t_page_ms")


@dataclass
class ArmLoad:
    """The chosen load of one arm, everything explain reads about it."""

    arm: str
    rep: int
    plt_ms: float
    ttfb_ms: float | None
    why_chosen: str
    level: str
    missing: dict[str, str]
    facts: dict[str, Any]
    entries: list[dict[str, Any]]  # HAR timeline, ms since page start
    offset_ms: float | None  # trace t_ms at the HAR's t=0
    align_note: str
    samples: list[dict[str, Any]] | None  # with t_page_ms added; None: none stored
    numbers: dict[str, Any] = field(default_factory=dict)
    quic: bool = False  # the load's entries went over HTTP/3
    #: where the samples come from: the stack's own log (qlog, tcp_probe) or the wire
    source: str | None = None
    #: the wire's counts against the stack's log of the same load (wire.cross_check)
    wire_check: dict[str, Any] | None = None
    #: what a reader of its numbers should know (a few packets the wire could not read)
    notes: list[str] = field(default_factory=list)


@dataclass
class ExplainResult:
    cell_id: str
    attempt: int
    out: Path
    files: list[Path]
    summary: str
    data: dict[str, Any]


# --- choosing and reading ---------------------------------------------------------
def explain(
    results: Path, cell: str | None, where: str | None, rep: int | None, out: Path | None
) -> ExplainResult:
    """Explain one cell of ``results`` into ``out`` (default
    ``results/report/explain/<cell>``); every input is checked before anything is
    written, so a refused call leaves nothing behind."""

    results = Path(results)
    store = Store(results)
    try:
        cell_id = find_cell(store, cell_id=cell, where=where)
        loads, attempt, cfg = choose(store, cell_id, rep)
    finally:
        store.close()
    target = Path(out) if out else results / "report" / "explain" / cell_id
    if target.exists() and not target.is_dir():
        raise QuicbedError(f"--out: {target} is a file; explain writes a folder")
    return write(target, cell_id, attempt, cfg, loads)


def traced(runs: list[RunRow]) -> bool:
    """Whether an attempt's loads were traced (level light or full)."""
    return any((r.detail.get("traces") or {}).get("level", "none") != "none" for r in runs)


def choose(
    store: Store, cell_id: str, rep: int | None
) -> tuple[dict[str, ArmLoad], int, dict[str, Any]]:
    """The latest finished attempt's chosen load per arm, read; or the reason it can't be."""
    cfg = store.cell_config(cell_id)
    done = [a for a in _attempts(store, cell_id) if a.status == "done"]
    if not done:
        raise QuicbedError(f"cell {cell_id} has no finished attempt to explain")
    att = done[-1]
    runs = store.runs(cell_id, att.attempt)
    if not traced(runs):
        raise QuicbedError(
            f"cell {cell_id} attempt {att.attempt} was measured without "
            "traces (--traces none): nothing to explain; rerun it with "
            "--traces light"
        )
    kind = ((att.provenance or {}).get("testbed") or {}).get("kind")
    ports = _server_ports(cfg)
    loads = {}
    for arm in cfg.get("arms", ARMS):
        measured = [r for r in runs if r.arm == arm and not r.warmup]
        valid = [(r.plt_ms, r) for r in measured if r.valid and r.plt_ms is not None]
        if rep is not None:
            hit = [r for r in measured if r.rep == rep]
            if not hit:
                reps = ", ".join(str(r.rep) for r in measured) or "none"
                raise QuicbedError(
                    f"--rep {rep}: cell {cell_id} attempt {att.attempt} has "
                    f"no measured {arm} load {rep} (measured: {reps})"
                )
            r = hit[0]
            if not (r.valid and r.plt_ms is not None):
                raise QuicbedError(
                    f"--rep {rep}: the {arm} load {rep} of cell {cell_id} is "
                    f"invalid ({r.reason or 'no PLT'})"
                )
            why = f"rep {rep}, as asked"
        else:
            if not valid:
                raise QuicbedError(
                    f"cell {cell_id} attempt {att.attempt}: no valid measured {arm} load to explain"
                )
            med = statistics.median(p for p, _ in valid)
            r = min(valid, key=lambda pr: (abs(pr[0] - med), pr[1].rep))[1]
            why = f"PLT closest to the arm's median ({med:.1f} ms of {len(valid)} valid loads)"
        loads[arm] = _read_load(store.root, r, why, kind, ports)
    return loads, att.attempt, cfg


def _server_ports(cfg: dict[str, Any]) -> set[int]:
    """The cell's server ports, to tell a capture's server side (443 where the stored
    configuration no longer resolves: a stack gone from this quicbed)."""
    from quicbed.spec.cellconfig import CellConfig

    try:
        return {a.port for a in CellConfig.model_validate(cfg).resolved_arms()}
    except (QuicbedError, ValueError):
        return {443}


def _attempts(store: Store, cell_id: str) -> list[AttemptRow]:
    latest = store.attempt(cell_id).attempt
    return [store.attempt(cell_id, n) for n in range(1, latest + 1)]


def _read_load(
    root: Path, run: RunRow, why: str, testbed_kind: str | None, ports: set[int]
) -> ArmLoad:
    detail = run.detail
    tr = detail.get("traces") or {}
    missing = dict(tr.get("missing") or {})
    entries, page_wall = _har_timeline(root, run)
    began = None
    tdir = root / tr["dir"] if tr.get("dir") else None
    if tdir and (tdir / "trace.json").exists():
        began = json.loads((tdir / "trace.json").read_text()).get("began_wall")
    offset, note = _align(began, page_wall, testbed_kind)
    samples = None
    rel = (tr.get("files") or {}).get("transport")
    if rel and (root / rel).exists():
        samples = read_samples(root / rel)
    found = _wire_of(root, run, began, ports)
    check = None
    partial = found is not None and any(wire.is_partial(c) for c in found[1].get("all", []))
    notes = []
    if found is not None and found[1].get("undecrypted"):
        short = f"{found[1]['undecrypted']} QUIC packets of the capture could not be decrypted"
        if partial:
            missing["wire"] = f"partial: {short} (docs/traces.md#the-wire-timeline-full)"
        else:
            notes.append(f"wire: {short}; its counts are short by those packets")
    if found is not None and not partial:  # a partial one is neither taken nor compared
        if samples is None:
            samples = found[0]  # a stack without a log quicbed keeps: the wire's own
        else:
            check = wire.cross_check(found[1], samples)
    if samples is None and not missing:
        missing["transport"] = "no transport samples were stored for this load"
    for s in samples or []:
        s["t_page_ms"] = None if s["t_ms"] is None else s["t_ms"] - (offset or 0.0)
    sources = sorted({str(s["source"]) for s in samples or [] if s.get("source")})
    return ArmLoad(
        arm=run.arm,
        rep=run.rep,
        plt_ms=float(run.plt_ms or 0.0),
        ttfb_ms=run.ttfb_ms,
        why_chosen=why,
        level=tr.get("level", "none"),
        missing=missing,
        facts=detail.get("transport") or {},
        entries=entries,
        offset_ms=offset,
        align_note=note,
        samples=samples,
        quic=any(p == "h3" or "quic" in p for p in run.protocols or []),
        source=",".join(sources) or None,
        wire_check=check,
        notes=notes,
    )


def _wire_of(
    root: Path, run: RunRow, began: float | None, ports: set[int]
) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The load's wire timeline (quicbed.traces.wire): its rows and counts as the cell
    stored them, or derived now from its capture (a load measured before quicbed
    derived them); None without a capture or where tshark cannot read it."""
    stored = run.detail.get("wire") or {}
    if stored.get("file") and (root / stored["file"]).exists():
        return read_samples(root / stored["file"]), stored
    files = (run.detail.get("traces") or {}).get("files") or {}
    if "capture" not in files or began is None or not (root / files["capture"]).exists():
        return None
    try:
        w = wire.read_stored(root, files, ports, began)
    except QuicbedError:
        return None
    return w.samples, w.summary()


def _wall(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _har_timeline(root: Path, run: RunRow) -> tuple[list[dict[str, Any]], float | None]:
    """Each HAR entry's phases in ms since the page's start, and that start (wall, s)."""
    if not run.har_path or not (root / run.har_path).exists():
        return [], None
    with gzip.open(root / run.har_path, "rt") as f:
        log = json.load(f).get("log", {})
    if not log.get("pages"):
        return [], None
    page0 = _wall(log["pages"][0]["startedDateTime"])
    out = []
    for e in log.get("entries", []):
        t = e.get("timings", {})

        def ms(k: str, t: dict[str, Any] = t) -> float:
            v = t.get(k, -1)
            return float(v) if v is not None and v > 0 else 0.0

        start = (_wall(e["startedDateTime"]) - page0) * 1000
        connect_start = start + ms("blocked") + ms("dns")
        sent = connect_start + ms("connect") + ms("send")
        first = sent + ms("wait")
        out.append(
            {
                "url": e["request"]["url"],
                "start": start,
                "connect_start": connect_start,
                "connect_ms": ms("connect"),
                "ssl_ms": ms("ssl"),
                "sent": sent,
                "first_byte": first,
                "end": first + ms("receive"),
            }
        )
    return out, page0


def _align(
    began: float | None, page_wall: float | None, kind: str | None
) -> tuple[float | None, str]:
    if began is None or page_wall is None:
        return None, (
            "trace and HAR not aligned (no trace start or no HAR page time): "
            "trace times are shown as recorded, from just before the load command"
        )
    offset = (page_wall - began) * 1000
    if not -1.0 <= offset <= 10_000:
        return None, (
            f"the HAR began {offset:.1f} ms after the trace, which cannot be "
            "(clocks differ); trace times are shown as recorded"
        )
    if not described(kind).controller_is_host:  # the client's clock is another machine's
        return offset, (
            f"HAR t=0 is trace t={offset:.1f} ms, from the controller's and the "
            "client's wall clocks: within 1 ms plus their clock offset (unknown)"
        )
    return offset, (
        f"HAR t=0 is trace t={offset:.1f} ms (one kernel's wall clock; the HAR "
        "keeps whole ms): aligned within 1 ms"
    )


# --- the numbers -------------------------------------------------------------------
def delivered_series(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(t_page_ms, bytes acknowledged so far over all connections of the load)."""
    last: dict[str, float] = {}
    out: list[tuple[float, float]] = []
    for s in samples:
        if s.get("delivered_bytes") is None or s.get("t_page_ms") is None:
            continue
        last[s.get("conn") or ""] = s["delivered_bytes"]
        total = sum(last.values())
        if out and out[-1][0] == s["t_page_ms"]:
            out[-1] = (s["t_page_ms"], total)
        else:
            out.append((s["t_page_ms"], total))
    return out


def rate_series(series: list[tuple[float, float]], window_ms: float) -> list[tuple[float, float]]:
    """(t, bytes/ms delivered in the window ending at t), at each sample."""
    ts = [t for t, _ in series]
    out = []
    for t, d in series:
        i = bisect.bisect_right(ts, t - window_ms) - 1
        before = series[i][1] if i >= 0 else 0.0
        if t - window_ms < ts[0]:  # the window reaches back before the first sample
            before = 0.0
        out.append((t, (d - before) / window_ms))
    return out


def loss_episodes(samples: list[dict[str, Any]], rtt_ms: float) -> list[tuple[float, float]]:
    """(start, end) of each loss-recovery episode: losses within one smoothed RTT of each
    other belong together; an episode ends one RTT after its last loss."""
    srtt = rtt_ms
    episodes: list[list[float]] = []
    for s in samples:
        if s.get("srtt_ms"):
            srtt = s["srtt_ms"]
        if s.get("event") not in LOSS_EVENTS or s.get("t_page_ms") is None:
            continue
        t = s["t_page_ms"]
        if episodes and t <= episodes[-1][1]:
            episodes[-1][1] = t + srtt
        else:
            episodes.append([t, t + srtt])
    return [(a, b) for a, b in episodes]


def _measure(spans: list[tuple[float, float]]) -> float:
    """The total length of disjoint intervals."""
    return sum((max(0.0, b - a) for a, b in spans), 0.0)


def _cut(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """``spans`` clipped to [lo, hi]."""
    return [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) > max(a, lo)]


def _outside(span: tuple[float, float], eps: list[tuple[float, float]]) -> float:
    """How much of ``span`` lies outside the disjoint intervals ``eps``."""
    a, b = span
    return max(0.0, b - a) - _measure(_cut(eps, a, b))


def transfer_parts(
    start: float,
    end: float,
    t_ramped: float,
    episodes: list[tuple[float, float]],
    delivered_at: list[float],
    stall_ms: float,
) -> dict[str, float]:
    """The transfer [``start``, ``end``] divided into disjoint parts that sum to its
    length: loss recovery (inside ``episodes``), ramp-up (before ``t_ramped``, outside
    them), stalls (after it, outside them: gaps of more than ``stall_ms`` between the
    times ``delivered_at`` at which bytes were delivered) and the rest, bytes flowing."""
    eps = _cut(sorted(episodes), start, end)
    loss = _measure(eps)
    ramp = _outside((start, max(start, min(t_ramped, end))), eps)
    after = max(start, min(t_ramped, end))
    times = [t for t in sorted(delivered_at) if after <= t <= end]
    gaps = [(a, b) for a, b in itertools.pairwise([after, *times]) if b - a > stall_ms]
    stalls = sum((_outside(g, eps) for g in gaps), 0.0)
    rest = (end - start) - loss - ramp - stalls
    return {
        "loss_recovery": loss,
        "ramp_up": ramp,
        "stalls": stalls,
        "transfer": max(0.0, rest),
    }


def arm_numbers(load: ArmLoad, base_rtt_ms: float) -> dict[str, Any]:
    """One arm's components (ms; they partition [0, PLT]) and the facts behind them;
    None where not known."""
    n: dict[str, Any] = {"plt_ms": load.plt_ms, "ttfb_ms": load.ttfb_ms}
    plt = load.plt_ms
    main = load.entries[0] if load.entries else None
    sent = first = None  # the main request sent, its first byte: clamped into [0, PLT]
    if main:
        sent = min(max(main["sent"], 0.0), plt)
        first = min(max(main["first_byte"], sent), plt)
    n["handshake"] = sent
    n["first_byte"] = None if sent is None or first is None else first - sent
    n["connect_ms"] = main["connect_ms"] if main else None
    n["tls_ms"] = main["ssl_ms"] if main else None
    for k in (
        "ramp_up",
        "loss_recovery",
        "stalls",
        "transfer",
        "after_last_byte",
        "ideal_transfer_ms",
        "peak_rate_mbit",
        "delivered_bytes",
        "t_peak_ms",
        "last_byte_ms",
        "first_loss_ms",
        "losses",
        "lost_bytes",
        "handshake_done_ms",
    ):
        n[k] = None
    samples = [s for s in (load.samples or []) if s.get("t_page_ms") is not None]
    unknown = []
    if samples:
        hs = [s["t_page_ms"] for s in samples if s.get("event") == "handshake_done"]
        n["handshake_done_ms"] = hs[0] if hs else None
        window = max(2 * base_rtt_ms, 20.0)  # ACKs come in bursts: one RTT reads high
        series = [p for p in delivered_series(samples) if p[0] <= plt]
        eps = loss_episodes(samples, base_rtt_ms)
        if series and series[-1][1] > 0:
            rates = rate_series(series, window)
            # a cumulative ACK that repairs a loss acknowledges at once what arrived over
            # the recovery: windows touching an episode (to one RTT after it) would read
            # rates above the link's; the peak comes from the others where there are any
            clean = [
                (t, r)
                for t, r in rates
                if not any(t >= a and t - window <= b + base_rtt_ms for a, b in eps)
            ]
            # (where those others delivered nothing, before the first byte, all of them)
            peak = max((r for _, r in clean), default=0.0) or max(r for _, r in rates)
            n["peak_rate_mbit"] = peak * 8 / 1000
            n["delivered_bytes"] = series[-1][1]
            n["ideal_transfer_ms"] = series[-1][1] / peak if peak > 0 else None
            t90 = next(t for t, r in rates if r >= RAMP_FRACTION * peak)
            n["t_peak_ms"] = t90
            n["rate_window_ms"] = window
            # the transfer: from the main response's first byte to the last byte
            # delivered (the first sample's time where the HAR has no entry)
            start = first if first is not None else min(max(series[0][0], 0.0), plt)
            grew = [t for (t, d), (_, d0) in zip(series[1:], series, strict=False) if d > d0]
            last = max([series[0][0], *grew])
            end = min(max(last, start), plt)
            n["last_byte_ms"] = end
            n.update(transfer_parts(start, end, t90, eps, [series[0][0], *grew], window))
            n["after_last_byte"] = plt - end
        else:
            unknown.append("delivered bytes (no sample carries them)")
        lossy = [s for s in samples if s.get("event") in LOSS_EVENTS]
        n["losses"] = len(lossy)
        sizes = [s["bytes"] for s in lossy if s.get("bytes") is not None]
        n["lost_bytes"] = sum(sizes) if sizes else None  # TCP's tracepoint has no length
        if lossy:
            n["first_loss_ms"] = lossy[0]["t_page_ms"]
            n["after_first_loss_ms"] = plt - lossy[0]["t_page_ms"]
    n["unknown"] = unknown
    return n


# --- writing -----------------------------------------------------------------------
def write(
    target: Path, cell_id: str, attempt: int, cfg: dict[str, Any], loads: dict[str, ArmLoad]
) -> ExplainResult:
    """Figure, summary, numbers, samples and the page into ``target``."""
    cond = cfg["condition"]
    base_rtt = cond.get("rtt_ms") or (cond.get("delay_down_ms") or 0) + (
        cond.get("delay_up_ms") or 0
    )
    for load in loads.values():
        load.numbers = arm_numbers(load, float(base_rtt or 0) or 10.0)
    title = (
        f"cell {cell_id}: {cfg['page']}, {_rate(cond.get('rate_mbit'))}, "
        f"{base_rtt:g} ms, loss {cond.get('loss_pct', 0):g} %, {cfg.get('mode', '')}"
    )
    data = _data(cell_id, attempt, title, loads)
    summary = _summary(title, loads, data)
    target.mkdir(parents=True, exist_ok=True)

    paths = save_figure(draw(loads, title), target / "timeline")
    (target / "summary.txt").write_text(summary)
    (target / "explain.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    _write_csv(target / "transport.csv", loads)
    _write_page(target, title, summary, paths)
    files = [
        *paths,
        target / "summary.txt",
        target / "explain.json",
        target / "transport.csv",
        target / "index.html",
    ]
    return ExplainResult(cell_id, attempt, target, files, summary, data)


def _rate(v: float | None) -> str:
    return "unlimited" if v is None else f"{v:g} Mbit/s"


def _r(v: Any) -> Any:
    """Numbers rounded to µs, so the JSON is the same bytes for the same inputs."""
    if isinstance(v, float):
        return round(v, 3)
    if isinstance(v, dict):
        return {k: _r(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_r(x) for x in v]
    return v


def _data(cell_id: str, attempt: int, title: str, loads: dict[str, ArmLoad]) -> dict[str, Any]:
    arms = {}
    for arm, ld in loads.items():
        arms[arm] = {
            "rep": ld.rep,
            "chosen": ld.why_chosen,
            "trace_level": ld.level,
            "missing": ld.missing,
            "alignment": ld.align_note,
            "trace_offset_ms": ld.offset_ms,
            "samples": len(ld.samples or []),
            "samples_from": ld.source,
            "wire_check": ld.wire_check,
            "notes": ld.notes,
            "facts": ld.facts,
            **ld.numbers,
        }
    names = list(loads)
    diffs: dict[str, dict[str, Any]] = {}
    for other in names[1:]:  # the first arm is the reference (quicbed.spec.arms.pairs)
        a, b = loads[names[0]].numbers, loads[other].numbers
        diffs[f"{names[0]}/{other}"] = {
            c: None if a[c] is None or b[c] is None else a[c] - b[c]
            for c in ("plt_ms", *COMPONENTS)
        }
    out: dict[str, Any] = _r(
        {
            "format": 1,
            "cell_id": cell_id,
            "attempt": attempt,
            "title": title,
            "arms": arms,
            "difference_h2_minus_h3": diffs.get("h2/h3", {}),
            "differences": diffs,
            "definitions": {c: LABELS[c] for c in COMPONENTS},
        }
    )
    return out


def _ms(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.0f} ms"


def _summary(title: str, loads: dict[str, ArmLoad], data: dict[str, Any]) -> str:
    lines = [title, ""]
    for arm, ld in loads.items():
        n = ld.numbers
        lines.append(
            f"{arm} ({'QUIC' if ld.quic else 'TCP+TLS'}) load {ld.rep}: "
            f"PLT {ld.plt_ms:.0f} ms; {ld.why_chosen}"
        )
        for c in COMPONENTS:
            lines.append(f"  {LABELS[c]:<40} {_ms(n[c])}")
        if n["peak_rate_mbit"] is not None:
            lines.append(
                f"  peak delivery rate {n['peak_rate_mbit']:.1f} Mbit/s, "
                f"{n['delivered_bytes']:.0f} bytes delivered"
            )
        if n["losses"]:
            size = "size unknown" if n["lost_bytes"] is None else f"{n['lost_bytes']:.0f} bytes"
            lines.append(
                f"  {n['losses']} losses/retransmits ({size}), first at {n['first_loss_ms']:.0f} ms"
            )
        elif n["losses"] == 0:
            lines.append("  no loss or retransmission seen")
        if ld.samples is None:
            why = "; ".join(f"{k}: {v}" for k, v in sorted(ld.missing.items())) or "not stored"
            lines.append(
                f"  cannot tell ramp-up, loss recovery, stalls or the transfer: "
                f"no transport samples ({why}); handshake and first byte are "
                "from the HAR"
            )
        if ld.source:
            lines.append(f"  transport samples from: {_FROM.get(ld.source, ld.source)}")
        lines += [f"  note: {n}" for n in ld.notes]
        if ld.wire_check:
            w = ld.wire_check
            verdict = "agree" if w["agree"] else "DIFFER"
            spurious = (
                f"; spurious {w['wire_spurious']} on the wire, {w['stack_spurious']} in the log"
                if w.get("stack_spurious")
                else ""
            )
            lines.append(
                f"  wire against {w['stack_log']}: {w['wire_resent']} packets re-sent data "
                f"on the wire, {w['stack_losses']} losses in the stack's log{spurious}: "
                f"{verdict} ({w['rule']})"
            )
        facts = _facts_line(ld.facts)
        if facts:
            lines.append(f"  transport facts: {facts}")
        for u in n["unknown"]:
            lines.append(f"  cannot tell: {u}")
        lines.append(f"  alignment: {ld.align_note}")
    for pair, diff in data["differences"].items():
        if diff.get("plt_ms") is None:
            continue
        ref, cand = pair.split("/")
        total = diff["plt_ms"]
        faster = cand if total > 0 else ref
        lines += [
            "",
            f"PLT difference {ref} - {cand}: {total:+.0f} ms ({faster} faster). "
            f"Where it comes from ({ref} - {cand}, largest first):",
        ]
        known = [(c, v) for c, v in diff.items() if c != "plt_ms" and v is not None]
        for c, v in sorted(known, key=lambda kv: -abs(kv[1])):
            share = f" ({v / total * 100:+.0f} % of the difference)" if abs(total) > 1e-9 else ""
            lines.append(f"  {LABELS[c]:<40} {v:+.0f} ms{share}")
        for c in [c for c, v in diff.items() if v is None]:
            lines.append(f"  {LABELS[c]:<40} cannot be told (missing samples on an arm)")
    lines += [
        "",
        "The components partition each load: disjoint parts of its timeline that sum to "
        "its PLT. Definitions: docs/explain.md.",
    ]
    return "\n".join(lines) + "\n"


#: what a summary says of each sample source
_FROM = {
    "qlog": "the server's qlog",
    "tcp_probe": "the server kernel's tcp_probe",
    "ss": "the server's socket statistics (ss)",
    "wire": "the wire (the client's capture; no cwnd or bytes in flight)",
}


def _facts_line(f: dict[str, Any]) -> str:
    """The derived facts (quicbed.traces.facts) a reader of the summary asks first."""
    if f.get("status") != "ok":
        return ""
    bits = []
    if f.get("handshake_rtts") is not None:
        bits.append(f"server's handshake done after {f['handshake_rtts']:g} min RTTs")
    if f.get("window_limit"):
        bits.append(f"limited by {f['window_limit']}")
    if f.get("max_cwnd_bytes") is not None:
        bits.append(f"max cwnd {f['max_cwnd_bytes'] / 1000:.0f} kB")
    if f.get("srtt_min_ms") is not None and f.get("srtt_max_ms") is not None:
        bits.append(f"srtt {f['srtt_min_ms']:.0f}..{f['srtt_max_ms']:.0f} ms")
    return ", ".join(bits)


def _write_csv(path: Path, loads: dict[str, ArmLoad]) -> None:

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*EXPORT_COLUMNS, *SAMPLE_COLUMNS])
        for arm, ld in loads.items():
            for s in ld.samples or []:
                row = [arm, ld.rep, s.get("t_page_ms"), *(s.get(k) for k in SAMPLE_COLUMNS)]
                w.writerow(
                    ["" if v is None else (f"{v:g}" if isinstance(v, float) else v) for v in row]
                )


def _write_page(target: Path, title: str, summary: str, paths: list[Path]) -> None:
    """A self-contained page (inline PNG, no date): the report links it."""
    import base64

    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("quicbed", "templates"), autoescape=select_autoescape(["html"])
    )
    html = env.get_template("explain.html.j2").render(
        title=title,
        summary=summary,
        png=paths[0].name,
        svg=paths[1].name,
        data=base64.b64encode(paths[0].read_bytes()).decode(),
    )
    (target / "index.html").write_text(html)


# --- the figure --------------------------------------------------------------------
def draw(loads: dict[str, ArmLoad], title: str) -> Any:
    """Four panels over one time axis (ms since page start); h2 blue, h3 red. Each arm's
    request bars are drawn as one collection per kind, not an artist per request: a
    replayed page's 66 requests on three arms made a thousand artists a figure, and
    drawing them was most of a report's time (4 cells: 14.7 of 20 s)."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    fig, axes = plt.subplots(
        4, 1, figsize=(9, 9.5), sharex=True, gridspec_kw={"height_ratios": [1.1, 2, 2, 1.6]}
    )
    ev, dl, cw, rt = axes
    arms = list(loads)
    seen_phases: set[str] = set()
    xmax = max(ld.plt_ms for ld in loads.values()) * 1.08
    for i, (arm, ld) in enumerate(loads.items()):
        col = arm_colour(arm) or "black"
        y = len(arms) - 1 - i
        # per request: connect+TLS (a wide bar), request to first byte, the body
        bars = {
            "connect": [
                [(e["connect_start"], y), (e["connect_start"] + e["connect_ms"], y)]
                for e in ld.entries
                if e["connect_ms"] > 0
            ],
            "wait": [[(e["sent"], y), (e["first_byte"], y)] for e in ld.entries],
            "body": [[(e["first_byte"], y), (e["end"], y)] for e in ld.entries],
        }
        for kind, lw, alpha, cap in (
            ("connect", 4, 0.35, "butt"),
            ("wait", 1, 1.0, "projecting"),
            ("body", 2.5, 1.0, "projecting"),
        ):
            if bars[kind]:
                lc = LineCollection(
                    bars[kind], colors=col, linewidths=lw, alpha=alpha, capstyle=cap
                )
                ev.add_collection(lc)
        sent = [e["sent"] for e in ld.entries]
        first = [e["first_byte"] for e in ld.entries]
        ev.plot(sent, [y] * len(sent), marker=">", color=col, ms=6, ls="none")
        ev.plot(first, [y] * len(first), marker="o", color=col, ms=4, ls="none")
        samples = [s for s in ld.samples or [] if s.get("t_page_ms") is not None]
        hs = [s["t_page_ms"] for s in samples if s.get("event") == "handshake_done"]
        loss = [s["t_page_ms"] for s in samples if s.get("event") in LOSS_EVENTS]
        ev.plot(hs, [y] * len(hs), marker="|", color="black", ms=14, ls="none")
        ev.plot(loss, [y - 0.25] * len(loss), marker="x", color=col, ms=5, ls="none")
        for ax in axes:
            ax.axvline(ld.plt_ms, color=col, ls=":", lw=1.2)
            for t in hs[:1]:
                ax.axvline(t, color=col, ls="--", lw=0.7, alpha=0.6)
        label = f"{arm} load {ld.rep} (PLT {ld.plt_ms:.0f} ms)"
        series = delivered_series(samples)
        if series:
            dl.step(
                [t for t, _ in series],
                [d / 1000 for _, d in series],
                where="post",
                color=col,
                lw=1.4,
                label=label,
            )
            ts = [t for t, _ in series]
            lost_y = [series[max(0, bisect.bisect_right(ts, t) - 1)][1] / 1000 for t in loss]
            dl.plot(loss, lost_y, marker="x", color="black", ms=5, ls="none")
        else:
            dl.plot([], [], color=col, label=f"{label}: no delivered-bytes samples")
        for rows in _by_conn(samples).values():
            c = [(s["t_page_ms"], s["cwnd_bytes"] / 1000) for s in rows if s.get("cwnd_bytes")]
            f = [
                (s["t_page_ms"], s["in_flight_bytes"] / 1000)
                for s in rows
                if s.get("in_flight_bytes") is not None
            ]
            if c:
                cw.step(*zip(*c, strict=True), where="post", color=col, lw=1.4)
                mark_phases(cw, rows, "t_page_ms", seen_phases)
            if f:
                cw.step(*zip(*f, strict=True), where="post", color=col, lw=0.8, ls="--", alpha=0.7)
            sr = [(s["t_page_ms"], s["srtt_ms"]) for s in rows if s.get("srtt_ms")]
            rs = [(s["t_page_ms"], s["rtt_sample_ms"]) for s in rows if s.get("rtt_sample_ms")]
            if sr:
                rt.plot(*zip(*sr, strict=True), color=col, lw=1.2)
            if rs:
                rt.plot(*zip(*rs, strict=True), color=col, marker=".", ms=3, ls="none", alpha=0.6)
        if not samples:
            for ax in (cw, rt):
                ax.text(
                    0.01,
                    0.9 - 0.12 * i,
                    f"{arm}: no transport samples",
                    color=col,
                    transform=ax.transAxes,
                    fontsize=8,
                    va="top",
                )
    ev.set_yticks(range(len(arms)), list(reversed(arms)))
    ev.set_ylim(-0.7, len(arms) - 0.3)
    ev.set_title(
        "connect+TLS (bar), request > first byte o body (thick), handshake done |, "
        "loss x, PLT dotted",
        fontsize=8,
    )
    dl.set_ylabel("delivered [kB]")
    dl.legend(fontsize=8, loc="upper left")
    cw.set_ylabel("cwnd (solid),\nin flight (dashed) [kB]")
    if seen_phases:  # the sender's phase at each sample (QUIC: its qlog; TCP: cwnd < ssthresh)
        cw.legend(fontsize=7, loc="upper left", title="phase", title_fontsize=7)
    rt.set_ylabel("RTT [ms]\nsrtt (line), samples (dots)")
    rt.set_xlabel("ms since the page load began (HAR t=0)")
    rt.set_xlim(min([0.0, *(e["start"] for ld in loads.values() for e in ld.entries[:1])]), xmax)
    for ax in (dl, cw, rt):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


#: how the window panel marks a sample's congestion phase (quicbed.traces.tracer.PHASES)
PHASE_MARKS = {
    "slow_start": ("#1b9e77", "^"),
    "congestion_avoidance": ("#7f7f7f", "."),
    "recovery": ("#d95f02", "v"),
    "application_limited": ("#7570b3", "s"),
}


def mark_phases(
    ax: Any, rows: list[dict[str, Any]], x: str, seen: set[str], scale: float = 1000
) -> None:
    """Mark each window sample of ``rows`` (at ``x``, cwnd / ``scale``) with its sender's
    congestion phase (:data:`PHASE_MARKS`); each phase is labelled once per figure
    (``seen``: the phases labelled so far)."""
    for phase, (colour, marker) in PHASE_MARKS.items():
        at = [
            (s[x], s["cwnd_bytes"] / scale)
            for s in rows
            if s.get("cwnd_bytes") and s.get("phase") == phase
        ]
        if at:
            ax.plot(
                *zip(*at, strict=True),
                color=colour,
                marker=marker,
                ms=3.5,
                ls="none",
                label=phase.replace("_", " ") if phase not in seen else None,
            )
            seen.add(phase)


def _by_conn(samples: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        if s.get("event") in (None, "sample"):
            out.setdefault(s.get("conn") or "", []).append(s)
    return out
