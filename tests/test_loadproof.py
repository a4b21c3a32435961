"""Each load proven by the emulator's own counters (quicbed.link.loadproof): the rules.

The counters here are in the emulator's statistics format (go/cmd/quicbed-linkem:
cumulative counters and the coarse lateness histogram); a real emulator's are read by
tests/test_link_proof.py, which stops it during chosen loads.
"""

from __future__ import annotations

from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.link.loadproof import (
    check_late_tolerance,
    hist_delta,
    judge,
    late_tolerance_ms,
    percentile_us,
)
from quicbed.model.link import JitterKind, make_condition

COND = make_condition(rate_mbit=10, rtt_ms=36)


def stats(hist: list[list[int]], **counters: int) -> dict[str, Any]:
    """A snapshot of the emulator: both directions alike."""
    d = {
        "tx_packets": 0,
        "loss_drops": 0,
        "queue_drops": 0,
        "reordered": 0,
        "socket_drops": 0,
        "send_errors": 0,
        "late_hist": hist,
        "rx_timestamps": True,
        **counters,
    }
    return {"format": 1, "directions": {"down": dict(d), "up": dict(d)}}


BEFORE = stats([[0, 500], [40, 300], [1000, 2]], tx_packets=802)


def test_a_load_is_judged_by_its_own_frames_only() -> None:
    """The histogram is cumulative: an old late frame (before the load) is not this
    load's; the frames sent between the snapshots are."""
    after = stats([[0, 510], [40, 305], [1000, 2], [200_000, 1]], tx_packets=818)
    assert hist_delta(
        after["directions"]["up"]["late_hist"], BEFORE["directions"]["up"]["late_hist"]
    ) == {0: 10, 40: 5, 200_000: 1}
    v = judge(COND, BEFORE, after, {"steal_pct": 0.0, "busy_pct": 40.0}, 2.0)
    assert v.spoiled and v.host_spoiled
    assert v.reasons[0].startswith("the link was 200.0 ms late during this load (down")
    assert v.facts["directions"]["down"]["tx_packets"] == 16
    assert v.facts["directions"]["down"]["late_max_ms"] == 200.0
    assert v.facts["directions"]["down"]["late_p50_ms"] == 0.0


def test_a_punctual_load_holds() -> None:
    after = stats([[0, 520], [40, 310], [1000, 4]], tx_packets=832)
    v = judge(COND, BEFORE, after, {"steal_pct": 0.0}, 2.0)
    assert not v.spoiled and v.reasons == []
    # two frames 1.0-1.1 ms late: under the tolerance, still stored
    assert v.facts["directions"]["up"]["late_max_ms"] == 1.0
    assert v.facts["spoiled"] is False and v.facts["late_tolerance_ms"] == 2.0


def test_drops_the_model_did_not_ask_for_spoil_a_load_its_own_do_not() -> None:
    after = stats([[0, 520]], tx_packets=820, socket_drops=3, loss_drops=7, queue_drops=2)
    v = judge(COND, BEFORE, after, None, 2.0)
    assert v.host_spoiled
    assert any("lost 3 frame(s) the model did not drop" in r for r in v.reasons), v.reasons
    assert len([r for r in v.reasons if "did not drop" in r]) == 2  # one per direction
    mine = stats([[0, 520]], tx_packets=820, loss_drops=7, queue_drops=2)
    assert not judge(COND, BEFORE, mine, None, 2.0).spoiled


def test_reordering_spoils_a_load_only_where_the_jitter_allows_none() -> None:
    after = stats([[0, 520]], tx_packets=820, reordered=4)
    assert any("reordered 4 frame(s)" in r for r in judge(COND, BEFORE, after, None, 2).reasons)
    jittery = make_condition(rate_mbit=10, rtt_ms=36, jitter_ms=10, jitter_kind=JitterKind.reorder)
    assert not judge(jittery, BEFORE, after, None, 2.0).spoiled


def test_steal_over_a_load_spoils_it() -> None:
    after = stats([[0, 520]], tx_packets=820)
    v = judge(COND, BEFORE, after, {"steal_pct": 31.0, "busy_pct": 50.0}, 2.0)
    assert v.host_spoiled
    assert v.reasons == [
        "the host lost 31 % of its CPU time to steal during this load (tolerance 10 %)"
    ]
    assert not judge(COND, BEFORE, after, {"steal_pct": 9.0}, 2.0).spoiled


def test_a_shaper_without_counters_judges_the_host_only() -> None:
    v = judge(COND, None, None, {"steal_pct": 0.0}, 2.0)
    assert not v.spoiled and v.facts["source"].startswith("none: this shaper keeps no")
    assert judge(COND, None, None, {"steal_pct": 50.0}, 2.0).spoiled


def test_percentiles_are_bucket_lower_edges() -> None:
    h = {0: 98, 1000: 1, 23_000: 1}
    assert percentile_us(h, 0.5) == 0
    assert percentile_us(h, 0.99) == 1000
    assert percentile_us({}, 0.5) is None


def test_the_tolerance_is_a_floor_or_a_tenth_of_the_rtt() -> None:
    assert late_tolerance_ms(COND) == 15.0
    assert late_tolerance_ms(make_condition(rate_mbit=10, rtt_ms=112)) == 15.0
    assert late_tolerance_ms(make_condition(rate_mbit=10, rtt_ms=400)) == pytest.approx(40.0)
    assert late_tolerance_ms(COND, 7.5) == 7.5  # the user's, as given


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "3"])
def test_a_bad_tolerance_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(QuicbedError, match=rf"--late-tolerance {bad!r}: how late"):
        check_late_tolerance(bad)
