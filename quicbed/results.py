"""Reading results: what a stored attempt says, computed one way for every consumer.

The cell's summary, ``cell --from``'s side-by-side, the report and the package's
check all ask the same questions of a store; they ask them here.
"""

from __future__ import annotations

from quicbed.arms import pairs
from quicbed.cellconfig import CellConfig
from quicbed.stats import DEFAULT_ALPHA, Comparison, compare
from quicbed.store import Store


def compare_cell(
    store: Store, cell_id: str, attempt: int, cfg: CellConfig,
    extra_pairs: list[tuple[str, str]] | None = None, alpha: float = DEFAULT_ALPHA,
) -> dict[str, Comparison]:  # fmt: skip
    """The comparisons of one attempt, by pair name ``reference/candidate``
    (quicbed.arms.pairs): every arm against the reference arm, then ``extra_pairs``."""
    out = {}
    for a, b in pairs(cfg.resolved_arms(), extra_pairs):
        out[f"{a}/{b}"] = compare(store.plts(cell_id, attempt, a), store.plts(cell_id, attempt, b),
                                  planned=cfg.runs, alpha=alpha, tcp_arm=a,
                                  quic_arm=b)  # fmt: skip
    return out
