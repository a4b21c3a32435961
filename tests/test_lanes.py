"""make test's lanes (tests/lanes.py): a block that runs alone, and what a test timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lanes
import pytest

from quicbed import timelog

TESTS = Path(__file__).resolve().parent

#: one process of a worker: runs ``body`` (with lanes imported), stamping when it starts
#: waiting, when it holds the lane and when it lets go, into its own file
WORKER = """
import sys, time, json, lanes
from pathlib import Path
stamps, name = Path(sys.argv[1]), sys.argv[2]
def stamp(what):
    with open(stamps / f"{name}.{what}", "w") as f:
        f.write(repr(time.monotonic()))
"""


def _start(tmp_path: Path, name: str, body: str) -> subprocess.Popen[bytes]:
    code = WORKER + textwrap.dedent(body)
    env = {**os.environ, "QUICBED_TEST_LANE_LOCKS": str(tmp_path), "PYTHONPATH": str(TESTS)}
    return subprocess.Popen([sys.executable, "-c", code, str(tmp_path), name], env=env)


def _stamp(tmp_path: Path, name: str, what: str, timeout_s: float = 20) -> float:
    path = tmp_path / f"{name}.{what}"
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, f"{name} never stamped {what}"
        time.sleep(0.02)
    return float(path.read_text())


def test_alone_waits_for_the_test_running_and_goes_before_the_next(tmp_path: Path) -> None:
    """A test (a) runs; another's block (b) asks to run alone; a third test (c) starts
    while b waits. b holds the lane only once a has let go, and c only once b has: the
    waiting block is not kept out by tests that keep starting."""
    a = _start(
        tmp_path, "a", "with lanes.share('a'):\n    stamp('held'); time.sleep(1.0); stamp('done')\n"
    )
    _stamp(tmp_path, "a", "held")
    b = _start(
        tmp_path,
        "b",
        "with lanes.share('b'):\n"
        "    stamp('waits')\n"
        "    with lanes.alone():\n"
        "        stamp('held'); time.sleep(0.5); stamp('done')\n",
    )
    _stamp(tmp_path, "b", "waits")
    time.sleep(0.1)  # b is in its flock by now: stamping was its last step before it
    c = _start(tmp_path, "c", "stamp('waits')\nwith lanes.share('c'):\n    stamp('held')\n")
    for p in (a, b, c):
        assert p.wait(timeout=30) == 0
    assert _stamp(tmp_path, "c", "waits") < _stamp(tmp_path, "a", "done")  # c came in time
    assert _stamp(tmp_path, "b", "held") >= _stamp(tmp_path, "a", "done")
    assert _stamp(tmp_path, "c", "held") >= _stamp(tmp_path, "b", "done")


def test_two_tests_share_the_lane(tmp_path: Path) -> None:
    """Tests that time nothing hold the lane at once: neither waits for the other."""
    a = _start(
        tmp_path, "a", "with lanes.share('a'):\n    stamp('held'); time.sleep(1.0); stamp('done')\n"
    )
    _stamp(tmp_path, "a", "held")
    b = _start(tmp_path, "b", "with lanes.share('b'):\n    stamp('held')\n")
    for p in (a, b):
        assert p.wait(timeout=30) == 0
    assert _stamp(tmp_path, "b", "held") < _stamp(tmp_path, "a", "done")


def test_what_a_test_timed_outside_alone_is_counted_by_its_tag(tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    lines = [
        {"phase": timelog.RECEIPT, "start": 1, "seconds": 9, "pid": 1, "tag": "t::old"},
        "offset",
        {"phase": timelog.RECEIPT, "start": 2, "seconds": 9, "pid": 1, "tag": "t::a"},
        {"phase": timelog.LOAD, "start": 3, "seconds": 1, "pid": 2, "tag": "t::a"},
        {"phase": timelog.LOAD, "start": 4, "seconds": 1, "pid": 2, "tag": "t::a"},
        {"phase": timelog.LOAD, "start": 5, "seconds": 1, "pid": 2, "tag": "t::a" + lanes.ALONE},
        {"phase": timelog.SERVERS, "start": 6, "seconds": 1, "pid": 2, "tag": "t::a"},
        {"phase": timelog.FLOW, "start": 7, "seconds": 1, "pid": 3, "tag": "t::b"},
        {"phase": timelog.FLOW, "start": 8, "seconds": 1, "pid": 3},
    ]
    text, offset = "", 0
    for e in lines:
        if e == "offset":
            offset = len(text)
        else:
            text += json.dumps(e) + "\n"
    log.write_text(text)
    assert lanes.measured_outside_alone(log, offset, "t::a") == {
        timelog.RECEIPT: 1,
        timelog.LOAD: 2,
    }
    assert lanes.measured_outside_alone(log, offset, "t::c") == {}
    assert lanes.measured_outside_alone(tmp_path / "none.jsonl", 0, "t::a") == {}


def test_each_test_names_itself_on_the_time_log(request: pytest.FixtureRequest) -> None:
    assert os.environ[timelog.TAG_ENV] == request.node.nodeid


def test_the_suite_fails_a_test_of_the_parallel_lane_that_measures(tmp_path: Path) -> None:
    """A root test marked parallel that asks for a proven link fails before it runs; a
    test of the parallel lane that times a receipt fails after it, naming it; one that
    times it inside alone() passes (tests/conftest.py, run on a file of such tests)."""
    (tmp_path / "test_x.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from lanes import alone
            from quicbed import timelog

            @pytest.mark.root
            @pytest.mark.parallel
            def test_proven(shared_links):
                pass

            def test_times():
                with timelog.phase(timelog.RECEIPT):
                    pass

            def test_times_alone():
                with alone(), timelog.phase(timelog.RECEIPT):
                    pass
            """
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        timelog.ENV: str(tmp_path / "time.jsonl"),
        "QUICBED_TEST_ARTIFACTS": str(tmp_path / "artifacts"),
        "QUICBED_TEST_LANE_LOCKS": str(tmp_path),
    }
    env.pop(timelog.TAG_ENV, None)
    cp = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-rA", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = cp.stdout
    assert cp.returncode == 1, out
    assert "uses shared_links, which measures, so it must not be marked" in out, out
    assert "test_x.py::test_times timed receipt x1 in make test's parallel lane" in out, out
    assert "PASSED test_x.py::test_times_alone" in out, out


@pytest.mark.root
@pytest.mark.parallel
def test_lock_files_root_made_serve_another_user(root: None) -> None:
    """root's make test leaves the lock files behind in the temporary directory; a user's
    make check after it takes the same locks (read-only: no write access needed)."""
    import shutil
    import tempfile

    locks = Path(tempfile.mkdtemp())
    try:
        locks.chmod(0o1777)  # as the temporary directory is
        body = "with lanes.share('x'):\n    with lanes.alone():\n        pass\n"
        code = WORKER + body  # stamps nothing: its arguments only name the directory
        env = {"QUICBED_TEST_LANE_LOCKS": str(locks), "PYTHONPATH": f"{TESTS}:{TESTS.parent}"}
        made = subprocess.run([sys.executable, "-c", code, str(locks), "x"], env=env, timeout=60)
        assert made.returncode == 0
        assert {p.name for p in locks.iterdir()} == {
            "quicbed-test-lane.gate",
            "quicbed-test-lane.lane",
        }
        other = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                str(locks),
                "x",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode == 0, other.stderr
    finally:
        shutil.rmtree(locks)
