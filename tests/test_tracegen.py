"""Generated capacity traces (quicbed.model.tracegen): Mahimahi's format, the same list
for the same arguments everywhere, long-run rates that match each model's Markov chain,
outages where a model has them and nowhere else, and one-line errors naming the bad value.

The long-run means here come from each model's table through a transition matrix and
power iteration written in this file, not from the module's own stationary solver.
"""

from __future__ import annotations

import hashlib
import itertools
import math

import pytest

from quicbed.errors import QuicbedError
from quicbed.model import tracegen
from quicbed.model.tracegen import MODELS, OPPORTUNITY_BYTES, State, TraceModel, describe, generate

ALL = sorted(MODELS)


def mean_mbit(trace: list[int]) -> float:
    """A trace's mean rate as Mahimahi replays it: every opportunity once per period."""
    return len(trace) * OPPORTUNITY_BYTES * 8 / (trace[-1] / 1000) / 1e6


def stationary(model: TraceModel) -> dict[str, float]:
    """The share of steps the chain spends in each state, by iterating its one-step
    transition matrix (stay with 1 - step/hold, else move by ``next``)."""
    names = [s.name for s in model.states]
    p = {a: dict.fromkeys(names, 0.0) for a in names}
    for s in model.states:
        leave = model.step_ms / s.hold_ms
        p[s.name][s.name] = 1 - leave
        for to, w in s.next:
            p[s.name][to] += leave * w
    pi = dict.fromkeys(names, 1 / len(names))
    for _ in range(5_000):
        pi = {b: sum(pi[a] * p[a][b] for a in names) for b in names}
    assert math.isclose(sum(pi.values()), 1.0)
    return pi


def long_run_mbit(model: TraceModel, direction: str) -> float:
    pi = stationary(model)
    return sum(
        pi[s.name] * (s.down_mbit if direction == "down" else s.up_mbit) for s in model.states
    )


def test_the_three_models_exist_and_cite_a_year() -> None:
    assert {"lte-markov", "wifi-markov", "lte-outage"} <= set(MODELS)
    for name, m in MODELS.items():
        assert m.name == name
        assert m.summary and "\n" not in m.summary
        assert any(str(y) in m.source for y in range(1990, 2030)), m.source
        assert m.step_ms >= 1


def test_same_arguments_same_list_and_another_seed_another_list() -> None:
    for name in ALL:
        a = generate(name, seed=11, seconds=20)
        assert generate(name, seed=11, seconds=20) == a
        assert generate(name, seed=12, seconds=20) != a
        assert generate(name, seed=11, seconds=20, direction="down") == a


# Pinned, so a change of algorithm, parameters, seeding or of Python's random module
# shows here: a generated trace's digest is part of a cell's identity
# (quicbed.model.capacity), so the same name must keep making the same trace.
PINNED = {
    ("lte-markov", "down"): (
        10055,
        "a8dfe5c12e266ed8780c4dce1ad4ac338c100161e2d006413d1dcee5ae0dfb12",
    ),
    ("wifi-markov", "up"): (
        44550,
        "754bbdc03e285e914ec441cc79f6f805d46fceaa0a5dad7c9869f41eb259d9f9",
    ),
    ("lte-outage", "down"): (
        8718,
        "3b4f2f7122b990a74ca94b25543e03106015e71eee24595d884134e80fec0eb9",
    ),
}


@pytest.mark.parametrize(("name", "direction"), sorted(PINNED))
def test_traces_are_the_pinned_ones(name: str, direction: str) -> None:
    trace = generate(name, seed=1, seconds=20, direction=direction)
    digest = hashlib.sha256(",".join(map(str, trace)).encode()).hexdigest()
    assert (len(trace), digest) == PINNED[name, direction]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("direction", ["down", "up"])
def test_a_long_trace_has_the_chains_long_run_mean(name: str, direction: str) -> None:
    want = long_run_mbit(MODELS[name], direction)
    got = mean_mbit(generate(name, seed=3, seconds=600, direction=direction))
    # the spread of a 600 s trace's mean over seeds is about 1.6 % (one standard deviation)
    assert abs(got / want - 1) < 0.05, (got, want)


# Each model's downlink mean as measured on the recorded trace it was fitted to
# (docs/generated-traces.md): the fit must give the trace's own long-run rate back.
SOURCE_DOWN_MBIT = {"lte-markov": 5.04, "wifi-markov": 26.66, "lte-outage": 5.19}


@pytest.mark.parametrize("name", ALL)
def test_each_chain_reproduces_its_source_traces_mean(name: str) -> None:
    assert long_run_mbit(MODELS[name], "down") == pytest.approx(SOURCE_DOWN_MBIT[name], rel=0.02)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("direction", ["down", "up"])
def test_the_format_non_decreasing_ending_at_the_period(name: str, direction: str) -> None:
    trace = generate(name, seed=5, seconds=30.0004, direction=direction)
    assert all(isinstance(v, int) for v in trace)
    assert all(a <= b for a, b in itertools.pairwise(trace))
    assert trace[0] >= 0
    assert trace[-1] == 30000
    assert generate(name, seed=5, seconds=1.5, direction=direction)[-1] == 1500


