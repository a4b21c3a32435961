"""A page cell on a generated LTE trace, end to end (issue 41, item 2): the real
emulator following the trace under the receipt's UDP flood and under Chromium's loads
over h2 and h3, restarted before every load, each load placed in the trace and
judged against the bytes the trace file allows."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quicbed.model import capacity
from quicbed.results.store import Store

QB = [sys.executable, "-m", "quicbed"]
TRACE = "gen:lte-markov:seed=1:seconds=30"


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_a_cell_on_a_generated_trace_follows_it_in_its_receipt_and_every_load(
    prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUICBED_TRACES", str(tmp_path / "traces"))
    env = dict(os.environ)
    out = tmp_path / "r"
    cell = ["--rtt", "36", "--page", "100kb", "--arms", "h2,h3", "--runs", "2", "--warmup", "1"]
    cp = subprocess.run(
        [*QB, "cell", "--trace", TRACE, *cell, "--out", str(out), "--prefix", prefix],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert "trace gen:lte-markov:seed=1:seconds=30" in " ".join(cp.stdout.split())
    store = Store.open_readonly(out)
    try:
        runs = store.all_runs()
        (cell,) = store.cells()
        receipts = [r["receipt"] for r in store.receipts()]
        config = store.cell_config(cell)
    finally:
        store.close()
    # the receipt: each direction carried what the trace allows while flooded
    checks = {c["name"]: c for c in receipts[-1]["checks"]}
    for d in ("down", "up"):
        cap = checks[f"capacity_{d}"]
        assert cap["passed"] is True and cap["measured"] >= 95, cap
        f = cap["detail"]["facts"]
        assert f["available_bytes"] > 0 and f["served_bytes"] <= f["available_bytes"] + 1514, f
        assert checks[f"tcp_{d}"]["passed"] is None
    assert checks["rtt"]["passed"] is True
    # every load: verified, restarted at the trace's start, and within its bytes
    assert sorted(r.arm for r in runs if not r.warmup) == ["h2", "h2", "h3", "h3"]
    positions = []
    for r in runs:
        assert r.valid, (r.run_id, r.reason)
        link = r.detail["link"]["load"]
        for d in ("down", "up"):
            cap = link["directions"][d]["capacity"]
            assert cap["kind"] == "trace" and cap["period_ms"] == 30_000.0, cap
            assert cap["served_bytes"] <= cap["available_bytes"] + 1514, cap
            positions.append((cap["from_ms"], cap["to_ms"]))
        down = link["directions"]["down"]["capacity"]
        assert down["served_bytes"] >= 100_000  # the page came down through the trace
    # each load began at the trace's start (its restart, a few ms before the load)
    assert all(p0 < 50 and p1 > p0 for p0, p1 in positions), positions
    # the trace the emulator ran is the one the cell's identity names
    assert config["condition"]["trace_sha256"] == capacity.load(TRACE).sha256
    # the report names the trace where a constant link's rate stands
    cp = subprocess.run([*QB, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr[-2000:]
    with open(out / "report" / "table.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["link"].startswith(f"trace {TRACE} (mean ") and row["rate_mbit"] == ""
    page = (out / "report" / "index.html").read_text()
    assert f"trace {TRACE}" in page
