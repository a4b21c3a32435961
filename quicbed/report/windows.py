"""Congestion windows of transfer flows: the long look's figures 4.2-4.4, 4.10, 4.12, 4.13.

For a traced transfer cell (quicbed.results.flowtraces) the report draws, per compete
repetition, every flow on one time axis (the run's clock, t = 0 the common start):
throughput (100 ms bins, as the throughput figure), congestion window (solid, each
sample marked with its sender's phase as explain does: quicbed.analysis.explain.mark_phases)
and bytes in flight (dashed) with the flow's losses (``x``: QUIC's declared losses, TCP's
retransmitted segments) and QUIC's spurious losses (``o``: declared lost, acknowledged
later), and each flow's smoothed RTT; where the steady part is 10 s or more, also a
5 s close-up of it (figs 4.2c/d, 4.3c, 4.4c). A bulk cell gets one such figure of the first
traced valid flow of each arm, each on its own clock (t = 0 as its client started): one
transfer per arm under the cell's loss or reordering. The legend counts each flow's
losses and spurious losses (None where its server does not log them). Where a QUIC
server logs its loss-detection thresholds (quic-go), the RTT panel overlays the time
threshold in force (its factor times the smoothed RTT, dotted) and marks where the
packet threshold was switched off: the study's fig 4.12d, the adaptive reordering
threshold over the declared losses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quicbed.analysis.explain import mark_phases
from quicbed.figsave import save_figure
from quicbed.report.figure import Drawn
from quicbed.report.transferplots import flow_colors
from quicbed.results.flowtraces import flow_samples
from quicbed.results.transfers import BulkResult, CompeteResult, FlowResult

LOSS_MARKS = ("lost", "retransmit")
#: the close-up of a compete repetition's windows (the study's figs 4.2c/d, 4.3c, 4.4c:
#: five seconds), from the start of its steady part, where the steady part is twice that
CLOSEUP_S = 5.0


def time_threshold_ms(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """``(t_s, ms)``: at each sample with a smoothed RTT, the loss-detection time
    threshold then in force (the factor of the last ``thresholds`` row before it) times
    that RTT; empty where the server logged no thresholds."""
    factor: float | None = None
    out = []
    for s in sorted(rows, key=lambda r: r["t_s"]):
        if s.get("event") == "thresholds" and s.get("time_threshold") is not None:
            factor = float(s["time_threshold"])
        elif s.get("event") == "sample" and s.get("srtt_ms") and factor is not None:
            out.append((s["t_s"], factor * float(s["srtt_ms"])))
    return out


def traced(flows: list[FlowResult]) -> bool:
    return any(f.trace for f in flows)


def figures(r: BulkResult | CompeteResult, root: Path, cid: str, figs: Path) -> list[Drawn]:
    """The window figures of one cell's record (none if its flows were not traced)."""
    shows: dict[str, Any] = {"cell_id": cid, "transfer": r.kind, "view": "windows"}
    out: list[Drawn] = []
    if isinstance(r, BulkResult):
        first: dict[str, FlowResult] = {}
        for run in r.runs:
            if run.flow.ok and run.flow.trace and run.arm not in first:
                first[run.arm] = run.flow
        if first:
            title = f"bulk, cell {cid}: congestion window of one flow per arm"
            paths = plot_windows(
                list(first.values()), root, figs / f"windows-{cid}", title, r, offset=False
            )
            out.append(Drawn(title, paths, shows | {"title": title}))
        return out
    for crun in r.runs:
        if not traced(crun.flows):
            continue
        title = f"compete, cell {cid}, repetition {crun.rep}: congestion windows per flow"
        paths = plot_windows(
            crun.flows, root, figs / f"windows-{cid}-{crun.rep}", title, r, offset=True
        )
        out.append(Drawn(title, paths, shows | {"rep": crun.rep, "title": title}))
        if crun.steady_to_s - crun.steady_from_s >= 2 * CLOSEUP_S:
            # the study's close-ups: how often each window is updated, in the steady part
            span = (crun.steady_from_s, crun.steady_from_s + CLOSEUP_S)
            title = (
                f"compete, cell {cid}, repetition {crun.rep}: {CLOSEUP_S:g} s close-up "
                f"of the windows from {span[0]:.1f} s"
            )
            paths = plot_windows(
                crun.flows,
                root,
                figs / f"windows-{cid}-{crun.rep}-closeup",
                title,
                r,
                offset=True,
                span=span,
            )
            out.append(Drawn(title, paths, shows | {"rep": crun.rep, "title": title, "span": span}))
    return out


