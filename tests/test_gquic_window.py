"""A gQUIC load's window and flight record, and the verdict on a sender held below the BDP.

The log lines are the server's own schema (go/gquic/internal/gquicserver, whose Go
tests check that a real server writes them); the capped flight is the one measured
before issue 31's fix: about 56 kB per 36 ms round trip while the link's BDP was 450 kB
(docs/gquic-cap.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from quicbed.model.link import make_condition
from quicbed.servers.gquic import flight_per_rtt, window_facts, window_reasons, window_summary


def conn(cid: int, rejects: int, sfcw: int = 6 << 20, cfcw: int = 15 << 20) -> dict[str, Any]:
    limit, by = min((sfcw, "stream_flow_control"), (cfcw, "connection_flow_control"))
    if limit >= 1_460_000:
        limit, by = 1_460_000, "max_cwnd"
    return {
        "event": "conn",
        "conn_id": cid,
        "rejects": rejects,
        "used_0rtt": rejects == 0,
        "handshake_rtts": rejects,
        "client_sfcw": sfcw,
        "client_cfcw": cfcw,
        "max_cwnd_bytes": 1_460_000,
        "window_limit": by,
        "window_limit_bytes": limit,
    }


def request(cid: int, sent: int, per_window: dict[str, int]) -> dict[str, Any]:
    return {
        "event": "request",
        "conn_id": cid,
        "path": "/10mb/img.jpg",
        "flight": {"bin_ms": 2, "sent_bytes": sent, "peak_bytes": per_window},
    }


#: the flight of a 10 MB load at 100 Mbit/s, 36 ms: healthy (after the fix) and capped
HEALTHY = {"10": 125_000, "20": 250_000, "40": 500_000, "80": 980_000, "160": 1_960_000}
CAPPED = {"10": 15_500, "20": 31_000, "40": 62_000, "80": 124_000, "160": 248_000}


def lines(*events: dict[str, Any]) -> list[str]:
    return [json.dumps(e) for e in events]


def test_facts_take_each_connection_and_the_busiest_flight() -> None:
    f = window_facts(
        lines(
            conn(1, 2),
            request(1, 6_000, {"10": 5_000}),
            conn(2, 0),
            request(2, 5_000, {"10": 1_000}),
            request(2, 10_700_000, HEALTHY),  # the page's last object: all of it
        )
    )
    assert f["handshake_rtts"] == [2, 0]
    assert f["window_limit"] == ["max_cwnd"] and f["window_limit_bytes"] == 1_460_000
    assert f["client_sfcw"] == [6 << 20] and f["client_cfcw"] == [15 << 20]
    assert f["flight"]["sent_bytes"] == 10_700_000


def test_a_log_without_the_record_says_so() -> None:
    """A server built before issue 31 logs no windows or flight: nothing is judged."""
    f = window_facts(lines({"event": "conn", "conn_id": 1, "rejects": 0}))
    assert f["handshake_rtts"] == [None] and f["window_limit_bytes"] is None
    assert f["flight"] is None
    assert window_reasons(f, make_condition(rate_mbit=100, rtt_ms=36)) == []


def test_flight_per_rtt_scales_the_nearest_longer_window() -> None:
    fl = {"peak_bytes": CAPPED}
    assert flight_per_rtt(fl, 36) == pytest.approx(62_000 * 36 / 40)
    assert flight_per_rtt(fl, 112) == pytest.approx(248_000 * 112 / 160)
    assert flight_per_rtt(fl, 200) is None  # no window that long
    assert flight_per_rtt(None, 36) is None


def test_the_capped_sender_is_named_and_the_healthy_one_passes() -> None:
    cond = make_condition(rate_mbit=100, rtt_ms=36)  # BDP 450 kB
    capped = window_facts(lines(conn(1, 0), request(1, 10_700_000, CAPPED)))
    (why,) = window_reasons(capped, cond)
    assert "at most 56 kB in one RTT" in why and "450 kB" in why and "12.4 Mbit/s" in why
    healthy = window_facts(lines(conn(1, 0), request(1, 10_700_000, HEALTHY)))
    assert window_reasons(healthy, cond) == []


def test_the_flight_is_not_judged_with_loss_or_on_a_short_transfer() -> None:
    capped = window_facts(lines(conn(1, 0), request(1, 10_700_000, CAPPED)))
    lossy = make_condition(rate_mbit=100, rtt_ms=36, loss_pct=1)
    assert window_reasons(capped, lossy) == []  # CUBIC's backoff may keep it there
    short = window_facts(lines(conn(1, 0), request(1, 1_000_000, CAPPED)))  # 2.2 BDPs
    assert window_reasons(short, make_condition(rate_mbit=100, rtt_ms=36)) == []
    assert window_reasons(capped, make_condition(rtt_ms=36)) == []  # no rate: no BDP


def test_a_window_below_the_bdp_is_named_once_it_was_filled() -> None:
    cond = make_condition(rate_mbit=100, rtt_ms=36)
    small = conn(1, 0, sfcw=64 << 10)
    filled = window_facts(lines(small, request(1, 1_000_000, HEALTHY)))
    (why,) = window_reasons(filled, cond)
    assert "window of 66 kB (stream_flow_control)" in why and "BDP of 450 kB" in why
    # a page smaller than the window never met it
    unfilled = window_facts(lines(small, request(1, 5_000, {"10": 5_000, "40": 5_000})))
    assert window_reasons(unfilled, cond) == []


def test_the_summary_line_names_round_trips_limit_and_flight() -> None:
    cond = make_condition(rate_mbit=100, rtt_ms=36)
    cold = window_facts(lines(conn(1, 2), request(1, 10_700_000, HEALTHY)))
    warm = window_facts(lines(conn(2, 0), request(2, 10_700_000, CAPPED)))
    assert window_summary([cold, warm, warm], cond) == (
        "handshake round trips 0, 2; window limit 1460 kB (max_cwnd), BDP 450 kB; "
        "flight per RTT 56 kB (median of 3)"
    )
    old = window_facts(lines({"event": "conn", "conn_id": 1, "rejects": 0}))
    assert window_summary([old], cond) is None


def test_the_report_shows_each_arm_s_record() -> None:
    """The report's cell section lists, per arm whose stack keeps one, what its measured
    loads ran under (warm-ups left out); the TCP arm's stack keeps none."""
    from made_rows import cell_row

    from quicbed.report.build import _records
    from quicbed.results.rows import RunRow
    from quicbed.spec.cellconfig import make_cell

    cond = make_condition(rate_mbit=100, rtt_ms=36)
    cell = make_cell(condition=cond, page="10mb", runs=2, arms=("h2", "gquic"))

    def run(arm: str, rep: int, server: dict[str, Any]) -> RunRow:
        return RunRow(
            cell_id="c",
            attempt=1,
            arm=arm,
            rep=rep,
            seq=rep,
            warmup=rep < 0,
            valid=True,
            detail={"server": server},
        )

    warm = window_facts(lines(conn(1, 0), request(1, 10_700_000, HEALTHY)))
    cold = window_facts(lines(conn(2, 2), request(2, 10_700_000, CAPPED)))
    row = cell_row(
        page="10mb",
        rate_mbit=100,
        runs=2,
        condition=cond.model_dump_json(),
        arms={a.name: a for a in cell.resolved_arms()},
        loads=[
            run("gquic", -1, cold),
            run("gquic", 0, warm),
            run("gquic", 1, warm),
            run("h2", 0, {"tls_resumed": True}),
        ],
    )
    assert _records(row) == [
        "gquic: handshake round trips 0; window limit 1460 kB (max_cwnd), BDP 450 kB; "
        "flight per RTT 450 kB (median of 2)"
    ]
