"""A gQUIC cell, for real: quicbed-gquic-server (quic-go v0.10.2) against Apache, both
loaded by Chromium 72 in the client namespace.

Every gQUIC load must show the version it asked for twice, independently: the page's
protocol (``http/2+quic/39``) and the server's own ``conn`` lines; the TCP arm runs
in the same Chromium 72 with TLS 1.2, as Apache's log shows per request. The last
load meets a server restarted to speak Q043 only (a server that is not what the cell
claims, which no real part produces on its own): Chromium 72, forced to Q039, gets no
connection, and the load is invalid with that reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import SharedLinks, scheduled, spoiled

from quicbed.analysis.explain import COMPONENTS, explain
from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.servers.webserver import WebServer
from quicbed.spec.cellconfig import make_cell


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_gquic_cell_is_verified_per_load(shared_links: SharedLinks, tmp_path: Path) -> None:
    cfg = make_cell(
        condition=make_condition(rate_mbit=10, rtt_ms=36),
        page="100kb",
        runs=4,
        warmup=1,
        arms=("h2", "gquic"),
    )

    original: list[Any] = []

    def other_version(arm: str, rep: int, servers: dict[str, WebServer]) -> None:
        """Load #4, the schedule's last, meets a Q043-only server; a load measured at
        the end in place of one the host spoiled meets the right one again."""
        if arm != "gquic" or rep < 4 or (rep > 4 and not original):
            return
        srv = servers["gquic"]
        srv.stop()
        if rep == 4:
            original.append(srv.argv)
            argv = srv.argv()
            srv.argv = lambda: [*argv[:-1], "Q043"]  # type: ignore[method-assign]
        else:
            srv.argv = original.pop()  # type: ignore[method-assign]
        srv.start()

    r = shared_links.run_cell(cfg, tmp_path, fault=other_version, traces="full")
    assert r.status == "done", r.problem
    assert r.verified["gquic"]["protocols"] == ["http/2+quic/39"]
    assert r.verified["gquic"]["valid"] == 3 and r.verified["gquic"]["used_0rtt"] >= 3
    assert (
        r.verified["h2"]["valid"] == 4
        and r.verified["h2"]["tls_resumed"] == r.verified["h2"]["measured"]
    )
    # Chromium 72 forced to Q039 meets a Q043-only server: no connection, no page; a
    # load the host spoiled is in r.spoiled and one measured in its place meets Q039
    why = [w for w in r.invalid["gquic"] if w.startswith("#4:")]
    assert len(why) == 1 and "ERR_QUIC_PROTOCOL_ERROR" in why[0], (r.invalid, r.spoiled)
    store = Store(tmp_path)
    try:
        att = store.attempt(r.cell_id)
        comp: dict[str, Any] = att.provenance["components"]
        assert comp["browser"] == "HeadlessChrome/72.0.3617.0"  # both arms' browser
        assert comp["gquic"]["start"]["quic_go_version"] == "v0.10.2"
        assert comp["gquic"]["start"]["quic_go_patch"].startswith("quic-go-v0.10.2-")
        runs = [x for x in store.runs(r.cell_id) if x.arm == "h2" and not x.warmup]
        assert all(x.protocols == ["h2"] for x in runs)
        failed = [
            x.rep
            for x in scheduled(store.runs(r.cell_id))
            if x.arm == "gquic" and not x.warmup and not x.valid and not spoiled(x)
        ]
        assert failed == [4], (r.invalid, r.spoiled)
    finally:
        store.close()
    assert "h2/gquic" in r.comparisons and r.comparisons["h2/gquic"].candidate.n == 3
    # explain reads gQUIC from the wire as far as its clear header goes (packet numbers
    # and sizes: quicbed.traces.wire), with parts that sum to its PLT
    res = explain(tmp_path, r.cell_id, None, None, tmp_path / "explain")
    g = res.data["arms"]["gquic"]
    assert g["samples_from"] == "wire" and g["delivered_bytes"] > 100_000, g
    assert sum(g[c] for c in COMPONENTS) == pytest.approx(g["plt_ms"], abs=0.01), g


@pytest.mark.parametrize(
    ("arms", "why"),
    [
        ("h2,h3,gquic", "cannot run in chromium72"),
        ("h2,gquic:quic_version=Q037", "'Q037' is not one"),
        ("h2:tls=1.1,gquic", "tls '1.1' is not one of 1.2, 1.3"),
        ("h2,gquic:cc=bbr", "'bbr' is not offered by gquic"),
    ],
)
def test_gquic_arms_refused_by_name(arms: str, why: str) -> None:
    from quicbed.spec.arms import parse_cli

    names, settings = parse_cli(arms)
    with pytest.raises(QuicbedError, match=why):
        make_cell(
            condition=make_condition(rtt_ms=10), page="5kb", arms=names, arm_settings=settings
        ).resolved_arms()
