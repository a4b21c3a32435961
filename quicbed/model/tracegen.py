"""Link capacity traces generated from stated statistical models, so a time-varying
link needs no downloaded trace and every number in it can be traced to a source.

A model is a small Markov chain over capacity states (good, bad, outage) stepped every
``step_ms``; each step draws the state's rate around its mean, and the rates become
Mahimahi delivery opportunities through an exact integer carry. The parameters were
fitted to published measurements (each model's ``source`` says which, and
docs/generated-traces.md how); the fitting rule itself (state boundaries, the window)
is ours and is stated there.

Output is Mahimahi's LinkShell format: non-decreasing millisecond offsets, each one
opportunity of :data:`OPPORTUNITY_BYTES`, repeated with the period of the last offset.
The same (model, seed, seconds, direction) gives the same list on every platform and
Python version: the only randomness is ``random.Random.random()`` (whose sequence for a
given integer seed Python promises to keep), and the arithmetic after it is IEEE-754
``+ - * /``, ``sqrt`` and integers, never libm's ``exp`` or ``log`` (whose last bit
may differ between platforms and would move an opportunity by a millisecond).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from quicbed.errors import QuicbedError
from quicbed.model.mahimahi import OPPORTUNITY_BYTES

#: bits one delivery opportunity carries (quicbed.model.capacity: one 1500-byte IP packet)
_OPPORTUNITY_BITS = OPPORTUNITY_BYTES * 8
#: the bounds of ``seconds``: under a second is no trace; over an hour is a typo (an
#: hour at 30 Mbit/s is already ~9 million lines)
MIN_SECONDS, MAX_SECONDS = 1.0, 3600.0
MAX_SEED = 2**63 - 1
DIRECTIONS = ("down", "up")
#: the coefficient of variation of 4*U**3 (U uniform on [0, 1)), the largest a state's
#: per-step rate may have (see _rate_factor)
MAX_CV = 3 / math.sqrt(7)


@dataclass(frozen=True)
class State:
    """One capacity state of a model.

    ``down_mbit``/``up_mbit`` are the state's mean rates (0 for an outage: no
    opportunity at all while the chain is there); ``cv`` is the coefficient of variation
    of the per-step rate around that mean (the fitted within-state spread, reused for
    both directions); ``hold_ms`` is the mean time the chain stays before it leaves
    (geometric in steps); ``next`` says where it goes when it leaves, as
    ``(state name, probability)`` pairs.
    """

    name: str
    down_mbit: float
    up_mbit: float
    cv: float
    hold_ms: float
    next: tuple[tuple[str, float], ...]

    def mean_mbit(self, direction: str) -> float:
        """The state's mean rate in ``direction`` ("down" or "up")."""
        return self.down_mbit if direction == "down" else self.up_mbit


@dataclass(frozen=True)
class TraceModel:
    """A named capacity model: its states, how often the state may change
    (``step_ms``), and where its numbers come from (``source``, with the year).

    ``summary`` is one line for a listing. The first state is the one listed first, not
    where a trace starts: a trace starts in a state drawn from the chain's stationary
    distribution, so a short trace is not biased towards any state.
    """

    name: str
    summary: str
    source: str
    states: tuple[State, ...]
    step_ms: int

    def __post_init__(self) -> None:
        # A bad table is a programming error, caught at import rather than as a strange
        # trace later.
        names = [s.name for s in self.states]
        if len(set(names)) != len(names) or not self.states:
            raise ValueError(f"model {self.name}: state names must be unique and present")
        if self.step_ms < 1:
            raise ValueError(f"model {self.name}: step_ms must be >= 1")
        for s in self.states:
            if not (s.down_mbit >= 0 and s.up_mbit >= 0 and 0 <= s.cv <= MAX_CV):
                raise ValueError(f"model {self.name}: state {s.name}: rate or cv out of range")
            if len(self.states) > 1 and not (s.hold_ms >= self.step_ms and s.next):
                raise ValueError(f"model {self.name}: state {s.name}: hold or next missing")
            for to, p in s.next:
                if to not in names or to == s.name or not p > 0:
                    raise ValueError(f"model {self.name}: state {s.name}: bad next {to!r}")
            if s.next and abs(sum(p for _, p in s.next) - 1) > 1e-9:
                raise ValueError(f"model {self.name}: state {s.name}: next does not sum to 1")
        for d in DIRECTIONS:
            if not any(s.mean_mbit(d) > 0 for s in self.states):
                raise ValueError(f"model {self.name}: no state carries anything {d}")


