"""Cell configuration: identity, schedule, validation."""

from __future__ import annotations

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.spec.cellconfig import make_cell

C = make_condition(rate_mbit=10, rtt_ms=36)


def test_identity_is_stable_and_sensitive() -> None:
    a = make_cell(condition=C, page="5kb", runs=20)
    assert (
        a.cell_id()
        == make_cell(
            condition=make_condition(rate_mbit=10, rtt_ms=36), page="5kb", runs=20
        ).cell_id()
    )
    assert len(a.cell_id()) == 12
    assert a.cell_id() != make_cell(condition=C, page="5kb", runs=21).cell_id()
    assert (
        a.cell_id()
        != make_cell(condition=make_condition(rate_mbit=10, rtt_ms=37), page="5kb").cell_id()
    )


def test_alternate_schedule_is_abba_with_warmups_first() -> None:
    s = make_cell(condition=C, page="5kb", runs=3, warmup=1).schedule()
    assert s == [
        ("h2", 0),
        ("h3", 0),
        ("h3", 1),
        ("h2", 1),
        ("h2", 2),
        ("h3", 2),
        ("h3", 3),
        ("h2", 3),
    ]


def test_blocked_and_random_schedules_cover_every_load_once() -> None:
    for order in ("blocked", "random"):
        s = make_cell(condition=C, page="5kb", runs=5, warmup=2, order=order).schedule()
        assert sorted(s) == sorted((a, r) for a in ("h2", "h3") for r in range(7))
        assert all(r < 2 for _, r in s[:4])  # warm-ups of both arms come first
    r1 = make_cell(condition=C, page="5kb", runs=9, order="random", order_seed=3).schedule()
    r2 = make_cell(condition=C, page="5kb", runs=9, order="random", order_seed=3).schedule()
    assert r1 == r2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"runs": 1}, "runs must be >= 2 for a variance (got 1)"),
        ({"warmup": -1}, "warmup must be in [0, 100] (got -1)"),
        ({"mode": "2rtt"}, "'2rtt'"),
        ({"arms": ("h2", "quic")}, "unknown arm 'quic'"),
        ({"arms": ("h3", "h3")}, "arm listed twice"),
        ({"order": "sideways"}, "'sideways'"),
    ],
)
def test_bad_cells(kwargs: dict, needle: str) -> None:
    with pytest.raises(QuicbedError) as exc:
        make_cell(condition=C, page="5kb", **kwargs)
    assert needle in str(exc.value) and "\n" not in str(exc.value)
