"""Statistics against hand-computed values."""

from __future__ import annotations

import math

import pytest
from scipy.stats import t as student_t

from quicbed.analysis.stats import compare, summarize
from quicbed.spec.significance import min_valid


def test_summary_by_hand() -> None:
    s = summarize("h2", [100.0, 110.0, 120.0, 130.0])
    assert s.n == 4 and s.mean == 115.0 and s.median == 115.0
    sd = math.sqrt(((15**2) * 2 + (5**2) * 2) / 3)
    assert s.sd == pytest.approx(sd)
    half = student_t.ppf(0.975, 3) * sd / 2
    assert (s.ci95_low, s.ci95_high) == pytest.approx((115 - half, 115 + half))


def test_welch_and_percentage_difference_by_hand() -> None:
    tcp = [1.0, 2.0, 3.0, 4.0, 5.0]
    quic = [2.0, 4.0, 6.0, 8.0, 10.0]
    c = compare(tcp, quic, planned=5)
    assert c.enough
    assert c.pct_diff == pytest.approx((3 - 6) / 6 * 100)  # -50 %: TCP faster
    va, vb = 2.5 / 5, 10.0 / 5
    tstat = (3 - 6) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 4)
    assert c.welch_p == pytest.approx(2 * student_t.sf(abs(tstat), df))
    assert c.significant is False  # p ~ 0.11 >= 0.01


def test_significant_quic_faster() -> None:
    tcp = [200.0 + i for i in range(20)]
    quic = [100.0 + i for i in range(20)]
    c = compare(tcp, quic, planned=20)
    assert c.pct_diff == pytest.approx((209.5 - 109.5) / 109.5 * 100)
    assert c.significant is True and c.welch_p < 1e-10


def test_too_few_valid_runs_gives_no_number() -> None:
    c = compare([1.0] * 20, [1.0, 2.0], planned=20)
    assert not c.enough and c.pct_diff is None and c.welch_p is None
    assert "too few valid runs in h3" in c.problem and "need 16" in c.problem
    assert min_valid(20) == 16 and min_valid(2) == 2


def test_unstable_samples_warn() -> None:
    c = compare([100.0, 200.0, 100.0, 200.0], [100.0, 101.0, 100.0, 101.0], planned=4)
    assert any("h2: sd is" in w for w in c.warnings)


def test_holm_and_bh_by_hand() -> None:
    from quicbed.analysis.stats import adjust

    p = [0.01, 0.04, 0.03, None, 0.005]
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone
    assert adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, None, 0.02])
    # BH: sorted p * m / rank = 0.02, 0.02, 0.04, 0.04, made monotone from the top
    assert adjust(p, "bh") == pytest.approx([0.02, 0.04, 0.04, None, 0.02])
    assert adjust(p, "none") == p


def test_holm_and_bh_match_r_p_adjust() -> None:
    from quicbed.analysis.stats import adjust

    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "holm") / "BH"
    p = [0.01, 0.02, 0.03, 0.04, 0.05]
    assert adjust(p, "holm") == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    assert adjust(p, "bh") == pytest.approx([0.05] * 5)
    with pytest.raises(ValueError, match="'bonferroni'"):
        adjust(p, "bonferroni")


def test_mann_whitney_and_bootstrap_come_with_the_comparison() -> None:
    from quicbed.analysis.stats import bootstrap_diff_ci

    # complete separation of 5 vs 5 (exact test): two-sided p = 2 / C(10, 5)
    c = compare([6.0, 7, 8, 9, 10], [1.0, 2, 3, 4, 5], planned=5, test="mannwhitney", alpha=0.05)
    assert c.mannwhitney_p == pytest.approx(2 / 252) and c.p == c.mannwhitney_p
    assert c.testable and c.significant and c.welch_p is not None
    tcp = [200.0 + i for i in range(10)]
    quic = [100.0 + i for i in range(10)]
    lo, hi = bootstrap_diff_ci(tcp, quic)
    assert lo < 100 < hi and hi - lo < 10
    assert bootstrap_diff_ci(tcp, quic) == (lo, hi)  # seeded
    c = compare(tcp, quic, planned=10)
    assert (c.boot_diff_low, c.boot_diff_high) == (lo, hi) and c.p == c.welch_p
    assert bootstrap_diff_ci([5.0, 5.0], [3.0, 3.0]) == (2.0, 2.0)  # no spread


def test_a_cell_too_small_for_its_test_says_so() -> None:
    # 3 vs 3 runs: Mann-Whitney's best two-sided p is 2 / C(6, 3) = 0.1, never < 0.01,
    # so complete separation is "too few runs to test", not "not significant"
    c = compare([9.0, 10, 11], [1.0, 2, 3], planned=3, test="mannwhitney")
    assert c.enough and c.pct_diff is not None
    assert c.testable is False and c.significant is None
    assert "too few runs to test" in c.problem and "0.1" in c.problem
    # Welch's test can reach any p with the same runs
    w = compare([9.0, 10, 11], [1.0, 2, 3], planned=3)
    assert w.testable and w.significant and not w.problem
    with pytest.raises(ValueError, match="'ttest'"):
        compare([1.0, 2], [1.0, 2], planned=2, test="ttest")