def plot_windows(
    flows: list[FlowResult],
    root: Path,
    base: Path,
    title: str,
    r: BulkResult | CompeteResult,
    *,
    offset: bool,
    span: tuple[float, float] | None = None,
) -> list[Path]:
    """Throughput, cwnd (phases marked) and in flight, RTT of ``flows`` on one axis;
    ``span``: only that time range (s), a close-up."""
    import matplotlib.pyplot as plt

    colors = flow_colors(flows, r.arms)
    fig, (tp, cw, rt) = plt.subplots(
        3, 1, figsize=(9, 8.5), sharex=True, gridspec_kw={"height_ratios": [1.4, 2.2, 1.2]}
    )
    seen: set[str] = set()
    for f in flows:
        col = colors[f.flow]
        tl = f.timeline(offset=offset)
        tp.plot([t for t, _ in tl], [v / 1e6 for _, v in tl], lw=1.0, color=col, label=f.flow)
        rows = flow_samples(root, f, offset=offset)
        pts = [s for s in rows if s.get("event") == "sample"]
        facts = (f.trace or {}).get("facts") or {}
        label = f"{f.flow}: {facts.get('losses') or 0} losses"
        if facts.get("spurious_losses") is not None:
            label += f", {facts['spurious_losses']} spurious"
        c = [(s["t_s"], s["cwnd_bytes"] / 1000) for s in pts if s.get("cwnd_bytes")]
        if c:
            cw.step(*zip(*c, strict=True), where="post", color=col, lw=1.2, label=label)
            mark_phases(cw, pts, "t_s", seen)
        else:
            why = "; ".join(((f.trace or {}).get("missing") or {}).values()) or "no samples"
            cw.plot([], [], color=col, label=f"{f.flow}: no window ({why})"[:110])
        fl = [
            (s["t_s"], s["in_flight_bytes"] / 1000)
            for s in pts
            if s.get("in_flight_bytes") is not None
        ]
        if fl:
            cw.step(*zip(*fl, strict=True), where="post", color=col, lw=0.6, ls="--", alpha=0.6)
        ymax = max((y for _, y in c), default=0.0)
        lost = [s["t_s"] for s in rows if s.get("event") in LOSS_MARKS]
        spur = [s["t_s"] for s in rows if s.get("event") == "spurious"]
        cw.plot(lost, [ymax * 1.02] * len(lost), marker="x", color=col, ms=4, ls="none")
        cw.plot(spur, [ymax * 1.06] * len(spur), marker="o", mfc="none", color=col, ms=4, ls="none")
        sr = [(s["t_s"], s["srtt_ms"]) for s in pts if s.get("srtt_ms")]
        if sr:
            rt.plot(*zip(*sr, strict=True), color=col, lw=1.0)
        th = time_threshold_ms(rows)
        if th:
            rt.step(
                *zip(*th, strict=True),
                where="post",
                color=col,
                lw=0.9,
                ls=":",
                label=f"{f.flow}: loss time threshold",
            )
            off = [
                s["t_s"]
                for s in rows
                if s.get("event") == "thresholds" and s.get("packet_threshold") == 0
            ]
            if off:  # quic-go switches it off once, at the first spurious loss
                rt.axvline(
                    off[0], color=col, lw=0.8, ls="--", label=f"{f.flow}: packet threshold off"
                )
    if r.condition.get("rate_mbit"):
        tp.axhline(r.condition["rate_mbit"], color="grey", lw=0.8, ls=":", label="link rate")
    tp.set_ylabel("throughput\n(Mbit/s)")
    tp.legend(fontsize=7, loc="upper right")
    cw.set_ylabel("cwnd (solid), in flight\n(dashed) [kB]; loss x,\nspurious o")
    cw.legend(fontsize=7, loc="upper right")
    rt.set_ylabel("srtt (ms)")
    if rt.get_legend_handles_labels()[0]:
        rt.legend(fontsize=7, loc="upper right")
    rt.set_xlabel(
        "time (s)" + (" since the run's common start" if offset else " since the flow's start")
    )
    for ax in (tp, cw, rt):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    if span is not None:
        rt.set_xlim(*span)
    cond = r.condition
    fig.suptitle(
        f"{title}\n{cond.get('rate_mbit')} Mbit/s, loss {cond.get('loss_pct') or 0} %, "
        f"jitter {cond.get('jitter_ms') or 0} ms ({cond.get('jitter_kind') or 'none'}), "
        f"queue {cond.get('queue')}",
        fontsize=9,
    )
    fig.tight_layout()
    return save_figure(fig, base)
