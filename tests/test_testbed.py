"""The local testbed against the real kernel: namespaces, veths, offloads, clean-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.testbed.local import LocalTestbed

QB = [sys.executable, "-m", "quicbed"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QB, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.root
def test_up_is_idempotent_and_offloads_are_off(testbed: LocalTestbed) -> None:
    assert testbed.exists()
    assert testbed.up() is False  # already complete: nothing made
    report = testbed.check_offloads()
    assert set(report) == {"server:eth0", "bridge:srv", "bridge:cli", "client:eth0"}
    for feats in report.values():
        assert set(feats.values()) == {"off"}
    st = testbed.status()
    assert st["complete"]
    assert st["roles"]["server"]["interfaces"]["eth0"]["addresses"] == ["10.10.1.1"]
    assert st["roles"]["client"]["interfaces"]["eth0"]["addresses"] == ["10.10.1.2"]
    assert st["roles"]["bridge"]["interfaces"]["srv"]["addresses"] == []


@pytest.mark.root
def test_bridge_without_shaper_forwards_nothing(testbed: LocalTestbed) -> None:
    """The bridge is only a link when a shaper runs: no accidental unshaped path."""
    cp = testbed.exec("client", ["ping", "-c", "1", "-W", "1", testbed.server_ip], check=False)
    assert cp.returncode != 0


@pytest.mark.root
def test_down_after_a_crash_mid_setup(prefix: str) -> None:
    """A partial leftover (one namespace, a stray process) is cleaned by up and by down."""
    subprocess.run(["ip", "netns", "add", f"{prefix}-bridge"], check=True)
    stray = subprocess.Popen(["ip", "netns", "exec", f"{prefix}-bridge", "sleep", "300"])
    tb = LocalTestbed(prefix)
    assert tb.leftovers() == [f"{prefix}-bridge"]
    assert tb.up() is True  # removes the leftover first, then builds the whole topology
    assert stray.wait(timeout=10) is not None
    assert tb.exists()
    removed = tb.down()
    assert f"{prefix}-server" in removed
    assert tb.leftovers() == []
    assert tb.down() == []  # idempotent


@pytest.mark.root
def test_down_removes_the_trace_instances_a_killed_run_left(prefix: str) -> None:
    """A run killed -9 leaves its tracefs instances (the TCP tracer's, an Envoy arm's
    sender probe) with events on; down removes this prefix's and no other's."""
    from quicbed.traces.tcp import tracefs_problem

    assert tracefs_problem() is None
    root = Path("/sys/kernel/tracing/instances")
    mine = [root / f"quicbed-{prefix}", root / f"quicbed-{prefix}-h3-envoy"]
    other = root / "quicbed-zz9other"
    for d in [*mine, other]:
        d.mkdir()
        (d / "tracing_on").write_text("1")
    try:
        removed = LocalTestbed(prefix).down()
        assert all(str(d) in removed and not d.exists() for d in mine), removed
        assert other.exists()
    finally:
        for d in [*mine, other]:
            if d.exists():
                d.rmdir()


@pytest.mark.root
@pytest.mark.slow
def test_two_prefixes_coexist(prefix: str) -> None:
    a, b = LocalTestbed(prefix), LocalTestbed(prefix[:-1] + "z")
    try:
        a.up()
        b.up()
        assert a.exists() and b.exists()
        a.down()
        assert b.exists() and not a.exists()
    finally:
        a.down()
        b.down()


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.parallel  # namespaces made and removed: times nothing
def test_cli_up_status_down(prefix: str) -> None:
    cp = _cli("testbed", "up", "--prefix", prefix)
    assert cp.returncode == 0, cp.stderr
    assert "created" in cp.stdout
    cp = _cli("testbed", "up", "--prefix", prefix)
    assert "already up" in cp.stdout
    st = json.loads(_cli("testbed", "status", "--prefix", prefix, "--json").stdout)
    assert st["complete"] is True
    cp = _cli("testbed", "down", "--prefix", prefix)
    assert cp.returncode == 0 and "removed" in cp.stdout
    st = json.loads(_cli("testbed", "status", "--prefix", prefix, "--json").stdout)
    assert st["complete"] is False and not any(st["roles"].values())


@pytest.mark.root
@pytest.mark.parallel  # refused before anything is made: times nothing
@pytest.mark.parametrize("bad", ["", "Qb", "1ab", "abcdefghi", "a-b"])
def test_bad_prefix(bad: str) -> None:
    with pytest.raises(QuicbedError, match="prefix"):
        LocalTestbed(bad)
    cp = _cli("testbed", "up", "--prefix", bad)
    assert cp.returncode == 2 and "prefix" in cp.stderr and cp.stderr.count("\n") == 1
