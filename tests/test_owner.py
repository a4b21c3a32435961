"""One owner per testbed: a second command is refused naming the owner; a killed owner's
claim is taken over and its leftovers removed; the claim is never inherited."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.proc import pid_alive
from quicbed.testbed import owner
from quicbed.testbed.local import LocalTestbed

QB = [sys.executable, "-m", "quicbed"]
HOLD = """
import sys, time
from pathlib import Path
from quicbed.testbed import owner
owner.acquire(Path(sys.argv[1]), "t", "quicbed holder")
print("held", flush=True)
time.sleep(600)
"""


def _holder_process(path: Path) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_a_second_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "t.lock"
    p = _holder_process(path)
    try:
        with pytest.raises(QuicbedError, match=rf"in use by 'quicbed holder' \(PID {p.pid},"):
            owner.acquire(path, "t", "quicbed second")
        assert owner.holder(path)["pid"] == p.pid
    finally:
        p.terminate()
        p.wait()


def test_a_killed_holder_is_taken_over_and_reported_stale(tmp_path: Path) -> None:
    path = tmp_path / "t.lock"
    p = _holder_process(path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert owner.holder(path) is None  # the kernel dropped the lock with the process
    c = owner.acquire(path, "t", "quicbed next")
    try:
        assert c.stale is not None and c.stale["pid"] == p.pid
        assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        owner.release(path)
    assert not path.exists()  # a clean release leaves no record: nothing stale next time
    c = owner.acquire(path, "t", "quicbed again")
    owner.release(path)
    assert c.stale is None


CONTEND = r"""
import os, sys, time
from pathlib import Path
from quicbed.errors import QuicbedError
from quicbed.testbed import owner
path, log = Path(sys.argv[1]), sys.argv[2]
held = 0
while held < 400:
    try:
        owner.acquire(path, "t", "contender")
    except QuicbedError:
        continue
    with open(log, "a") as f:
        f.write(f"in {os.getpid()}\n")
        f.flush()
        time.sleep(0.001)
        f.write(f"out {os.getpid()}\n")
    owner.release(path)
    held += 1
"""


def test_removing_the_file_on_release_keeps_the_claim_exclusive(tmp_path: Path) -> None:
    """Three processes claim and release one testbed 400 times each as fast as they can:
    a claimer that opened the file just before its holder removed it must not hold a
    lock on the removed file beside the next holder (every "in" is followed by its own
    "out"), and nothing is left behind."""
    path, log = tmp_path / "t.lock", tmp_path / "log"
    procs = [
        subprocess.Popen([sys.executable, "-c", CONTEND, str(path), str(log)]) for _ in range(3)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    lines = log.read_text().split("\n")[:-1]
    assert len(lines) == 2400
    for i in range(0, len(lines), 2):
        pair = lines[i : i + 2]
        assert pair[0].startswith("in ") and pair[1] == "out " + pair[0][3:], pair
    assert not path.exists()


def test_reentrant_within_a_process_and_not_inherited(tmp_path: Path) -> None:
    path = tmp_path / "t.lock"
    owner.acquire(path, "t", "outer")
    owner.acquire(path, "t", "inner")
    owner.release(path)
    assert owner.holder(path) is not None  # the outer claim still holds
    # a child process (a daemon we start) does not inherit the claim's fd
    child = subprocess.Popen(["sleep", "30"])
    try:
        owner.release(path)
        assert owner.holder(path) is None
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parallel  # refuses bad input: times nothing
def test_commands_on_a_busy_testbed_are_refused(prefix: str, tmp_path: Path) -> None:
    """While this test owns the testbed, every command that would change or measure it
    exits 2 naming the owner, and touches nothing; status shows the owner."""
    tb = LocalTestbed(prefix)
    with tb.claim("quicbed test-owner"):
        tb.up()
        before = _state(tb)
        commands = [
            ["link", "check", "--rate", "10", "--rtt", "100"],
            ["cell", "--rate", "10", "--rtt", "36", "--page", "5kb", "--out", str(tmp_path / "c")],
            ["run", "sweeps/demo.yaml", "--out", str(tmp_path / "r")],
            ["testbed", "down"],
            ["testbed", "up"],
        ]
        for argv in commands:
            cp = subprocess.run(
                [*QB, *argv, "--prefix", prefix],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=Path(__file__).parent.parent,
            )
            assert cp.returncode == 2, (argv, cp.stdout, cp.stderr)
            assert f"testbed {prefix} is in use by 'quicbed test-owner' (PID {os.getpid()}" in (
                cp.stderr
            ), (argv, cp.stderr)
            assert "Traceback" not in cp.stderr
        assert not (tmp_path / "c").exists() and not (tmp_path / "r").exists()
        assert _state(tb) == before
        st = subprocess.run(
            [*QB, "testbed", "status", "--prefix", prefix, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert json.loads(st.stdout)["owner"]["command"] == "quicbed test-owner"
    tb.down()


@pytest.mark.slow
@pytest.mark.root
def test_the_next_command_removes_what_a_killed_one_left(prefix: str) -> None:
    """kill -9 of an owner leaves namespaces and an emulator; the next claim removes them."""
    script = f"""
