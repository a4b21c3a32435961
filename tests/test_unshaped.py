"""``--shaper none``: server and client through the kernel bridge alone.

Its receipt reports what the path carried (RTT, the most TCP and UDP it moved) and
judges one thing: that nothing shapes it. A qdisc put on the path afterwards is
found by name. Conditions that would shape are refused before anything starts
(tests/test_badinput.py has the command-line cases).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SharedLinks, reads_well

from quicbed.errors import QuicbedError
from quicbed.link.proof import prove, spot_check
from quicbed.link.receipt import unshaped_check
from quicbed.link.session import shaped_link
from quicbed.model.link import make_condition
from quicbed.shapers import check_condition
from quicbed.shapers.none import NoShaper
from quicbed.spec.cellconfig import make_cell
from quicbed.testbed.local import LocalTestbed


@pytest.mark.parametrize(
    ("cond", "named"),
    [
        ({"rate_mbit": 50, "rtt_ms": 10}, "rate 50 Mbit/s, rtt 10 ms"),
        ({"delay_down_ms": 3}, "delay down 3 ms"),
        ({"loss_up_pct": 0.5}, "loss up 0.5 %"),
        ({"jitter_ms": 2, "jitter_kind": "reorder", "rtt_ms": 10}, "rtt 10 ms, jitter 2 ms"),
    ],
)
def test_a_condition_that_shapes_is_refused_by_name(cond: dict[str, object], named: str) -> None:
    with pytest.raises(QuicbedError, match=f"shaper none shapes nothing.*got {named}"):
        check_condition("none", make_condition(**cond))  # type: ignore[arg-type]
    with pytest.raises(QuicbedError, match=named):
        make_cell(condition=make_condition(**cond), page="5kb", shaper="none")  # type: ignore[arg-type]
    check_condition("none", make_condition())  # unlimited, no delay: what it is for
    check_condition("auto", make_condition(**cond))  # type: ignore[arg-type]  # auto finds one


@pytest.mark.root
def test_the_receipt_judges_only_that_nothing_shapes(testbed: LocalTestbed) -> None:
    tb = testbed
    with shaped_link(tb, make_condition(), "none") as shaped:
        proven = prove(shaped, tcp_seconds=2, cc="cubic")
        r = proven.receipt
        checks = {c.name: c for c in r.checks}
        assert r.passed, [(c.name, c.note) for c in r.checks if c.passed is False]
        assert checks["unshaped"].passed is True
        assert [n for n, c in checks.items() if c.passed is not None] == ["unshaped"]
        assert r.shaper["shaper"] == "none" and r.emulator is None
        assert checks["rtt"].measured is not None and checks["rtt"].measured < 1.0
        for d in ("down", "up"):
            # the emulator tops out near 1 Gbit/s here; the kernel bridge is well above
            # that for TCP, and carries UDP at whatever iperf3 can send
            assert checks[f"tcp_{d}"].measured > 1000, checks[f"tcp_{d}"]
            assert checks[f"udp_max_{d}"].measured > 100, checks[f"udp_max_{d}"]
        assert spot_check(proven, "closing").passed
        # something that shapes, put on the path behind quicbed's back, is found by name
        tb.exec("bridge", ["tc", "qdisc", "replace", "dev", "cli", "root", "pfifo", "limit", "10"])
        found = unshaped_check(NoShaper(), tb)
        assert found.passed is False and "cli has qdisc 'qdisc pfifo" in found.note
        late = spot_check(proven, "closing")
        assert not late.passed
        assert any("cli has qdisc" in p for p in late.problems), late.problems
        assert any("the link changed since its receipt" in p for p in late.problems)


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.browser  # the report check renders its report
def test_a_bulk_cell_without_the_emulator(shared_links: SharedLinks, tmp_path: Path) -> None:
    """Goodput above what the emulator forwards; CPU of server and client, none of the
    bridge (nothing of quicbed's runs there), with the reason. (On the suite's shared
    unshaped link: the receipt's own test is the one above.)"""
    from made_rows import bulk_config, measured_transfer

    cfg = bulk_config(make_condition(), size="50MB", shaper="none")
    r = measured_transfer(cfg, tmp_path / "r", shared_links)
    assert r.receipt is not None and r.receipt["shaper"]["shaper"] == "none"
    assert r.ideal_goodput_bps is None
    for run in r.runs:
        f = run.flow
        assert f.ok, f.error
        assert f.goodput_bps and f.goodput_bps > 100e6, (run.arm, f.goodput_bps)
        assert f.cpu is not None and set(f.cpu.roles) == {"server", "client"}
        assert "no process of quicbed's ran in group emulator" in f.cpu.missing["bridge"]
        assert run.bottleneck is None  # no emulator: no queue, no drops to count
    # the report names the link unshaped, in its figure's title too (issue 47)
    from quicbed.report.build import build

    build(tmp_path / "r")
    reads_well(tmp_path / "r" / "report", "unshaped-bulk")
    shown = json.loads((tmp_path / "r" / "report" / "figures.json").read_text())
    bulk_svg = next(f["svg"] for f in shown if f["shows"].get("transfer") == "bulk")
    svg = (tmp_path / "r" / "report" / "figures" / bulk_svg).read_text()
    assert "unshaped" in svg and "None" not in svg