# The numbers below were fitted by us to the recorded traces each ``source`` names
# (docs/generated-traces.md gives the rule): the trace is cut into windows of
# ``step_ms``; a window with no delivery is an outage (lte-outage only), one at or above
# half the trace's mean rate is good, the rest bad (that half is our choice). A state's
# rate and cv are the mean and coefficient of variation of its windows' rates, hold_ms
# the mean run of consecutive windows in it, next the share of its counted exits.
# Holding times and cv come from the downlink trace and are reused for the uplink.
MODELS: dict[str, TraceModel] = {
    m.name: m
    for m in (
        TraceModel(
            name="lte-markov",
            summary="LTE (Verizon, 2012), two-state good/bad Markov capacity",
            source=(
                "fitted to the Verizon LTE traces Verizon-LTE-short.down/.up (140 s each), "
                "recorded with Saturator by K. Winstein, A. Sivaraman, H. Balakrishnan, "
                '"Stochastic Forecasts Achieve High Throughput and Low Delay over Cellular '
                "Networks\", USENIX NSDI 2013; as distributed in Mahimahi's traces/ "
                "(R. Netravali et al., USENIX ATC 2015)"
            ),
            step_ms=100,
            states=(
                State("good", 6.36, 7.19, 0.51, 1150, (("bad", 1.0),)),
                State("bad", 1.35, 1.53, 0.53, 410, (("good", 1.0),)),
            ),
        ),
        TraceModel(
            name="wifi-markov",
            summary="office Wi-Fi, two-state good/bad Markov capacity",
            source=(
                "fitted to the 78-minute office Wi-Fi bandwidth recording (about one "
                "sample per 200 ms) released as real-exp/traces/office-wifi_0..15 with "
                'Z. Meng et al., "Achieving Consistent Low Latency for Wireless Real-Time '
                'Communications with the Shortest Control Loop" (Zhuge), ACM SIGCOMM 2022; '
                "one direction recorded, uplink rates set equal (our choice)"
            ),
            step_ms=200,
            states=(
                State("good", 29.9, 29.9, 0.13, 7720, (("bad", 1.0),)),
                State("bad", 4.71, 4.71, 0.87, 1140, (("good", 1.0),)),
            ),
        ),
        TraceModel(
            name="lte-outage",
            summary="LTE while driving (AT&T), good/bad/outage Markov capacity",
            source=(
                "fitted to the AT&T LTE driving traces ATT-LTE-driving.down/.up (786 s, "
                "1013 s), recorded with the Saturator of K. Winstein et al. (USENIX NSDI "
                "2013); as distributed in Mahimahi's traces/ (R. Netravali et al., USENIX "
                "ATC 2015)"
            ),
            step_ms=100,
            states=(
                State("good", 6.46, 1.05, 0.38, 1960, (("bad", 0.944), ("outage", 0.056))),
                State("bad", 1.59, 0.24, 0.43, 420, (("good", 0.790), ("outage", 0.210))),
                State("outage", 0.0, 0.0, 0.0, 430, (("bad", 0.815), ("good", 0.185))),
            ),
        ),
    )
}


def _model(model: object) -> TraceModel:
    if not isinstance(model, str) or model not in MODELS:
        raise QuicbedError(f"unknown trace model {model!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[model]


def _stationary(m: TraceModel) -> list[float]:
    """The chain's stationary distribution over ``m.states``.

    Per step a state is left with probability step/hold and then goes by ``next``, so
    the time share of state i is proportional to hold_i times the share of jumps that
    land in i (the stationary vector of the ``next`` jump chain), found here by Gaussian
    elimination: plain arithmetic, so the start state a seed draws is the same
    everywhere.
    """
    n = len(m.states)
    if n == 1:
        return [1.0]
    index = {s.name: i for i, s in enumerate(m.states)}
    # nu (Q - I) = 0 with sum(nu) = 1, as rows: a[j] . nu = b[j]
    a = [[0.0] * n for _ in range(n)]
    for i, s in enumerate(m.states):
        a[i][i] -= 1.0
        for to, p in s.next:
            a[index[to]][i] += p
    b = [0.0] * n
    a[n - 1] = [1.0] * n
    b[n - 1] = 1.0
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[piv] = a[piv], a[col]
        b[col], b[piv] = b[piv], b[col]
        for r in range(n):
            if r != col and a[r][col] != 0.0:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
                b[r] -= f * b[col]
    nu = [b[i] / a[i][i] for i in range(n)]
    w = [nu[i] * s.hold_ms for i, s in enumerate(m.states)]
    total = sum(w)
    return [x / total for x in w]


def _stationary_mean(m: TraceModel, direction: str) -> float:
    """The long-run mean rate (Mbit/s) of ``m`` in ``direction``."""
    return sum(p * s.mean_mbit(direction) for p, s in zip(_stationary(m), m.states, strict=True))


def _pick(weights: list[float], u: float) -> int:
    """The index ``u`` (uniform on [0, 1)) falls in, by cumulative ``weights`` (sum 1)."""
    acc = 0.0
    for i, w in enumerate(weights):
        acc += w
        if u < acc:
            return i
    return len(weights) - 1  # rounding left u just past the last sum


def _rate_factor(cv: float, u: float) -> float:
    """A step's rate as a multiple of its state's mean: mean exactly 1, coefficient of
    variation exactly ``cv``, never negative, skewed right like measured throughput.

    It is a mix of the constant 1 and 4*U**3 (mean 1, cv 3/sqrt(7)): weight
    ``cv / MAX_CV`` on the latter. A lognormal or gamma draw would need libm's exp or
    log, whose last bit is not the same on every platform; this needs only ``*`` and
    ``+`` on the one guaranteed-stable draw ``u``.
    """
    w = cv / MAX_CV
    return (1.0 - w) + w * 4.0 * u * u * u


def _rng(model: str, seed: int, direction: str) -> random.Random:
    """The generator for one trace, seeded from a SHA-256 of the arguments (not
    ``hash()``, which is salted per process), so each direction has its own stream."""
    digest = hashlib.sha256(f"{model}:{seed}:{direction}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def _check_args(seed: object, seconds: object, direction: object) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise QuicbedError(f"seed must be an integer in [0, 2**63-1], got {seed!r}")
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)
        or not MIN_SECONDS <= seconds <= MAX_SECONDS
    ):
        raise QuicbedError(
            f"seconds must be a finite number in [{MIN_SECONDS:g}, {MAX_SECONDS:g}], "
            f"got {seconds!r}"
        )
    if direction not in DIRECTIONS:
        raise QuicbedError(f"direction must be 'down' or 'up', got {direction!r}")


