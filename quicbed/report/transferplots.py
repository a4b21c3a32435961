"""Transfer cells' figures: each flow's throughput over time (compete, with the
bottleneck's queue under it) and each run's (bulk), drawn from a stored record
(quicbed.results.transfers) for the report. matplotlib is imported when a figure is
drawn, not with the module: reading a record's numbers needs no plotting library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quicbed.results.transfers import BulkResult, CompeteResult, CompeteRun, FlowResult

_COLORS = {
    "tcp": ["#c0392b", "#e67e22", "#8e44ad", "#d35400", "#a93226", "#f39c12"],
    "udp": ["#1f77b4", "#17becf", "#2ca02c", "#1abc9c", "#2471a3", "#27ae60"],
}


def link_words(r: BulkResult | CompeteResult, delay: str) -> str:
    """How a figure's title names the cell's link: its rate, ``delay`` and queue where an
    emulator shaped it (a link without a rate: "unlimited rate"); where nothing did (the
    ``none`` shaper), "unshaped": it had no rate, delay or queue to name."""
    shaper = ((r.receipt or {}).get("shaper") or {}).get("shaper")
    if shaper == "none":
        return "unshaped (no emulator: the hosts were the bottleneck)"
    c = r.condition
    rate = "unlimited rate" if c.get("rate_mbit") is None else f"{c['rate_mbit']} Mbit/s"
    return f"{rate}, {delay}, queue {c.get('queue')}"


def flow_colors(flows: list[FlowResult], arms: list[dict[str, Any]]) -> dict[str, str]:
    """Each flow's colour: TCP arms' flows in reds, UDP (QUIC) arms' in blues, one shade
    per flow in their order, so the flows of one transport tell apart in a figure."""
    transport = {a["name"]: a["transport"] for a in arms}
    seen: dict[str, int] = {}
    out = {}
    for f in flows:
        t = transport.get(f.arm, "tcp")
        i = seen.get(t, 0)
        seen[t] = i + 1
        out[f.flow] = _COLORS[t][i % len(_COLORS[t])]
    return out


def plot_compete(r: CompeteResult, run: CompeteRun, base: Path) -> list[Path]:
    """Throughput of each flow over time (100 ms bins), one line per flow, as the long
    look at QUIC drew its fairness runs; under it, the bottleneck queue's occupancy.
    One repetition (``run``) of ``r``."""
    import matplotlib.pyplot as plt

    from quicbed.figsave import save_figure

    rows = 2 if run.queue else 1
    fig, axes = plt.subplots(
        rows,
        1,
        figsize=(8, 4.2 if rows == 1 else 6),
        sharex=True,
        squeeze=False,
        height_ratios=[3, 1.3][:rows],
    )
    ax = axes[0][0]
    colors = flow_colors(run.flows, r.arms)
    for f in run.flows:
        tl = f.timeline()
        share = run.shares.get(f.flow)
        label = f.flow + (f" ({share * 100:.0f} %)" if share is not None else "")
        ax.plot(
            [t for t, _ in tl], [v / 1e6 for _, v in tl], lw=1.1, color=colors[f.flow], label=label
        )
    if r.condition.get("rate_mbit"):
        ax.axhline(r.condition["rate_mbit"], color="grey", lw=0.8, ls=":", label="link rate")
    if run.steady_to_s > run.steady_from_s:
        ax.axvspan(run.steady_from_s, run.steady_to_s, color="0.93", zorder=0)
    ax.set_ylabel("throughput (Mbit/s)")
    jain_s = f", Jain {run.jain:.3f}" if run.jain is not None else ""
    c = r.condition
    who = " vs ".join(f"{n} {a}" for a, n in r.groups)
    rtt = c.get("rtt_ms")
    if rtt is None:  # a condition of one-way delays: their sum
        rtt = (c.get("delay_down_ms") or 0) + (c.get("delay_up_ms") or 0)
    link = link_words(r, f"{rtt} ms")
    ax.set_title(f"{who}: {link}, repetition {run.rep}{jain_s}", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)
    if run.queue:
        qa = axes[1][0]
        qs = [q for q in run.queue if q.t_s >= 0]
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

    from quicbed.figsave import save_figure

    fig, ax = plt.subplots(figsize=(8, 4))
    transport = {a["name"]: a["transport"] for a in r.arms}
    first: set[str] = set()
    for run in r.runs:
        tl = run.flow.timeline(offset=False)
        color = _COLORS[transport.get(run.arm, "tcp")][sorted(transport).index(run.arm) % 6]
        ax.plot(
            [t for t, _ in tl],
            [v / 1e6 for _, v in tl],
            lw=0.8,
            alpha=0.7,
            color=color,
            label=None if run.arm in first else run.arm,
        )
        first.add(run.arm)
    if r.ideal_goodput_bps:
        ax.axhline(r.ideal_goodput_bps / 1e6, color="grey", lw=0.8, ls=":", label="ideal goodput")
    c = r.condition
    delay = (
        f"{c.get('rtt_ms')} ms"
        if c.get("rtt_ms") is not None
        else f"{c.get('delay_down_ms') or 0:g} ms down, {c.get('delay_up_ms') or 0:g} ms up"
    )
    ax.set_title(f"bulk {r.object}: {link_words(r, delay)}", fontsize=10)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, base)
