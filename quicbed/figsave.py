"""How every quicbed figure is written: PNG and SVG, the same bytes for the same numbers.

Its own module, below everything that draws, because figures are drawn at more than
one level (the report's heatmaps and transfer plots, ``quicbed explain``'s timeline in
quicbed.analysis) and a replication package proves by bytes that a figure is what the
code draws from the packaged numbers: one writer, one set of rules. Importing it
selects matplotlib's Agg backend (files only, no display), before pyplot is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

#: rc settings that make the saved files byte-reproducible for one matplotlib version
DETERMINISTIC: dict[Any, Any] = {"svg.hashsalt": "quicbed"}


def save_figure(fig: Figure, path_base: Path) -> list[Path]:
    """Write ``path_base``.png and .svg deterministically (same numbers, same bytes
    for one matplotlib), close the figure; returns the two paths."""
    paths = [path_base.with_suffix(".png"), path_base.with_suffix(".svg")]
    path_base.parent.mkdir(parents=True, exist_ok=True)
    with plt.rc_context(DETERMINISTIC):
        fig.savefig(paths[0], dpi=130, metadata={"Software": "quicbed"})
        fig.savefig(paths[1], metadata={"Date": None, "Creator": "quicbed"})
    plt.close(fig)
    return paths
