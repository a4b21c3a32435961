"""Each receipt probe sized by the power its check needs (quicbed.link.power): the
figures against their definitions, and the loss check's power against seeded draws
judged by the receipt's own rule."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from quicbed.link import power
from quicbed.link.receipt import _loss_check


def test_a_lossless_probe_sees_an_unwanted_loss_of_a_thousandth() -> None:
    n = power.loss_samples(0.0)
    assert n == 2995
    assert power.unwanted_seen(n) >= 0.95 > power.unwanted_seen(n - 1)


@pytest.mark.parametrize("p", [0.005, 0.01, 0.02, 0.05])
def test_a_sized_loss_probe_catches_a_loss_off_by_half_four_times_in_five(p: float) -> None:
    """Draws of the sized probe at 1.5 x and 0.5 x the configured loss, judged by the
    receipt's loss check: at least 75 % caught (80 % exactly, less 400 draws' noise),
    while draws at the configured loss pass 99 % of the time or more."""
    n = power.loss_samples(p)
    rng = np.random.default_rng(7)

    @functools.cache  # the check's verdict on k losses of n: judged once per distinct k
    def passes(k: int) -> bool:
        return bool(_loss_check("down", p, {"sent": n, "lost": k}).passed)

    for wrong in (1.5 * p, 0.5 * p):
        caught = sum(not passes(int(k)) for k in rng.binomial(n, wrong, 400))
        assert caught / 400 >= 0.75, (p, wrong, caught)
    passed = sum(passes(int(k)) for k in rng.binomial(n, p, 400))
    assert passed / 400 >= 0.99
    assert power.loss_detects(p, n) == pytest.approx(0.5, abs=0.02)
    assert power.loss_power(p, 1.5 * p, n) >= 0.8 and power.loss_power(p, 0.5 * p, n) >= 0.8
    # fewer datagrams detect only a larger error; the cap's power is recorded as such
    assert power.loss_detects(p, n // 4) > 0.9


def test_a_mean_is_sized_so_its_jitter_allowance_is_half_the_tolerance() -> None:
    assert power.mean_samples(0.0, 1.0) == 1
    n = power.mean_samples(5.77, 1.0)  # 10 ms uniform jitter, one direction
    assert 3 * 5.77 / math.sqrt(n) <= 0.5 < 3 * 5.77 / math.sqrt(n - 1)


def test_a_rate_interval_holds_two_hundred_datagrams() -> None:
    payload = 10e6 * 1200 / 1242  # 10 Mbit/s of 1242-byte frames
    iv = power.rate_interval_s(payload, 1200)
    assert iv * payload / (1200 * 8) >= 199
    assert power.rate_interval_s(1e9, 1200) == 0.1  # iperf3's floor
    assert power.rate_interval_s(1e5, 1200) == 1.0  # one datagram a tenth of a second
