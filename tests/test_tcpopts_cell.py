"""TCP options on the real testbed: applied on both ends and restored, every load's SYN
and SYN-ACK captured and checked, and a SYN changed behind a cell caught per load."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SharedLinks

from quicbed.model.link import make_condition
from quicbed.results.store import Store
from quicbed.servers.webserver import WebServer
from quicbed.settings import tcpopts
from quicbed.spec.arms import parse_cli
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed

pytestmark = pytest.mark.root

COND = make_condition(rate_mbit=50, rtt_ms=20)
KEYS = ("net.ipv4.tcp_sack", "net.ipv4.tcp_ecn", "net.ipv4.tcp_rmem")


def test_options_applied_on_both_ends_and_restored(testbed: LocalTestbed) -> None:
    tb = testbed
    before = {r: {k: tb.read_sysctl(r, k) for k in KEYS} for r in tcpopts.ENDS}
    params = {"tcp_sack": False, "tcp_ecn": 1, "initcwnd": 20, "rmem": "ws2"}
    with tcpopts.applied(tb, params):
        for role in tcpopts.ENDS:
            assert tb.read_sysctl(role, "net.ipv4.tcp_sack") == "0"
            assert tb.read_sysctl(role, "net.ipv4.tcp_ecn") == "1"
            assert tb.read_sysctl(role, "net.ipv4.tcp_rmem").split()[2] == "262143"
        assert tcpopts.read_kernel(tb, {"tcp_sack": False}) == {}  # the SYN shows it
        assert tcpopts.read_kernel(tb, {"initcwnd": 20}) == {
            "server": {"initcwnd": 20},
            "client": {"initcwnd": 20},
        }
    assert {r: {k: tb.read_sysctl(r, k) for k in KEYS} for r in tcpopts.ENDS} == before
    assert tcpopts.read_kernel(tb, {"initcwnd": 20})["server"] == {"initcwnd": None}


@pytest.mark.browser
@pytest.mark.slow
def test_tcp_options_verified_per_load_and_a_mismatched_syn_invalid(
    shared_links: SharedLinks, tmp_path: Path
) -> None:
    """h2 with SACK off, ECN on, initcwnd 20 and a window scale of 2: every load's
    handshake shows them (valid) until the client turns SACK back on behind the cell
    before load 3: those loads' SYNs offer SACK and are invalid, naming the option.
    (One cell for both, on the suite's shared link: the arm's options are put back as
    they were when the cell ends, the one the fault set among them.)"""
    names, settings = parse_cli("h2:tcp_sack=false:tcp_ecn=1:initcwnd=20:rmem=ws2,h3")
    cfg = make_cell(condition=COND, page="5kb", runs=4, warmup=1, arms=names, arm_settings=settings)

    def fault(arm: str, rep: int, servers: dict[str, WebServer]) -> None:
        if arm == "h2" and rep == 3:
            tb = LocalTestbed(shared_links.prefix_of(cfg))
            tb.exec("client", ["sysctl", "-q", "-w", "net.ipv4.tcp_sack=1"])

    r = shared_links.run_cell(cfg, tmp_path / "a", traces="none", fault=fault)
    assert r.status == "done", r.problem
    bad = r.invalid.get("h2", [])
    assert [b.split(":")[0] for b in bad] == ["#3", "#4"], bad
    assert all("the SYN offered SACK, but the arm sets tcp_sack: false" in b for b in bad), bad
    assert "h3" not in r.invalid
    store = Store(tmp_path / "a")
    runs = [
        x for x in store.runs(r.cell_id, r.attempt) if x.arm == "h2" and x.valid and not x.warmup
    ]
    store.close()
    assert len(runs) == 2
    for x in runs:
        pkts = x.detail["server"]["tcp_syn"]
        syns = [p for p in pkts if not p["ack"]]
        acks = [p for p in pkts if p["ack"]]
        assert syns and acks, pkts
        assert all(not p["sack"] and p["wscale"] == 2 and p["ece"] for p in pkts), pkts
        assert all(p["cwr"] for p in syns) and not any(p["cwr"] for p in acks), pkts
        assert x.detail["server"]["tcp_kernel"]["server"]["initcwnd"] == 20
