"""The results folder's rules (quicbed.results.folder), without a testbed: who may add runs.

``cell --out`` into a folder that holds runs follows the rule ``run --resume``
follows: under the folder's lock, and only with the software those runs were made
with, unless forced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results.folder import (
    STOP_FILE,
    FailureReason,
    clear_stop,
    folder_lock,
    is_running,
    read_sweep,
    stop_requested,
    write_sweep,
)
from quicbed.results.store import Store
from quicbed.run import sweep
from quicbed.spec.cellconfig import make_cell

#: what the check compares for CFG (an h2 and an h3 arm in Chromium), as records before
#: digests named it: a version per component
SOFTWARE = dict.fromkeys(
    ("quicbed", "quicbed-linkem", "chromium", "apache", "quicbed-h3server"), "1.0"
)
CFG = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="10kbx1", runs=2)


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """run_cell replaced by a stub that records where it would have run (the folder's
    lock held meanwhile); this machine's software is SOFTWARE with chromium 2.0."""
    calls: list[Path] = []

    def run_cell(cfg: Any, out: Path, **kwargs: Any) -> str:
        assert is_running(out), "run_cell ran without the folder's lock"
        calls.append(out)
        return "result"

    monkeypatch.setattr(sweep, "run_cell", run_cell)
    monkeypatch.setattr(sweep, "_software", lambda tb: {**SOFTWARE, "chromium": "2.0"})
    return calls


def sweep_folder(folder: Path, software: dict[str, Any]) -> None:
    folder.mkdir()
    write_sweep(folder, {"format": 1, "digest": "d", "spec": {"name": "s"}, "software": software})


def test_a_cell_into_a_sweep_of_other_software_is_refused_unless_forced(
    tmp_path: Path, ran: list[Path]
) -> None:
    out = tmp_path / "sweep"
    sweep_folder(out, SOFTWARE)
    with pytest.raises(QuicbedError) as exc:
        sweep.run_cell_into(CFG, out, testbed=None)  # type: ignore[arg-type]
    assert "holds sweep 's'" in str(exc.value)
    assert "chromium (1.0 -> 2.0)" in str(exc.value) and "--force" in str(exc.value)
    assert ran == []
    assert sweep.run_cell_into(CFG, out, testbed=None, force=True) == "result"  # type: ignore[arg-type]
    assert ran == [out.resolve()]


def test_a_cell_into_a_folder_whose_attempt_ran_other_software_is_refused(
    tmp_path: Path, ran: list[Path]
) -> None:
    store = Store(tmp_path / "r", create=True)
    store.add_cell(CFG.cell_id(), CFG.model_dump(mode="json"))
    store.new_attempt(CFG.cell_id(), {"software": {**SOFTWARE, "apache": {"deps": "x"}}})
    store.close()
    with pytest.raises(QuicbedError, match=r"attempt 1 .* \(chromium \(1.0 -> 2.0\), apache "):
        sweep.run_cell_into(CFG, tmp_path / "r", testbed=None)  # type: ignore[arg-type]
    assert ran == []
    assert not (tmp_path / "r" / "sweep.lock").exists()  # not a sweep's folder: no lock left


def test_a_cell_into_a_new_or_same_software_folder_runs(tmp_path: Path, ran: list[Path]) -> None:
    sweep.run_cell_into(CFG, tmp_path / "new", testbed=None)  # type: ignore[arg-type]
    out = tmp_path / "same"
    sweep_folder(out, {**SOFTWARE, "chromium": "2.0"})
    sweep.run_cell_into(CFG, out, testbed=None)  # type: ignore[arg-type]
    assert ran == [(tmp_path / "new").resolve(), out.resolve()]


def test_a_cell_into_a_folder_being_written_is_refused(tmp_path: Path, ran: list[Path]) -> None:
    out = tmp_path / "sweep"
    sweep_folder(out, {**SOFTWARE, "chromium": "2.0"})
    with folder_lock(out, "sweep"), pytest.raises(QuicbedError, match="in use by a running sweep"):
        sweep.run_cell_into(CFG, out, testbed=None, force=True)  # type: ignore[arg-type]
    assert ran == []


def test_a_damaged_sweep_file_is_named(tmp_path: Path) -> None:
    for body in ("{not json", json.dumps({"spec": {}, "digest": "d", "software": {}}), "[]"):
        (tmp_path / "sweep.json").write_text(body)
        with pytest.raises(QuicbedError, match=r"sweep\.json is not a quicbed sweep file"):
            read_sweep(tmp_path)


def test_only_the_links_failures_are_retried() -> None:
    retried = {r for r in FailureReason if r.link}
    assert retried == {
        FailureReason.LINK_OUT_OF_TOLERANCE,
        FailureReason.LINK_OPENING_CHECK,
        FailureReason.LINK_CLOSING_CHECK,
        FailureReason.LINK_CHANGED,
        FailureReason.LINK_SPOILED_RUNS,
    }


@pytest.mark.slow
def test_a_stop_request_needs_a_running_sweep_and_outlives_only_its_own_run(
    tmp_path: Path,
) -> None:
    """``quicbed stop DIR`` names a folder that is no sweep, one nobody is running, or
    one a single cell is being measured into, and writes nothing there; a request names
    the run holding the lock, so that run keeps it at its start while a later run drops
    it as stale."""
    import os
    import subprocess
    import sys

    stop = [sys.executable, "-m", "quicbed", "stop"]
    plain = tmp_path / "plain"
    plain.mkdir()
    out = tmp_path / "sweep"
    sweep_folder(out, SOFTWARE)
    for folder, why in ((plain, "not a sweep's results folder"), (out, "no sweep is running")):
        cp = subprocess.run([*stop, str(folder)], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 2 and f"{folder}: {why}" in cp.stderr, cp.stderr
        assert not (folder / STOP_FILE).exists()
    with folder_lock(out, "cell"):  # `quicbed cell --out` into a sweep's folder
        cp = subprocess.run([*stop, str(out)], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 2 and "a cell is being written into it" in cp.stderr, cp.stderr
        assert not stop_requested(out)
    with folder_lock(out, "sweep"):
        cp = subprocess.run([*stop, str(out)], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0 and f"(PID {os.getpid()})" in cp.stdout, cp.stderr
        assert stop_requested(out)
        assert not clear_stop(out, keep_for_pid=os.getpid())  # made for this run: kept
        assert stop_requested(out)
    assert clear_stop(out, keep_for_pid=os.getpid() + 1)  # another run's: stale
    assert not stop_requested(out) and not clear_stop(out)
