"""Statistics of page load times: per-arm summaries and the TCP-vs-QUIC comparison.

Computed from stored runs only. The reference study's numbers are the mean and sd
of the valid, non-warm-up loads, the percentage difference
(mean TCP - mean QUIC) / mean QUIC x 100 (positive: QUIC faster) and Welch's
unequal-variance t-test at alpha 0.01. A comparison with too few valid runs says so
and gives no number: an error must never look like a result.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel
from scipy import stats as sps

DEFAULT_ALPHA = 0.01
#: a cell needs at least this share of its planned runs valid in each arm
MIN_VALID_SHARE = 0.8


class ArmSummary(BaseModel):
    arm: str
    n: int
    mean: float | None = None
    sd: float | None = None
    median: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    cv: float | None = None


class Comparison(BaseModel):
    """TCP (h2) against QUIC (h3) for one cell."""

    tcp: ArmSummary
    quic: ArmSummary
    enough: bool
    problem: str = ""
    pct_diff: float | None = None
    welch_p: float | None = None
    alpha: float = DEFAULT_ALPHA
    significant: bool | None = None
    warnings: list[str] = []


def summarize(arm: str, values: Sequence[float]) -> ArmSummary:
    n = len(values)
    if n == 0:
        return ArmSummary(arm=arm, n=0)
    mean = statistics.fmean(values)
    if n == 1:
        return ArmSummary(arm=arm, n=1, mean=mean, median=mean)
    sd = statistics.stdev(values)
    half = sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return ArmSummary(
        arm=arm, n=n, mean=mean, sd=sd, median=statistics.median(values),
        ci95_low=mean - half, ci95_high=mean + half, cv=sd / mean if mean else None,
    )  # fmt: skip


def min_valid(planned: int) -> int:
    """Fewest valid runs per arm for a cell to get a number (at least 2 for a variance)."""
    return max(2, math.ceil(MIN_VALID_SHARE * planned))


def compare(
    tcp: Sequence[float],
    quic: Sequence[float],
    *,
    planned: int,
    alpha: float = DEFAULT_ALPHA,
    tcp_arm: str = "h2",
    quic_arm: str = "h3",
) -> Comparison:
    t, q = summarize(tcp_arm, tcp), summarize(quic_arm, quic)
    need = min_valid(planned)
    short = [s.arm for s in (t, q) if s.n < need]
    if short:
        return Comparison(
            tcp=t, quic=q, enough=False, alpha=alpha,
            problem=f"too few valid runs in {', '.join(short)} "
            f"({', '.join(f'{s.arm} {s.n}' for s in (t, q))} of {planned}; need {need})",
        )  # fmt: skip
    assert t.mean is not None and q.mean is not None
    pct = (t.mean - q.mean) / q.mean * 100
    if (t.sd or 0) == 0 and (q.sd or 0) == 0:
        p = 0.0 if t.mean != q.mean else 1.0
    else:
        p = float(sps.ttest_ind(tcp, quic, equal_var=False).pvalue)
    warnings = []
    for s in (t, q):
        if s.cv is not None and s.cv >= 0.10:
            warnings.append(f"{s.arm}: sd is {s.cv * 100:.0f} % of the mean (unstable)")
    return Comparison(
        tcp=t, quic=q, enough=True, pct_diff=pct, welch_p=p, alpha=alpha,
        significant=p < alpha, warnings=warnings,
    )  # fmt: skip


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann-Whitney U p-value: no normality assumed (PLTs are skewed)."""
    if len(a) < 2 or len(b) < 2:
        return None
    return float(sps.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def bootstrap_diff_ci(
    tcp: Sequence[float], quic: Sequence[float], *, n: int = 5000, seed: int = 1
) -> tuple[float, float] | None:
    """95 % percentile bootstrap CI of mean(tcp) - mean(quic), in ms (seeded: reproducible)."""
    import numpy as np

    if len(tcp) < 2 or len(quic) < 2:
        return None
    rng = np.random.default_rng(seed)
    t, q = np.asarray(tcp, float), np.asarray(quic, float)
    dt = rng.choice(t, size=(n, t.size)).mean(axis=1)
    dq = rng.choice(q, size=(n, q.size)).mean(axis=1)
    lo, hi = np.percentile(dt - dq, [2.5, 97.5])
    return float(lo), float(hi)


def adjust(pvalues: Sequence[float | None], method: str) -> list[float | None]:
    """Holm or Benjamini-Hochberg adjustment across the cells of one heatmap.

    ``None`` (no test possible) stays ``None`` and does not count as a test.
    """
    if method == "none":
        return list(pvalues)
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    m = len(idx)
    out: list[float | None] = list(pvalues)
    if m == 0:
        return out
    order = sorted(idx, key=lambda i: pvalues[i])  # type: ignore[arg-type, return-value]
    if method == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * pvalues[i]))  # type: ignore[operator]
            out[i] = running
    elif method == "bh":
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i = order[rank]
            running = min(running, pvalues[i] * m / (rank + 1))  # type: ignore[operator]
            out[i] = min(1.0, running)
    else:
        raise ValueError(f"unknown correction {method!r} (none, holm, bh)")
    return out
