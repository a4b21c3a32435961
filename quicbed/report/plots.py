"""Heatmaps drawn as the reference study draws them.

Rows are rates, columns are pages; the colour is the percentage difference
(TCP - QUIC) / QUIC x 100 on a diverging scale from -100 % (blue, TCP faster) to
+100 % (red, QUIC faster); every cell carries its value; a cell that is not
significant at alpha is white. Cells without a number say why: ``n/a`` (too few
valid runs), ``fail`` (the link receipt failed), ``-`` (not measured).

Output is deterministic (quicbed.figsave: fixed SVG id salt, no date in the SVG, a
fixed PNG software tag), so that a replication package can prove by bytes that a
figure is what this code draws from the packaged numbers; :func:`figure_data` gives
those numbers (what each cell shows) for comparison across matplotlib versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.colors import TwoSlopeNorm, to_hex

from quicbed.figsave import save_figure

CMAP = "RdBu_r"  # low = blue (TCP faster), high = red (QUIC faster)


@dataclass
class HeatCell:
    pct: float | None = None
    significant: bool | None = None
    state: str = "-"  # ok | n/a | untested | fail | - (quicbed.report.build.heat_state)


def cell_look(cell: HeatCell, norm: TwoSlopeNorm, cmap: object) -> tuple[object, str, str]:
    """(fill colour, text, text colour) of one heatmap cell: the masking rules in one place."""
    if cell.state == "ok" and cell.pct is not None:
        clipped = max(-100.0, min(100.0, cell.pct))
        if not cell.significant:
            return "white", f"{cell.pct:+.0f}", "black"
        ink = "white" if abs(clipped) > 60 else "black"
        return cmap(norm(clipped)), f"{cell.pct:+.0f}", ink  # type: ignore[operator]
    return "#d9d9d9", cell.state if cell.state != "ok" else "n/a", "black"


def figure_data(
    rows: list[str], cols: list[str], cells: dict[tuple[str, str], HeatCell], title: str
) -> dict[str, object]:
    """What the heatmap shows, cell by cell (text, fill colour, state, number): the
    numbers behind the figure, comparable without comparing images."""
    norm = TwoSlopeNorm(vmin=-100, vcenter=0, vmax=100)
    cmap = plt.get_cmap(CMAP)
    out = []
    for r in rows:
        for c in cols:
            cell = cells.get((r, c), HeatCell())
            colour, text, _ = cell_look(cell, norm, cmap)
            out.append(
                {
                    "row": r,
                    "col": c,
                    "state": cell.state,
                    "pct": cell.pct,
                    "significant": cell.significant,
                    "text": text,
                    "fill": to_hex(colour),  # type: ignore[arg-type]
                }
            )
    return {"title": title, "rows": rows, "cols": cols, "cells": out}


#: the longest row label that draws in the heatmap's base width (a background flow's
#: spelling, the longest of the constant links' labels, is 35 characters)
LONG_LABEL = 36


def draw_heatmap(
    rows: list[str],
    cols: list[str],
    cells: dict[tuple[str, str], HeatCell],
    title: str,
    path_base: Path,
    xlabel: str = "page",
    ylabel: str = "rate",
    cbar: str = "(TCP - QUIC) / QUIC [%]",
) -> list[Path]:
    """Write ``path_base``.png and .svg; returns the two paths. The axes are pages
    across and rates down unless ``xlabel`` and ``ylabel`` say otherwise."""
    # row labels longer than any a constant link's heatmap has (a varying link's trace,
    # quicbed.model.link.rate_label) get room of their own; every other heatmap keeps
    # its width, so the figures of packages already made redraw byte for byte
    longest = max((len(r) for r in rows), default=0)
    fig_w = max(6.0, 1.1 * len(cols) + 2.6) + max(0, longest - LONG_LABEL) * 0.14
    fig_h = max(3.0, 0.75 * len(rows) + 2.0)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    norm = TwoSlopeNorm(vmin=-100, vcenter=0, vmax=100)
    cmap = plt.get_cmap(CMAP)
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            colour, text, ink = cell_look(cells.get((r, c), HeatCell()), norm, cmap)
            ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=colour, edgecolor="#888888"))
            ax.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=9, color=ink)
    ax.set_xlim(0, len(cols))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([j + 0.5 for j in range(len(cols))], cols, rotation=45, ha="right")
    ax.set_yticks([i + 0.5 for i in range(len(rows))], rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    cb = fig.colorbar(sm, ax=ax, fraction=0.05, pad=0.03)
    cb.set_label(cbar, fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path_base)
