"""The phase log and the suite's time report built on it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import testtime
from lanes import ALONE

from quicbed import timelog


def test_a_phase_is_logged_only_where_asked_and_however_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "t.jsonl"
    monkeypatch.delenv(timelog.ENV, raising=False)
    with timelog.phase(timelog.RECEIPT):
        pass
    assert not log.exists()
    monkeypatch.setenv(timelog.ENV, str(log))
    with timelog.phase(timelog.RECEIPT):
        time.sleep(0.05)

    @timelog.phase(timelog.LOAD)
    def fails() -> None:
        raise ValueError("spoiled")

    with pytest.raises(ValueError):
        fails()
    got = timelog.read(log)
    assert [e["phase"] for e in got] == [timelog.RECEIPT, timelog.LOAD]
    assert got[0]["seconds"] >= 0.05 and got[1]["seconds"] < got[0]["seconds"]


def test_a_phase_inside_another_counts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait for a quiet host inside a load: the load logs its seconds without the wait."""
    log = tmp_path / "t.jsonl"
    monkeypatch.setenv(timelog.ENV, str(log))
    with timelog.phase(timelog.LOAD):
        time.sleep(0.05)
        with timelog.phase(timelog.QUIET_WAIT):
            time.sleep(0.2)
    wait, load = timelog.read(log)
    assert wait["phase"] == timelog.QUIET_WAIT and wait["seconds"] >= 0.2
    assert load["phase"] == timelog.LOAD and 0.05 <= load["seconds"] < 0.2


def _report(
    nodeid: str, when: str, start: float, stop: float, outcome: str = "passed", slow: bool = True
) -> object:
    return SimpleNamespace(
        nodeid=nodeid,
        when=when,
        start=start,
        stop=stop,
        duration=stop - start,
        outcome=outcome,
        keywords={"slow": 1} if slow else {},
    )


def test_phases_are_counted_in_the_test_whose_span_holds_them(tmp_path: Path) -> None:
    log = tmp_path / "t.jsonl"
    log.write_text(
        "\n".join(
            [
                '{"phase": "receipt", "start": 101.0, "seconds": 4.0, "pid": 1}',
                '{"phase": "page load", "start": 106.0, "seconds": 1.0, "pid": 2}',
                '{"phase": "page load", "start": 121.0, "seconds": 2.0, "pid": 2}',
                '{"phase": "receipt", "start": 140.0, "seconds": 3.0, "pid": 1}',  # no test's
                "cut by a concurrent wr",
            ]
        )
    )
    clock = testtime.SuiteClock(log)
    for r in (
        _report("tests/test_a.py::one", "setup", 100.0, 102.0),
        _report("tests/test_a.py::one", "call", 102.0, 110.0),
        _report("tests/test_b.py::two", "call", 120.0, 125.0, outcome="rerun"),
        _report("tests/test_b.py::two", "call", 125.0, 132.0),
    ):
        clock.add(r)
    s = clock.summary(wall_s=50.0)
    assert s["phases"] == {
        "receipt": {"count": 2, "seconds": 7.0},
        "page load": {"count": 2, "seconds": 3.0},
    }
    by = {t["test"]: t for t in s["by_test"]}
    assert by["tests/test_a.py::one"] == {
        "test": "tests/test_a.py::one",
        "seconds": 10.0,
        "phases": {"receipt": 4.0, "page load": 1.0},
    }
    assert by["tests/test_b.py::two"]["phases"] == {"page load": 2.0}
    assert s["reruns"] == {"tests/test_b.py::two": 1}
    assert list(s["files"]) == ["tests/test_b.py", "tests/test_a.py"]
    assert clock.unmarked_slow(5.0) == []  # both marked slow
    clock.add(_report("tests/test_c.py::three", "call", 140.0, 146.0, slow=False))
    clock.add(_report("tests/test_c.py::four", "call", 146.0, 147.0, slow=False))
    assert clock.unmarked_slow(5.0) == [(6.0, "tests/test_c.py::three")]
    text = "\n".join(testtime.lines(s))
    assert "receipt" in text and "1 x tests/test_b.py::two" in text


def test_a_phase_goes_to_the_test_its_tag_names_whatever_the_spans(tmp_path: Path) -> None:
    """Two workers' tests overlap in time: each phase is counted in the test it names,
    its block run alone too; an untagged phase in the test whose span holds it."""
    log = tmp_path / "t.jsonl"
    entries = [
        {"phase": timelog.LOAD, "start": 15.0, "seconds": 2.0, "pid": 1, "tag": "t::b"},
        {"phase": timelog.LOAD, "start": 16.0, "seconds": 3.0, "pid": 1, "tag": "t::a" + ALONE},
        {"phase": timelog.SERVERS, "start": 12.0, "seconds": 1.0, "pid": 1},
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    clock = testtime.SuiteClock(log)
    clock.add(_report("t::a", "call", 10.0, 30.0))
    clock.add(_report("t::b", "call", 14.0, 20.0))
    by_test = {t["test"]: t["phases"] for t in clock.summary(30.0)["by_test"]}
    assert by_test == {
        "t::a": {timelog.LOAD: 3.0, timelog.SERVERS: 1.0},
        "t::b": {timelog.LOAD: 2.0},
    }
