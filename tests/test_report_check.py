"""The report check (quicbed.report.check) on pages made to fail it: a planted
placeholder, an empty table, a missing image, a dead link and anchor, a page too wide
for its window. The reports quicbed makes pass it in the tests that make them
(conftest.reads_well: a page sweep, bulk and compete cells, a profiled bulk cell,
transport parameters, a Firefox cell, a failed cell, a merged folder)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import reads_well

from quicbed.report.check import check_report

pytestmark = pytest.mark.browser

GOOD = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>r</title></head><body>
<h1 id="top">A report</h1><p>No loss, unshaped: words, not placeholders.</p>
<table id="t"><tr><th>a</th></tr><tr><td>1</td></tr></table>
<a href="#top">up</a> <a href="table.csv">csv</a>
<script>const none = null;</script></body></html>"""


def _page(tmp_path: Path, html: str) -> Path:
    (tmp_path / "index.html").write_text(html)
    (tmp_path / "table.csv").write_text("a\n1\n")
    return tmp_path


def test_a_good_page_passes_and_leaves_only_its_screenshot(tmp_path: Path) -> None:
    res = check_report(_page(tmp_path, GOOD), tmp_path / "shots" / "good.png")
    assert res.ok, res.problems
    assert res.screenshot is not None and res.screenshot.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "shots", "table.csv"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("No loss", "None Mbit/s"), "placeholder text: 'None Mbit/s, unshaped: words"),
        (("<td>1</td>", "<td>nan</td>"), "placeholder text: 'nan'"),
        (("<tr><td>1</td></tr>", ""), "a table with no rows: t"),
        (("<a href", '<img alt="fig" src="figures/gone.png"><a href'), "does not load: fig"),
        (('href="table.csv"', 'href="tables.csv"'), "a file that is not there: tables.csv"),
        (('href="#top"', 'href="#cpu"'), "an anchor that is not there: #cpu"),
        (("<h1", '<div style="width: 3000px">wide</div><h1'), "px wider than a 1280 px window"),
    ],
)
def test_what_a_reader_would_stop_at_fails_the_check(
    tmp_path: Path, change: tuple[str, str], problem: str
) -> None:
    assert change[0] in GOOD
    res = check_report(_page(tmp_path, GOOD.replace(*change)))
    assert not res.ok and any(problem in p for p in res.problems), res.problems
    with pytest.raises(AssertionError) as failed:  # as the tests that make reports use it
        reads_well(tmp_path, "planted")
    assert problem in str(failed.value)


def test_quicbed_report_check_reads_the_page_and_says_what_it_found(tmp_path: Path) -> None:
    """`quicbed report DIR --check`: the report built, then read; a problem named, exit 1."""
    import subprocess
    import sys

    from test_tparams import _advertised_folder

    qb = [sys.executable, "-m", "quicbed", "report", str(tmp_path)]
    _advertised_folder(tmp_path)
    shot = tmp_path / "shot.png"
    cp = subprocess.run([*qb, "--check", "--screenshot", str(shot)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "report check: reads as it should" in cp.stdout and shot.stat().st_size > 1000
    cp = subprocess.run([*qb, "--screenshot", str(shot)], capture_output=True, text=True)
    assert cp.returncode != 0 and "--screenshot is --check's" in cp.stdout + cp.stderr