def generate(model: str, *, seed: int, seconds: float, direction: str = "down") -> list[int]:
    """A trace of ``model`` lasting ``round(seconds * 1000)`` ms in ``direction``.

    Per step of ``step_ms``: the chain may move (not before the first step, whose state
    is drawn from the stationary distribution), the step's rate is drawn around the
    state's mean (0 in an outage) and rounded to whole bits per millisecond, and
    opportunities fall at the milliseconds where the carried bits reach another
    :data:`OPPORTUNITY_BYTES`; the carry runs across steps in integers, so over a trace
    the opportunities match the drawn rates exactly. The last offset is always the
    trace's length (an opportunity is added there if the carry put none), so Mahimahi
    repeats it with the right period, and so a trace is never empty.
    """
    m = _model(model)
    _check_args(seed, seconds, direction)
    total_ms = round(seconds * 1000)
    rng = _rng(model, seed, direction)
    index = {s.name: i for i, s in enumerate(m.states)}
    leave = [m.step_ms / s.hold_ms if len(m.states) > 1 else 0.0 for s in m.states]
    jumps = [([index[to] for to, _ in s.next], [p for _, p in s.next]) for s in m.states]
    mean_bits_per_ms = [s.mean_mbit(direction) * 1000 for s in m.states]  # kbit/s

    state = _pick(_stationary(m), rng.random())
    out: list[int] = []
    carry = 0  # bits gathered towards the next opportunity, always < one opportunity
    t0 = 0
    first = True
    while t0 < total_ms:
        if not first and rng.random() < leave[state]:
            targets, weights = jumps[state]
            state = targets[_pick(weights, rng.random())]
        first = False
        n = min(m.step_ms, total_ms - t0)
        u = rng.random()  # drawn in an outage too: later draws do not depend on which rates are 0
        rate = round(mean_bits_per_ms[state] * _rate_factor(m.states[state].cv, u))
        if rate > 0:
            count = (carry + rate * n) // _OPPORTUNITY_BITS
            # the k-th falls at the first ms j (1..n) with carry + rate*j >= k opportunities
            out.extend(t0 - ((carry - _OPPORTUNITY_BITS * k) // rate) for k in range(1, count + 1))
            carry += rate * n - count * _OPPORTUNITY_BITS
        t0 += n
    if not out or out[-1] != total_ms:
        out.append(total_ms)
    return out


def describe(model: str) -> str:
    """A few lines on ``model`` for a listing: what it is, its states, the long-run
    means they add up to, and where the numbers come from."""
    m = _model(model)
    lines = [
        f"{m.name}: {m.summary}",
        f"  step {m.step_ms} ms; long-run mean {_stationary_mean(m, 'down'):.2f} Mbit/s "
        f"down, {_stationary_mean(m, 'up'):.2f} up",
    ]
    for s in m.states:
        to = ", ".join(f"{n} {p:.0%}" if len(s.next) > 1 else n for n, p in s.next)
        lines.append(
            f"  {s.name:<7} {s.down_mbit:g} down / {s.up_mbit:g} up Mbit/s, cv {s.cv:g}, "
            f"mean hold {s.hold_ms:g} ms -> {to}"
        )
    lines.append(f"  source: {m.source}")
    return "\n".join(lines)