import sys, time
from quicbed.testbed.local import LocalTestbed
from quicbed.model.link import make_condition
from quicbed.shapers.userspace import UserspaceShaper
tb = LocalTestbed({prefix!r})
with tb.claim("quicbed doomed"):
    tb.up()
    UserspaceShaper().apply(tb, make_condition(rate_mbit=10, rtt_ms=20), persistent=True)
    print("up", flush=True)
    time.sleep(600)
"""
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "up"
    tb = LocalTestbed(prefix)
    emulator = _emulator_pid(tb)
    assert emulator is not None
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert tb.exists()  # kill -9 leaves the namespaces ...
    time.sleep(0.2)
    cp = subprocess.run(
        [*QB, "testbed", "status", "--prefix", prefix], capture_output=True, text=True, timeout=60
    )
    assert "in use" not in cp.stdout  # ... but no claim: the kernel dropped the lock
    up = subprocess.run(
        [*QB, "testbed", "up", "--prefix", prefix], capture_output=True, text=True, timeout=60
    )
    assert up.returncode == 0, up.stderr
    assert f"the previous owner 'quicbed doomed' (PID {p.pid}" in up.stderr
    assert f"{prefix}-bridge" in up.stderr
    assert not pid_alive(emulator)  # the persistent emulator is gone too (or a zombie of init)
    assert tb.exists()  # and a fresh testbed stands
    tb.down()


def _emulator_pid(tb: LocalTestbed) -> int | None:
    from quicbed.shapers.userspace import UserspaceShaper

    return UserspaceShaper().pid(tb)


def _state(tb: LocalTestbed) -> dict[str, object]:
    """What a command could have changed: namespaces, addresses, qdiscs, processes
    (not the veths' operstate, which settles by itself after ``up``)."""
    out: dict[str, object] = {}
    for role, r in tb.status()["roles"].items():
        out[role] = r and {
            "ifs": {k: v["addresses"] for k, v in r["interfaces"].items()},
            "qdiscs": r["qdiscs"],
            "pids": r["pids"],
        }
    return out


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("gap", [0.05, 0.15, 0.3])
def test_a_second_ctrl_c_cannot_leave_the_testbed_behind(
    prefix: str, tmp_path: Path, gap: float
) -> None:
    """Ctrl-C during the receipt, and again ``gap`` s later: the command still removes
    everything, says so, and exits 130."""
    p = subprocess.Popen(
        [
            *QB,
            "cell",
            "--prefix",
            prefix,
            "--rate",
            "10",
            "--rtt",
            "36",
            "--page",
            "5kb",
            "--runs",
            "3",
            "--out",
            str(tmp_path / "r"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tb = LocalTestbed(prefix)
    deadline = time.monotonic() + 60
    while not (tb.exists() and _emulator_pid(tb)):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # into the receipt
    p.send_signal(signal.SIGINT)
    time.sleep(gap)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted; what this command set up was removed" in err
    assert f"testbed {prefix} torn down" in err
    assert "Traceback" not in err
    assert not tb.leftovers() and not os.path.exists(f"/run/quicbed/{prefix}")
    assert owner.holder(tb.lock_path()) is None
