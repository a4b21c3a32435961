"""How many samples each receipt check needs: its probe sized by the power it must have.

A receipt used to send a fixed 20,000 datagrams per direction and 200 pings whatever
the link: about 26 s per receipt, most of it spent estimating figures that a few
hundred samples pin down. Here each probe is sized by what its check must be able to
tell (docs/link.md lists each check's power):

- a **mean delay** (RTT by ping, one-way delay by the UDP probe) is judged within a
  base tolerance (max(1 ms, 2 %)) widened by 3 standard errors of the configured
  jitter. The probe takes enough samples that those 3 standard errors are at most half
  the base tolerance, at the larger of the sd just measured and the model's;
- **loss** is judged by whether the configured probability lies inside the measured
  99.9 % Clopper-Pearson interval. Lossless: enough datagrams that a loss of 0.1 %
  nobody configured drops at least one of them with 95 % probability. Lossy: enough
  that a loss off by half (1.5 x or 0.5 x the configured one) fails the check with
  80 % power, computed exactly from the binomial (:func:`loss_power`);
- the **UDP delivery rate** is the median of the receiver's reporting intervals: each
  interval holds at least 200 datagrams (one datagram is 0.5 % of it, against the
  check's 3 %).

Every figure is capped (the probe's old fixed size); where the cap bites, the check's
detail records the power it had instead.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom, norm

#: the loss check's confidence (quicbed.link.receipt.LOSS_CONFIDENCE) and the power a
#: sized probe has against a loss off by LOSS_SHIFT of itself
LOSS_CONFIDENCE, LOSS_POWER, LOSS_SHIFT = 0.999, 0.8, 0.5
#: a lossless link: an unwanted loss of this probability shows with this probability
UNWANTED_LOSS, UNWANTED_SEEN = 0.001, 0.95
#: the fewest datagrams of a reporting interval of the UDP rate probe
RATE_INTERVAL_PACKETS = 200


def mean_samples(sd_ms: float, base_tolerance_ms: float) -> int:
    """Samples whose mean's 3 standard errors are at most half ``base_tolerance_ms``."""
    if sd_ms <= 0:
        return 1
    return math.ceil((6 * sd_ms / base_tolerance_ms) ** 2)


def _loss_n(p: float, q: float) -> float:
    """Normal approximation: datagrams for a true loss ``q`` to fall outside the
    two-sided LOSS_CONFIDENCE interval around ``p`` with LOSS_POWER (a first guess)."""
    za = float(norm.ppf(1 - (1 - LOSS_CONFIDENCE) / 2))
    zb = float(norm.ppf(LOSS_POWER))
    return ((za * math.sqrt(p * (1 - p)) + zb * math.sqrt(q * (1 - q))) / (q - p)) ** 2


def loss_power(p: float, q: float, n: int) -> float:
    """The exact probability that ``n`` datagrams at a true loss ``q`` fail the loss
    check of a configured ``p``: that p falls outside the Clopper-Pearson interval of
    the drops. By the interval's duality with the two one-sided binomial tests, p lies
    inside it exactly for the drop counts k with P(X >= k | p) and P(X <= k | p) both
    at least (1 - LOSS_CONFIDENCE) / 2."""
    half = (1 - LOSS_CONFIDENCE) / 2
    k = np.arange(n + 1)
    inside = (binom.sf(k - 1, n, p) >= half) & (binom.cdf(k, n, p) >= half)
    return float(binom.pmf(k, n, q)[~inside].sum())


def _enough(p: float, shift: float, n: int) -> bool:
    """``n`` datagrams catch a loss off by ``shift`` of ``p``, both ways, with LOSS_POWER."""
    return all(
        loss_power(p, q, n) >= LOSS_POWER
        for q in (min(p * (1 + shift), 0.999), p * (1 - shift))
        if q > 0
    )


def loss_samples(p: float) -> int:
    """Datagrams the loss check needs at configured loss ``p`` (module docstring): the
    normal approximation's guess, raised by 2 % steps until the exact power holds (the
    exact interval is wider than the approximation's: at 1 % its guess has 74 %)."""
    if p <= 0:
        return math.ceil(math.log(1 - UNWANTED_SEEN) / math.log(1 - UNWANTED_LOSS))
    n = math.ceil(max(_loss_n(p, min(p * (1 + LOSS_SHIFT), 0.999)), _loss_n(p, p / 2)))
    while not _enough(p, LOSS_SHIFT, n) and n < 10_000_000:
        n = math.ceil(n * 1.02)
    return n


def loss_detects(p: float, n: int) -> float | None:
    """The smallest relative error in a configured loss ``p`` (0.5: off by half) that
    ``n`` datagrams catch both ways with LOSS_POWER (to 0.01); None where p is 0 (see
    :func:`unwanted_seen`), 1.0 or more where not even an error of 100 % is."""
    if p <= 0 or n <= 0:
        return None
    lo, hi = 0.0, 1.0
    if not _enough(p, hi, n):
        return hi
    while hi - lo > 0.01:  # bisection on the error the n datagrams just catch
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _enough(p, mid, n) else (mid, hi)
    return round(hi, 2)


def unwanted_seen(n: int) -> float:
    """The probability that ``n`` datagrams show an unwanted loss of UNWANTED_LOSS."""
    return 1 - (1 - UNWANTED_LOSS) ** n


def rate_interval_s(payload_rate_bps: float, payload_bytes: int) -> float:
    """The UDP rate probe's reporting interval: RATE_INTERVAL_PACKETS datagrams' time at
    the payload rate, between iperf3's 0.1 s floor and 1 s."""
    secs = RATE_INTERVAL_PACKETS * payload_bytes * 8 / payload_rate_bps
    return min(1.0, max(0.1, round(secs, 2)))
