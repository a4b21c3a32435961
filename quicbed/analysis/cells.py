"""A page cell's comparisons from the store: each pair of its arms' valid PLTs, or
another per-load metric of theirs (``metric``: one of quicbed.spec.significance.METRICS).

The one place an attempt's verdicts are computed from its stored loads: the runner
prints them when a cell ends, the report tabulates them and ``verify`` recomputes
them from a package, so all three say the same of one attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quicbed.analysis.stats import Comparison, compare
from quicbed.results.store import Store, check_metric
from quicbed.spec.arms import pairs
from quicbed.spec.significance import DEFAULT_ALPHA, DEFAULT_METRIC

if TYPE_CHECKING:  # annotations only: cellconfig imports the shapers' names
    from quicbed.spec.cellconfig import CellConfig


def compare_cell(
    store: Store,
    cell_id: str,
    attempt: int,
    cfg: CellConfig,
    extra_pairs: list[tuple[str, str]] | None = None,
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    metric: str = DEFAULT_METRIC,
) -> dict[str, Comparison]:
    """The comparisons of one attempt, by pair name ``reference/candidate``
    (quicbed.spec.arms.pairs): every arm against the reference arm, then ``extra_pairs``.
    ``test`` and ``alpha`` are the spec's (a plain cell's: Welch at 0.01). ``metric``
    is the runs column compared (PLT unless asked; refused unless in METRICS): a valid
    load without it (a page that painted nothing contentful has no LCP) is not in the
    sample, and too few such loads is the comparison's problem, named."""
    check_metric(metric)
    out = {}
    for a, b in pairs(cfg.resolved_arms(), extra_pairs):
        out[f"{a}/{b}"] = compare(
            store.values(cell_id, attempt, a, metric),
            store.values(cell_id, attempt, b, metric),
            planned=cfg.runs,
            alpha=alpha,
            test=test,
            reference_arm=a,
            candidate_arm=b,
            sample="valid runs" if metric == DEFAULT_METRIC else f"valid runs with {metric}",
        )
    return out
