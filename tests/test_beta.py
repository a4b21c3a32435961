"""The beta study (issue 14, seed 002): sweeps/beta.yaml, downlink-only loss, small
queues flagged in the plan. Pure: nothing here touches the testbed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.spec.sweepspec import SweepSpec, load_spec, plan, plan_warnings, queue_warning

ROOT = Path(__file__).resolve().parent.parent
QB = [sys.executable, "-m", "quicbed"]


def test_beta_preset_plans_the_three_groups() -> None:
    cells = plan(load_spec(ROOT / "sweeps" / "beta.yaml"))
    by = {
        s: [pc.config for pc in cells if pc.scenario == s] for s in ("delay", "page-size", "buffer")
    }
    assert [len(v) for v in by.values()] == [20, 10, 15] and len(cells) == 45
    losses = [0.2, 0.5, 1, 2, 5]
    assert sorted({(c.condition.rtt_ms, c.condition.loss_down_pct) for c in by["delay"]}) == [
        (r, x) for r in (5, 10, 200, 400) for x in losses
    ]
    assert {(c.condition.rate_mbit, c.page) for c in by["delay"]} == {(100, "bme-3.3mb")}
    assert {(c.condition.rate_mbit, c.condition.rtt_ms) for c in by["page-size"]} == {(10, 10)}
    assert {c.page for c in by["page-size"]} == {"bme-1mb", "bme-300kb"}
    assert {c.condition.queue for c in by["buffer"]} == {"32KiB", "64KiB", "128KiB"}
    for c in (c for v in by.values() for c in v):
        # the loss is on the downlink only
        pipes = c.condition.pipes()
        assert pipes["up"].loss == 0 and pipes["down"].loss == c.condition.loss_down_pct / 100
        arms = c.resolved_arms()
        assert [(a.name, a.stack, a.params) for a in arms] == [
            ("h3-b07", "quic-go", {"cubic_n": 2, "cubic_beta": 0.7}),
            ("h3-b06", "quic-go", {"cubic_n": 2, "cubic_beta": 0.6}),
        ]
    # the buffer group's queues are about 0.5, 1 and 2 x its BDP (62.5 kB)
    bdp = by["buffer"][0].condition.bdp_bytes()
    assert bdp == 62500
    held = [
        c.condition.queue_limit()[0] or 0 for c in by["buffer"] if c.condition.loss_down_pct == 1
    ]
    assert sorted(round(q / bdp, 2) for q in held) == [0.52, 1.05, 2.1]


def test_beta_preset_validates_and_flags_its_small_queue(tmp_path: Path) -> None:
    """`quicbed run sweeps/beta.yaml --out X` plans it, prints the small-queue warning
    of the page-size group (10 Mbit/s x 10 ms) and stops at the budget, before any
    testbed is touched."""
    cp = subprocess.run(
        [*QB, "run", "sweeps/beta.yaml", "--out", str(tmp_path / "r"), "--max-hours", "0.01"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert cp.returncode == 2, cp.stderr
    assert "(45 cells), more than --max-hours 0.01" in cp.stderr
    text = " ".join(cp.stdout.split())
    assert "small queue (page-size; 5 link conditions): 10 Mbit/s x 10 ms" in text
    assert text.count("small queue") == 1
    assert not (tmp_path / "r").exists()


def test_queue_warning() -> None:
    ok = make_condition(rate_mbit=100, rtt_ms=5)  # 2 x 62.5 kB
    assert queue_warning(ok) is None
    assert queue_warning(make_condition(rtt_ms=5)) is None  # unlimited: no queue
    w = queue_warning(make_condition(rate_mbit=1, rtt_ms=36))  # 2 x 4.5 kB = 6 packets
    assert w is not None and "queue 2bdp is 6.0 packets of 1500 B" in w
    assert "the link holds 15140 B" in w  # the floor of 10 full frames
    w = queue_warning(make_condition(rate_mbit=100, rtt_ms=36, queue="5pkts"))
    assert w is not None and "queue 5pkts is 5.0 packets" in w and "holds 5 packets" in w
    w = queue_warning(make_condition(rate_mbit=10, rtt_ms=10))
    assert w is not None and "the BDP is 8.3 packets" in w
    assert queue_warning(make_condition(rate_mbit=10, rtt_ms=36, queue="16kB")) is None


def test_plan_warnings_one_line_per_small_queue() -> None:
    spec = SweepSpec(
        name="s",
        scenarios={
            "a": {"rate": [1, 100], "rtt": [36], "loss": [0, 1], "pages": ["5kb", "10kb"]},
            "b": {"rate": [1], "rtt": [36], "pages": ["100kb"]},
        },
    )
    ws = plan_warnings(plan(spec))
    assert len(ws) == 1 and ws[0].startswith("small queue (a, b; 2 link conditions): 1 Mbit/s")


def test_loss_down_is_instead_of_loss() -> None:
    sc = {"rate": [10], "rtt": [36], "pages": ["5kb"]}
    with pytest.raises(Exception, match=r"loss .* or loss_down/loss_up .*not both"):
        SweepSpec(name="s", scenarios={"x": {**sc, "loss": [1], "loss_down": [1]}})
    with pytest.raises(Exception, match=r"loss .* or loss_down/loss_up .*not both"):
        SweepSpec(name="s", scenarios={"x": {**sc, "loss": [1], "loss_up": [1]}})
    with pytest.raises(Exception, match="is empty"):
        SweepSpec(name="s", scenarios={"x": {**sc, "loss_down": []}})
    spec = SweepSpec(name="s", scenarios={"x": {**sc, "loss_down": [1]}})
    (cell,) = plan(spec)
    cond = cell.config.condition
    assert (cond.loss_pct, cond.loss_down_pct, cond.loss_up_pct) == (0, 1, 0)
    # the stored spec (as sweep.json keeps it) reads back to the same digest
    again = SweepSpec(**spec.model_dump(mode="json"))
    assert again.digest() == spec.digest()
    assert SweepSpec(name="s", scenarios={"x": sc}).digest() != spec.digest()


def test_unknown_page_in_beta_like_spec_is_named() -> None:
    spec = SweepSpec(name="s", scenarios={"x": {"rate": [10], "rtt": [10], "pages": ["bme-2mb"]}})
    with pytest.raises(QuicbedError, match="unknown page 'bme-2mb'"):
        plan(spec)