def test_uplink_uses_the_up_rates() -> None:
    for name in ALL:
        assert generate(name, seed=2, seconds=20, direction="up") != generate(
            name, seed=2, seconds=20
        )
    # lte-outage's uplink states are about a sixth of its downlink's
    down = mean_mbit(generate("lte-outage", seed=2, seconds=300))
    up = mean_mbit(generate("lte-outage", seed=2, seconds=300, direction="up"))
    assert up < down / 3, (up, down)


def long_gaps(trace: list[int], step_ms: int) -> list[int]:
    """Stretches of at least a step with no opportunity."""
    return [b - a for a, b in itertools.pairwise([0, *trace]) if b - a >= step_ms]


def test_outages_in_the_outage_model_and_nowhere_else() -> None:
    m = MODELS["lte-outage"]
    for direction in ("down", "up"):
        trace = generate("lte-outage", seed=3, seconds=600, direction=direction)
        gaps = long_gaps(trace, m.step_ms)
        assert len(gaps) >= 10, gaps
        share = sum(gaps) / trace[-1]
        want = stationary(m)["outage"]
        assert 0.5 * want < share < 1.5 * want, (share, want)
    for name in ("lte-markov", "wifi-markov"):
        assert not any(s.down_mbit == 0 for s in MODELS[name].states)
        trace = generate(name, seed=3, seconds=120)
        assert long_gaps(trace, MODELS[name].step_ms) == []


def test_the_carry_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # 12 Mbit/s is one 1500-byte opportunity per ms; 1.5 Mbit/s one per 8 ms
    for name, mbit in (("one-per-ms", 12.0), ("one-per-8ms", 1.5)):
        flat = TraceModel(name, "flat", "a test (2024)", (State("on", mbit, mbit, 0.0, 1, ()),), 7)
        monkeypatch.setitem(MODELS, name, flat)
    assert generate("one-per-ms", seed=0, seconds=2) == list(range(1, 2001))
    assert generate("one-per-8ms", seed=0, seconds=2) == list(range(8, 2001, 8))
    # 3 Mbit/s over 100 s: exactly 25 000 opportunities, one per 4 ms
    flat = TraceModel("q", "flat", "a test (2024)", (State("on", 3.0, 1, 0.0, 1, ()),), 100)
    monkeypatch.setitem(MODELS, "q", flat)
    assert len(generate("q", seed=9, seconds=100)) == 25_000


def test_a_trace_too_slow_for_any_opportunity_still_has_its_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = TraceModel("slow", "slow", "a test (2024)", (State("on", 0.001, 0.001, 0.0, 1, ()),), 10)
    monkeypatch.setitem(MODELS, "slow", slow)
    assert generate("slow", seed=0, seconds=1) == [1000]  # 1 kbit/s: one every ~12 s


BAD = [
    ({"model": "lte"}, "'lte'"),
    ({"model": ""}, "''"),
    ({"seconds": 0.5}, "0.5"),
    ({"seconds": 3600.5}, "3600.5"),
    ({"seconds": -1}, "-1"),
    ({"seconds": float("nan")}, "nan"),
    ({"seconds": float("inf")}, "inf"),
    ({"seconds": "60"}, "'60'"),
    ({"seconds": True}, "True"),
    ({"seed": -1}, "-1"),
    ({"seed": 2**63}, str(2**63)),
    ({"seed": 1.5}, "1.5"),
    ({"seed": "7"}, "'7'"),
    ({"seed": False}, "False"),
    ({"direction": "both"}, "'both'"),
    ({"direction": "DOWN"}, "'DOWN'"),
]


@pytest.mark.parametrize(("change", "shown"), BAD, ids=[repr(c) for c, _ in BAD])
def test_bad_input_is_one_line_naming_the_value(change: dict[str, object], shown: str) -> None:
    args: dict[str, object] = {"model": "lte-markov", "seed": 1, "seconds": 10.0, "direction": "up"}
    args.update(change)
    with pytest.raises(QuicbedError) as e:
        generate(**args)  # type: ignore[arg-type]
    msg = str(e.value)
    assert shown in msg and "\n" not in msg, msg
    assert next(iter(change)) in msg or "model" in msg, msg


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(QuicbedError) as e:
        describe("lte-markovv")
    assert "'lte-markovv'" in str(e.value)
    assert all(name in str(e.value) for name in ALL)


def test_edges_of_the_ranges_are_accepted() -> None:
    assert generate("lte-markov", seed=0, seconds=1)[-1] == 1000
    assert generate("lte-markov", seed=2**63 - 1, seconds=1, direction="up")[-1] == 1000
    assert tracegen.MAX_SECONDS == 3600


@pytest.mark.parametrize("name", ALL)
def test_describe_names_states_means_and_source(name: str) -> None:
    text = describe(name)
    m = MODELS[name]
    assert text.splitlines()[0].startswith(f"{name}: ")
    for s in m.states:
        assert f"  {s.name} " in text and f"{s.down_mbit:g} down" in text
    assert f"{long_run_mbit(m, 'down'):.2f} Mbit/s down" in text
    assert m.source in text
