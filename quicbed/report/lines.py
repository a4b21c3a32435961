"""Line plots of one axis: a comparison's change against loss, RTT or jitter.

The beta study (BME) draws its result as lines: PLTC = (PLT ref - PLT cand) / PLT ref
x 100 against the loss rate, one line per RTT, page or buffer. A heatmap shows the
same numbers, but a trend along one axis reads better as a line. So for every
scenario and compared pair whose cells take at least :data:`MIN_POINTS` values of
loss, RTT or jitter, the report also draws that axis as x, one line per combination of
the other varying settings (page, rate, RTT, queue, ...), with the bootstrap 95 %
interval of the difference as error bars (relative to the reference's mean) and the
points that are not significant hollow. Heatmaps of rates x pages (the reference
study's) vary none of those axes and get no lines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from quicbed.figsave import save_figure
from quicbed.report.cellrow import CellRow

#: the fewest values of an axis worth a line
MIN_POINTS = 3


def _loss(r: CellRow) -> float:
    if r.loss_down_pct is not None or r.loss_up_pct is not None:
        return float(r.loss_down_pct or 0.0) + float(r.loss_up_pct or 0.0)
    return float(r.loss_pct)


#: the axes a line may run along: (name, axis label, value of a row)
X_AXES: tuple[tuple[str, str, Callable[[CellRow], float]], ...] = (
    ("loss", "loss [%] (end to end)", _loss),
    ("rtt", "RTT [ms]", lambda r: float(r.rtt_ms)),
    ("jitter", "jitter [ms]", lambda r: float(r.jitter_ms)),
)
#: the settings that tell a scenario's lines apart
LINE_KEYS: tuple[tuple[str, Callable[[CellRow], str]], ...] = (
    ("page", lambda r: r.page),
    ("rate", lambda r: "unlimited" if r.rate_mbit is None else f"{r.rate_mbit:g} Mbit/s"),
    ("rtt", lambda r: f"{r.rtt_ms:g} ms"),
    ("loss", lambda r: f"loss {_loss(r):g} %"),
    ("jitter", lambda r: f"jitter {r.jitter_ms:g} ms"),
    ("queue", lambda r: f"queue {r.queue}"),
)


def x_axis(rows: list[CellRow]) -> tuple[str, str, Callable[[CellRow], float]] | None:
    """The first of loss, RTT, jitter along which ``rows`` take enough values."""
    for name, label, value in X_AXES:
        if len({value(r) for r in rows}) >= MIN_POINTS:
            return name, label, value
    return None


def lines(rows: list[CellRow]) -> tuple[str, str, dict[str, list[tuple[float, CellRow]]]] | None:
    """(x axis name, label, {line label: [(x, row) sorted]}) of one heatmap group, or
    None where no axis has enough values."""
    axis = x_axis(rows)
    if axis is None:
        return None
    name, label, value = axis
    keys = [(k, f) for k, f in LINE_KEYS if k != name and len({f(r) for r in rows}) > 1]
    out: dict[str, list[tuple[float, CellRow]]] = {}
    for r in rows:
        line = ", ".join(f(r) for _, f in keys) or "all"
        out.setdefault(line, []).append((value(r), r))
    for pts in out.values():
        pts.sort(key=lambda p: p[0])
    return name, label, out


def draw(
    rows: list[CellRow], title: str, path_base: Path
) -> tuple[list[Path], dict[str, Any]] | None:
    """The line plot of one heatmap group (module docstring), or None; the paths and
    what it shows (per line, x and PLTC with its interval and significance)."""
    found = lines(rows)
    if found is None:
        return None
    import matplotlib.pyplot as plt

    name, label, by_line = found
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    shows: dict[str, Any] = {"line_plot": name, "lines": {}}
    for i, (line, pts) in enumerate(sorted(by_line.items())):
        colour = f"C{i % 10}"
        xs, ys, lo, hi, sig = [], [], [], [], []
        for x, r in pts:
            if r.pltc is None:
                continue
            ref = r.mean_ref or 0.0
            xs.append(x)
            ys.append(r.pltc)
            have_ci = r.boot_diff_low is not None and r.boot_diff_high is not None and ref > 0
            lo.append(r.pltc - (r.boot_diff_low or 0.0) / ref * 100 if have_ci else 0.0)
            hi.append((r.boot_diff_high or 0.0) / ref * 100 - r.pltc if have_ci else 0.0)
            sig.append(bool(r.significant))
        shows["lines"][line] = [
            {"x": x, "pltc": round(y, 3), "significant": s}
            for x, y, s in zip(xs, ys, sig, strict=True)
        ]
        if not xs:
            continue
        ax.errorbar(xs, ys, yerr=[lo, hi], color=colour, lw=1.3, capsize=3, label=line)
        ax.scatter(
            xs,
            ys,
            s=28,
            zorder=3,
            facecolors=[colour if s else "white" for s in sig],
            edgecolors=colour,
        )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel(label)
    ax.set_ylabel("PLTC [%] (reference - candidate) / reference")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title + "\nfilled: significant; bars: bootstrap 95 % interval", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path_base), shows
