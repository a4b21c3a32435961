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

from quicbed.spec.significance import CORRECTIONS, DEFAULT_ALPHA, TESTS, min_valid, smallest_p


class ArmSummary(BaseModel):
    arm: str
    n: int
    mean: float | None = None
    sd: float | None = None
    median: float | None = None
    ci95_low: float | None = None
    ci95_high: float | None = None
    cv: float | None = None


#: bootstrap resamples of the difference of means (BCa, seeded: reproducible)
BOOTSTRAP_RESAMPLES = 5000


class Comparison(BaseModel):
    """A reference arm (h2 in the reference study) against a candidate for one cell:
    every number the cell summary, table, heatmaps and verify show of it, computed here
    only.

    ``p`` is the p-value of ``test`` (the spec's); ``testable`` is False when the
    samples are too small for that test to ever reach ``alpha`` (Mann-Whitney U with a
    few runs), which is "too few runs to test", not "no difference". ``significant`` is
    before any correction across cells (``adjust`` does that per heatmap).
    """

    reference: ArmSummary
    candidate: ArmSummary
    enough: bool
    problem: str = ""
    pct_diff: float | None = None
    welch_p: float | None = None
    mannwhitney_p: float | None = None
    test: str = "welch"
    p: float | None = None
    testable: bool | None = None
    alpha: float = DEFAULT_ALPHA
    significant: bool | None = None
    #: 95 % BCa bootstrap CI of mean(reference) - mean(candidate), ms
    boot_diff_low: float | None = None
    boot_diff_high: float | None = None
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
        arm=arm,
        n=n,
        mean=mean,
        sd=sd,
        median=statistics.median(values),
        ci95_low=mean - half,
        ci95_high=mean + half,
        cv=sd / mean if mean else None,
    )


def compare(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    planned: int | tuple[int, int],
    alpha: float = DEFAULT_ALPHA,
    test: str = "welch",
    reference_arm: str = "h2",
    candidate_arm: str = "h3",
    sample: str = "valid runs",
) -> Comparison:
    """The comparison of two samples of one cell (the valid, non-warm-up PLTs of two
    arms). Fewer valid runs than ``min_valid(planned)`` in either arm: no number, a
    problem. Both tests are always computed (the table shows both); ``p`` is ``test``'s.
    ``planned`` may differ per sample, (reference, candidate), when they come from two
    cells (0-RTT against 1-RTT). ``sample`` names what the samples count, for the
    problem of too few (a metric other than PLT: "valid runs with lcp_ms")."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r} ({', '.join(TESTS)})")
    t, q = summarize(reference_arm, reference), summarize(candidate_arm, candidate)
    plan = planned if isinstance(planned, tuple) else (planned, planned)
    short = [(s, n) for s, n in zip((t, q), plan, strict=True) if s.n < min_valid(n)]
    if short:
        counts = (
            f"{t.arm} {t.n}, {q.arm} {q.n} of {plan[0]}; need {min_valid(plan[0])}"
            if plan[0] == plan[1]
            else "; ".join(
                f"{s.arm} {s.n} of {n}, need {min_valid(n)}"
                for s, n in zip((t, q), plan, strict=True)
            )
        )
        return Comparison(
            reference=t,
            candidate=q,
            enough=False,
            alpha=alpha,
            test=test,
            problem=f"too few {sample} in {', '.join(s.arm for s, _ in short)} ({counts})",
        )
    assert t.mean is not None and q.mean is not None
    pct = (t.mean - q.mean) / q.mean * 100
    if (t.sd or 0) == 0 and (q.sd or 0) == 0:
        welch = 0.0 if t.mean != q.mean else 1.0
    else:
        welch = float(sps.ttest_ind(reference, candidate, equal_var=False).pvalue)
    mw = float(sps.mannwhitneyu(reference, candidate, alternative="two-sided").pvalue)
    p = welch if test == "welch" else mw
    testable = smallest_p(test, t.n, q.n) < alpha
    warnings = []
    for s in (t, q):
        if s.cv is not None and s.cv >= 0.10:
            warnings.append(f"{s.arm}: sd is {s.cv * 100:.0f} % of the mean (unstable)")
    problem = ""
    if not testable:
        best = smallest_p(test, t.n, q.n)
        problem = (
            f"too few runs to test: {test} with {t.n} and {q.n} runs can reach at "
            f"best p = {best:.3g}, not below alpha {alpha:g}"
        )
    low, high = bootstrap_diff_ci(reference, candidate)
    return Comparison(
        reference=t,
        candidate=q,
        enough=True,
        problem=problem,
        pct_diff=pct,
        welch_p=welch,
        mannwhitney_p=mw,
        test=test,
        p=p,
        testable=testable,
        alpha=alpha,
        significant=(p < alpha) if testable else None,
        boot_diff_low=low,
        boot_diff_high=high,
        warnings=warnings,
    )


def bootstrap_diff_ci(
    reference: Sequence[float],
    candidate: Sequence[float],
    *,
    n: int = BOOTSTRAP_RESAMPLES,
    seed: int = 1,
) -> tuple[float, float]:
    """95 % BCa bootstrap CI of mean(reference) - mean(candidate), in ms (scipy's, seeded so a
    report rebuilt from the same store gives the same interval). Samples resampled
    independently (``paired=False``), as the two arms' loads are."""
    import numpy as np

    if len(reference) < 2 or len(candidate) < 2:
        raise ValueError("a bootstrap CI needs at least two values per sample")
    t, q = np.asarray(reference, float), np.asarray(candidate, float)
    if np.ptp(t) == 0 and np.ptp(q) == 0:  # no spread: every resample is the same
        d = float(t[0] - q[0])
        return d, d
    res = sps.bootstrap(
        (t, q),
        lambda a, b, axis: a.mean(axis=axis) - b.mean(axis=axis),
        n_resamples=n,
        confidence_level=0.95,
        method="BCa",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def adjust(pvalues: Sequence[float | None], method: str) -> list[float | None]:
    """Holm or Benjamini-Hochberg adjustment across the cells of one heatmap.

    ``None`` (no test possible) stays ``None`` and does not count as a test. BH is
    scipy's ``false_discovery_control``; scipy has no Holm, and statsmodels (whose
    ``multipletests`` has it) would be a large dependency for these few lines, which
    tests/test_stats.py checks against R's ``p.adjust``.
    """
    import numpy as np

    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r} ({', '.join(CORRECTIONS)})")
    out: list[float | None] = list(pvalues)
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    if method == "none" or not idx:
        return out
    ps = np.array([pvalues[i] for i in idx], float)
    if method == "bh":
        adjusted = sps.false_discovery_control(ps, method="bh")
    else:  # holm: step-down, (m - rank) x p, kept monotone, capped at 1
        m = len(ps)
        order = np.argsort(ps, kind="stable")
        stepped = np.maximum.accumulate((m - np.arange(m)) * ps[order])
        adjusted = np.empty(m)
        adjusted[order] = np.minimum(1.0, stepped)
    for i, v in zip(idx, adjusted, strict=True):
        out[i] = float(v)
    return out
