"""Waiting for a quiet host (quicbed.link.quiet): the probe on this machine, the rules.

The probe runs for real; whether this machine is quiet right now is not known to the
test, so the probe's figures are checked for what they must be either way. The waits
are checked with the probe's answers fixed (a hypervisor's steal cannot be made on
cue): that is the one mock here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.link import quiet
from quicbed.link.cpuprobe import probe as cpu_probe
from quicbed.link.quiet import HostWait, Settled, check_wait_minutes, describe, is_quiet
from quicbed.testbed.local import LocalTestbed


@pytest.mark.slow
def test_the_probe_measures_the_cores_it_was_given() -> None:
    got = cpu_probe(1.0)
    assert got["cpus"] >= 1 and got["wall_s"] >= 1.0
    # every spinner ran for a second of wall time: at most a second of CPU each
    assert 0 < got["cpu_s"] <= got["cpus"] * got["wall_s"] * 1.02
    assert 0 < got["available_pct"] <= 102
    assert got["steal_pct"] is None or 0 <= got["steal_pct"] <= 100


@pytest.mark.slow
def test_the_probe_runs_on_the_bridges_machine(tmp_path: Path) -> None:
    """Through the testbed's way of running a quicbed module (no root needed: the local
    testbed runs host commands in this machine's own namespaces)."""
    got = quiet.probe(LocalTestbed("qz" + tmp_path.name[-4:]))
    assert got is not None and got["cpus"] >= 1 and got["wall_s"] >= quiet.PROBE_S


def test_a_host_that_cannot_be_probed_counts_as_quiet() -> None:
    assert is_quiet(None) and describe(None) == "the host could not be probed"
    assert is_quiet({"available_pct": 95.0}) and not is_quiet({"available_pct": 70.0})
    assert describe({"available_pct": 70.4, "steal_pct": 29.6}) == (
        "70 % of the CPU available, 30 % steal"
    )


def _answers(monkeypatch: pytest.MonkeyPatch, *available: float) -> list[float]:
    """The probe answers ``available`` in turn; sleeping takes no time."""
    left = list(available)
    slept: list[float] = []
    monkeypatch.setattr(quiet, "probe", lambda tb: {"available_pct": left.pop(0), "steal_pct": 0.0})
    monkeypatch.setattr(quiet.time, "sleep", slept.append)
    return slept


def test_a_quiet_host_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _answers(monkeypatch, 99.0)
    w = HostWait(limit_s=600)
    assert w.settle(None, "a load") is Settled.QUIET  # type: ignore[arg-type]
    assert slept == [] and w.waited_s == 0


def test_a_busy_host_is_waited_out_with_growing_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _answers(monkeypatch, 60.0, 70.0, 80.0, 97.0)
    said: list[str] = []
    w = HostWait(limit_s=600, say=said.append)
    assert w.settle(None, "a load") is Settled.AFTER_WAIT  # type: ignore[arg-type]
    assert slept == [10.0, 20.0, 40.0]
    assert w.waited_s == pytest.approx(70 + 3 * quiet.PROBE_S)
    assert said[0] == "waiting for a quiet host: 60 % of the CPU available, 0 % steal, 0 s so far"
    assert len(w.record()["probes"]) == 4


def test_past_its_limit_the_wait_gives_up_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _answers(monkeypatch, *[50.0] * 10)
    w = HostWait(limit_s=45)
    assert w.settle(None, "receipt out of tolerance") is Settled.BUSY  # type: ignore[arg-type]
    assert sum(slept) == pytest.approx(45 - 2 * quiet.PROBE_S, abs=quiet.PROBE_S)
    msg = w.exhausted("receipt out of tolerance")
    assert msg.startswith("receipt out of tolerance; waited ")
    assert "for a quiet host (limit 0.75 min) and it stayed busy: 50 % of the CPU" in msg


def test_a_zero_limit_never_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _answers(monkeypatch, 50.0)
    assert HostWait(limit_s=0).settle(None, "x") is Settled.BUSY  # type: ignore[arg-type]
    assert slept == []


@pytest.mark.parametrize("bad", [-1, float("nan"), "ten", float("inf")])
def test_a_bad_wait_limit_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(QuicbedError, match=rf"--quiet-wait {bad!r}: the longest wait"):
        check_wait_minutes(bad)
    assert check_wait_minutes(0) == 0.0


def test_a_pause_counts_and_stops_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _answers(monkeypatch)
    w = HostWait(limit_s=15)
    assert w.pause("x") and w.pause("x") and not w.pause("x")
    assert slept == [10.0, 5.0] and w.waited_s == 15.0


def test_the_cells_own_background_is_credited_to_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page cell's background flows take part of the cores from the spinners: their CPU
    over the probe (0.6 s of 2 cores x 2 s: 15 %) is given back, so a host busy only
    with the cell is quiet, and one busy with more is still waited for."""
    answers = [
        {"cpus": 2, "wall_s": 2.0, "cpu_s": 3.3, "available_pct": 82.5, "steal_pct": 0.0},
        *[{"cpus": 2, "wall_s": 2.0, "cpu_s": 2.6, "available_pct": 65.0, "steal_pct": 20.0}] * 3,
    ]
    monkeypatch.setattr(quiet, "probe", lambda tb: answers.pop(0))
    used = iter(range(0, 10**11, 600_000_000))  # 0.6 s of CPU between two readings
    w = HostWait(limit_s=600, own_cpu_ns=lambda: next(used))
    assert w.settle(None, "a load") is Settled.QUIET  # type: ignore[arg-type]
    got = w.last
    assert got is not None
    assert (got["spinners_pct"], got["own_pct"], got["available_pct"]) == (82.5, 15.0, 97.5)
    assert describe(got) == (
        "98 % of the CPU available (15 % of it the cell's own background), 0 % steal"
    )
    monkeypatch.setattr(quiet.time, "sleep", lambda s: None)
    w2 = HostWait(limit_s=5, own_cpu_ns=lambda: next(used))
    assert w2.settle(None, "a load") is Settled.BUSY  # type: ignore[arg-type]
    assert w2.last is not None and w2.last["available_pct"] == 80.0  # 65 + 15 < 90
