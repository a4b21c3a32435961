"""The gQUIC arm reaches the link (issue 31): a 10 MB page at 100 Mbit/s, 36 ms.

Before the fix quic-go v0.10.2 paced itself to about one packet per millisecond (Go's
timers cannot wait its 100 us steps), 12.5 Mbit/s: the page took 6.8 s over gquic and
1.2 s over TCP (docs/gquic-cap.md). Here, for real (quicbed-gquic-server, Apache,
Chromium 72 for both, the shaped link), gquic must take less than twice TCP's time,
and every measured gquic load's server record must show a 0-RTT handshake answered
with the SHLO, Chromium 72's windows, the cwnd cap as the smallest window, and a flight
of at least half the BDP in one round trip (the verdict that would invalidate it).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from conftest import SharedLinks

from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.servers.gquic import flight_per_rtt
from quicbed.spec.cellconfig import make_cell


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_gquic_fills_a_100_mbit_link(shared_links: SharedLinks, tmp_path: Path) -> None:
    cond = make_condition(rate_mbit=100, rtt_ms=36)
    cfg = make_cell(condition=cond, page="10mb", runs=2, warmup=1, arms=("h2", "gquic"))
    r = shared_links.run_cell(cfg, tmp_path, traces="none")
    assert r.status == "done", r.problem
    assert not r.invalid.get("gquic") and r.verified["gquic"]["valid"] == 2, r.invalid
    c = r.comparisons["h2/gquic"]
    h2, gquic = c.reference.mean, c.candidate.mean
    assert h2 is not None and gquic is not None and gquic < 2 * h2, (gquic, h2)
    bdp = cond.bdp_bytes() or 0
    store = Store(tmp_path)
    try:
        runs = [x for x in store.runs(r.cell_id) if x.arm == "gquic" and not x.warmup]
    finally:
        store.close()
    flights = []
    for x in runs:
        srv = x.detail["server"]
        assert srv["handshake_rtts"] and set(srv["handshake_rtts"]) == {0}, srv
        assert srv["client_sfcw"] == [6 << 20] and srv["client_cfcw"] == [15 << 20], srv
        assert srv["window_limit"] == ["max_cwnd"] and srv["window_limit_bytes"] == 1_460_000
        assert srv["flight"]["sent_bytes"] >= 10_000_000, srv["flight"]
        flights.append(flight_per_rtt(srv["flight"], cond.rtt()) or 0)
    assert statistics.median(flights) >= bdp / 2, (flights, bdp)
