"""The sweep estimate (quicbed.run.sweep.estimate, what ``run`` and the catalog print)
against the runs it was made for: every recorded run in ``benchmarks/durations/``
(quicbed.run.duration; ``tools/record_duration.py`` writes them), its spec as it
ran planned again with today's model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.run.duration import MAX_RATIO, compare, measured

RECORDS = sorted(
    (Path(__file__).resolve().parent.parent / "benchmarks" / "durations").glob("*.json")
)


def test_there_are_recorded_runs_of_presets_and_benchmarks() -> None:
    names = {json.loads(p.read_text())["name"] for p in RECORDS}
    assert len(names) >= 4, names


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_the_estimate_is_never_short_and_at_most_twice_the_run(path: Path) -> None:
    """Pessimistic on purpose (a user plans around it), but not so far that it stops
    meaning anything: what the run took (less its waits for a quiet host, which the
    estimate leaves out) <= the estimate <= MAX_RATIO times that."""
    rec = json.loads(path.read_text())
    assert rec["failed"] == 0, "record runs whose every cell finished"
    got = compare(rec)
    assert got["within"], f"{got} (allowed: 1 to {MAX_RATIO} x the run)"


def test_a_shard_is_compared_with_the_cells_it_ran() -> None:
    """A preset too long to run at once is recorded shard by shard (variable-links:
    sixteen): each shard's record is planned down to the cells that shard ran (one
    attempt each there), not the whole preset's."""
    recs = [r for r in (json.loads(p.read_text()) for p in RECORDS) if r.get("shard")]
    assert len(recs) >= 2
    for rec in recs:
        got = compare(rec)
        assert got["shard"] == rec["shard"] and got["cells"] == rec["attempts"], (got, rec)


def test_a_folder_that_is_no_finished_sweep_is_refused(tmp_path: Path) -> None:
    with pytest.raises(QuicbedError, match="not a sweep's results folder"):
        measured(tmp_path)
