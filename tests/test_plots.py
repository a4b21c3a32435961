"""Heatmap masking: significant cells coloured on the diverging scale, others white."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
from matplotlib.colors import TwoSlopeNorm

from quicbed.report.plots import CMAP, HeatCell, cell_look, draw_heatmap

NORM = TwoSlopeNorm(vmin=-100, vcenter=0, vmax=100)


def test_masking_rules() -> None:
    cmap = plt.get_cmap(CMAP)
    red, _, _ = cell_look(HeatCell(80, True, "ok"), NORM, cmap)
    blue, _, _ = cell_look(HeatCell(-80, True, "ok"), NORM, cmap)
    assert red[0] > 0.5 > red[2] and blue[2] > 0.5 > blue[0]  # QUIC faster red, TCP blue
    assert cell_look(HeatCell(80, False, "ok"), NORM, cmap)[:2] == ("white", "+80")
    assert cell_look(HeatCell(None, None, "n/a"), NORM, cmap)[1] == "n/a"
    assert cell_look(HeatCell(None, None, "fail"), NORM, cmap)[1] == "fail"
    assert cell_look(HeatCell(250, True, "ok"), NORM, cmap)[0] == cmap(1.0)  # clipped at 100


def test_files_and_white_cell(tmp_path: Path) -> None:
    cells = {
        ("10 Mbit/s", "5kb"): HeatCell(90, True, "ok"),
        ("10 Mbit/s", "1mb"): HeatCell(90, False, "ok"),
    }
    png, svg = draw_heatmap(["10 Mbit/s"], ["5kb", "1mb"], cells, "t", tmp_path / "h")
    assert png.exists() and svg.exists() and "<svg" in svg.read_text()[:500]
    img = mpimg.imread(png)
    row = img[img.shape[0] // 2]
    whites = sum(1 for px in row if px[0] > 0.97 and px[1] > 0.97 and px[2] > 0.97)
    reds = sum(1 for px in row if px[0] > 0.4 and px[2] < 0.25)
    assert whites > 50 and reds > 50
