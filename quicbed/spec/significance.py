"""What a spec's ``statistics`` may ask for, and whether its runs can ever answer it.

Here, not in quicbed.analysis.stats, because the spec validates against them before
anything runs (a test it does not know, runs too few for its test to reach its alpha),
and a spec must not need the statistics that read results. quicbed.analysis.stats
computes with the same names, so a spec and the numbers it gets cannot disagree.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

#: the significance tests a comparison can use (quicbed.analysis.stats.compare)
Test = Literal["welch", "mannwhitney"]
TESTS: tuple[str, ...] = get_args(Test)
#: corrections across the cells of one heatmap (quicbed.analysis.stats.adjust)
Correction = Literal["none", "holm", "bh"]
CORRECTIONS: tuple[str, ...] = get_args(Correction)
DEFAULT_ALPHA = 0.01
#: a cell needs at least this share of its planned runs valid in each arm
MIN_VALID_SHARE = 0.8
#: the per-load figures a comparison can be drawn on (a results store's runs columns,
#: quicbed.results.store): times in ms, none where a load has none (an old store's
#: fcp_ms and lcp_ms, a page that painted nothing contentful; the visual figures of a
#: cell that captured no frames)
METRICS = (
    "plt_ms",
    "fcp_ms",
    "lcp_ms",
    "speed_index_ms",
    "visual_complete_ms",
    "ttfb_ms",
    "nav_load_ms",
    "onload_ms",
)
#: what a comparison is drawn on unless asked otherwise (the reference study's PLT)
DEFAULT_METRIC = "plt_ms"


def min_valid(planned: int) -> int:
    """Fewest valid runs per arm for a cell to get a number (at least 2 for a variance)."""
    return max(2, math.ceil(MIN_VALID_SHARE * planned))


def smallest_p(test: str, n_ref: int, n_cand: int) -> float:
    """The smallest two-sided p-value ``test`` can give samples of these sizes: for
    Mann-Whitney U (exact, no ties) 2 / C(n_ref + n_cand, n_ref), reached only when the
    samples do not overlap at all; Welch's t can reach any p from two runs per arm.
    asv's ``is_different`` asks the same before testing."""
    if test == "mannwhitney":
        return min(1.0, 2 / math.comb(n_ref + n_cand, n_ref))
    return 0.0
