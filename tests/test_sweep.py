"""A tiny real sweep end to end: kill -9 in the middle, resume, report, render in Chromium."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicbed.store import DB_NAME

QB = [sys.executable, "-m", "quicbed"]
SPEC = """
format: 1
name: tiny
receipt_tcp_seconds: 1
defaults: {runs: 4, warmup: 1}
scenarios:
  base:
    rate: [50]
    rtt: [20]
    pages: [5kb, 10kb]
"""


def _runs(out: Path) -> list[tuple]:
    db = out / DB_NAME
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as con:
            return con.execute(
                "SELECT run_id, cell_id, attempt, arm, rep, warmup, valid FROM runs"
            ).fetchall()
    except sqlite3.OperationalError:
        return []


def test_kill_9_resume_report(prefix: str, tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "res"
    p = subprocess.Popen([*QB, "run", str(spec), "--out", str(out), "--prefix", prefix],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while len(_runs(out)) < 4:
            assert p.poll() is None, p.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no runs stored in time"
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        before = set(_runs(out))
        assert 4 <= len(before) < 20
        # resuming a folder that holds a sweep needs --resume
        again = subprocess.run([*QB, "run", str(spec), "--out", str(out), "--prefix", prefix],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert again.returncode == 2 and "use --resume" in again.stderr
        cp = subprocess.run([*QB, "run", str(spec), "--out", str(out), "--resume", "--prefix",
                             prefix], capture_output=True, text=True, timeout=600)  # fmt: skip
        assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
        after = _runs(out)
        assert {r[0] for r in before} <= {r[0] for r in after}, "a completed run was lost"
        planned = [r for r in after if r[4] >= 0]
        assert len(planned) == len({r[0] for r in planned}) == 20  # 2 x 2 x (4 + 1), none twice
        per_cell: dict[str, set] = {}
        for _, cell, _, arm, rep, _, _ in planned:
            per_cell.setdefault(cell, set()).add((arm, rep))
        assert all(len(v) == 10 for v in per_cell.values()) and len(per_cell) == 2
        # the resumed browsers were warmed up again (negative reps), so every measured
        # load after the resume still used 0-RTT / TLS resumption and counts
        assert all(r[5] == 1 for r in after if r[4] < 0)
        assert all(r[6] == 1 for r in after if r[5] == 0), [r for r in after if not r[6]]

        rep = subprocess.run([*QB, "report", str(out)], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert rep.returncode == 0, rep.stderr
        index = out / "report" / "index.html"
        assert (out / "report" / "table.csv").read_text().count("\n") == 3
        figs = sorted(p.name for p in (out / "report" / "figures").iterdir())
        assert figs == [
            "heatmap-base-0rtt-single-object.png",
            "heatmap-base-0rtt-single-object.svg",
        ]
        chrome = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run",
                  f"--user-data-dir={tmp_path / 'ud'}"]  # fmt: skip
        shot = tmp_path / "report.png"
        subprocess.run([*chrome, f"--screenshot={shot}", "--window-size=1200,1600",
                        index.as_uri()], capture_output=True, timeout=120, check=True)  # fmt: skip
        assert shot.stat().st_size > 20000
        dom = subprocess.run([*chrome, "--dump-dom", index.as_uri()], capture_output=True,
                             text=True, timeout=120, check=True).stdout  # fmt: skip
        assert dom.count('<figure class="heatmap">') == 1
        assert '<table id="cells">' in dom and dom.count("<tr class=") >= 2
        assert "data:image/png;base64," in dom and "Provenance" in dom
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        subprocess.run([*QB, "testbed", "down", "--prefix", prefix], capture_output=True,
                       timeout=60)  # fmt: skip


@pytest.mark.parametrize("bad", ["rate=50,rtt", "speed=3"])
def test_where_filter_errors(bad: str) -> None:
    from quicbed.errors import QuicbedError
    from quicbed.select import parse_where

    with pytest.raises(QuicbedError, match="--where"):
        parse_where(bad)
