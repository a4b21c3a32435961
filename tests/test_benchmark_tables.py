"""The presets' tally (benchmarks/background_traffic.py, benchmarks/variable_links.py)
counts what the project's one comparison says, cell by cell.

A whole preset's answer is read from its tally first (docs/benchmarks/*-preset.md), so
it is checked here on comparisons made by quicbed.analysis.stats.compare from samples
whose answer is known: h3 clearly faster, h2 clearly faster, no difference, and too few
valid loads to test.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from background_traffic import table_rows, tally_rows

from quicbed.analysis.stats import Comparison, compare

H2 = [100.0 + i % 5 for i in range(20)]
FASTER = [60.0 + i % 5 for i in range(20)]
SLOWER = [150.0 + i % 5 for i in range(20)]


def _cell(candidate: list[float], reference: list[float] = H2) -> dict[str, dict[str, Comparison]]:
    return {"plt_ms": {"h2/h3": compare(reference, candidate, planned=20)}}


def test_the_tally_counts_each_cell_by_welch_at_alpha_001() -> None:
    cells = [
        (["gen:lte", "5kb"], _cell(FASTER)),
        (["gen:lte", "10kb"], _cell(SLOWER)),
        (["gen:lte", "1mb"], _cell(list(H2))),  # the same loads: no difference
        (["gen:lte", "10mb"], _cell(FASTER[:3])),  # too few valid loads to test
        (["gen:wifi", "5kb"], _cell(FASTER)),
    ]
    rows = tally_rows(cells, lambda head: (head[0],))
    assert rows == [
        ["gen:lte", "h2/h3", "4", "1", "1", "2"],
        ["gen:wifi", "h2/h3", "1", "1", "0", "0"],
    ]
    # the pair table shows the same comparisons: h3 faster is a positive difference
    pairs = table_rows(cells)
    assert [r[:3] for r in pairs][:2] == [["gen:lte", "5kb", "h2/h3"], ["gen:lte", "10kb", "h2/h3"]]
    assert float(pairs[0][3]) > 0 > float(pairs[1][3])
    assert pairs[3][3:] == ["-", "-"]


def test_the_background_tally_groups_by_rate_and_background() -> None:
    """By default a head is (rate, page, background), as background_traffic's cells."""
    cells = [
        (["10", "5kb", "none"], _cell(FASTER)),
        (["10", "10kb", "none"], _cell(FASTER)),
        (["10", "5kb", "bulk:tcp:bbr"], _cell(SLOWER)),
    ]
    assert tally_rows(cells) == [
        ["10", "none", "h2/h3", "2", "2", "0", "0"],
        ["10", "bulk:tcp:bbr", "h2/h3", "1", "0", "1", "0"],
    ]
