"""One sweep over two ssh testbeds at once, one of which dies in the middle.

Two ssh labs (the local namespaces with sshd, each on its own control network) play
two Emulab experiments. ``quicbed run --hosts A --hosts B`` spreads a small spec over
both; once lab B has stored a load, B's sshd is killed (listeners and sessions), so B
becomes unreachable mid-cell, as when its nodes or their control network die. B
leaves the rotation with its reason and lab A measures the rest, B's interrupted
cell included, as a new attempt: every cell ends done, each attempt says which
testbed measured it, and the report lists the testbeds.
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from conftest import reads_well

from quicbed.results.store import DB_NAME
from quicbed.roles import cgroups
from quicbed.testbed.local import LocalTestbed
from quicbed.testbed.ssh import SshTestbed
from quicbed.testbed.sshlab import SshLab

pytestmark = [pytest.mark.root, pytest.mark.browser, pytest.mark.slow]

QB = [sys.executable, "-m", "quicbed"]
SPEC = """
format: 1
name: two-labs
receipt_tcp_seconds: 1
defaults: {runs: 2, warmup: 1}
scenarios:
  base:
    rate: [10]
    rtt: [10, 20]
    pages: [5kb]
"""


def _attempts(out: Path) -> list[dict]:
    """Every attempt with the testbed source its provenance names and its stored loads."""
    db = out / DB_NAME
    if not db.exists():
        return []
    try:
        with closing(sqlite3.connect(db, timeout=5)) as con:
            rows = con.execute(
                "SELECT a.cell_id, a.attempt, a.status, a.started, a.finished, a.provenance, "
                "(SELECT COUNT(*) FROM runs r WHERE r.cell_id=a.cell_id AND r.attempt=a.attempt)"
                " FROM attempts a"
            ).fetchall()
    except sqlite3.OperationalError:
        return []
    out_rows = []
    for cid, att, status, started, finished, prov, loads in rows:
        src = ((json.loads(prov) if prov else {}).get("testbed") or {}).get("source")
        out_rows.append(
            {
                "cell": cid,
                "attempt": att,
                "status": status,
                "started": started,
                "finished": finished,
                "source": src,
                "loads": loads,
            }
        )
    return out_rows


#: loads of a cell: 2 arms x (2 runs + 1 warm-up)
LOADS = 6


def _crash(prefix: str) -> None:
    """SIGKILL lab ``prefix``'s sshd, listeners and sessions: every connection to it drops
    and no new one is answered, as when a node or its control network dies. (Only sshd:
    a shell killed mid-start could leave the machine's own shell start-up files locked,
    e.g. pyenv's rehash lock, and hang every later login.)"""
    tb = LocalTestbed(prefix)
    for role in ("server", "client", "bridge"):
        pids = subprocess.run(
            ["ip", "netns", "pids", tb.ns(role)], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    os.kill(int(pid), 9)
            except (ProcessLookupError, FileNotFoundError):
                pass


@pytest.fixture
def labs() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0:
        pytest.fail("this test needs root (network namespaces); CI runs as root")
    a, b = "a" + secrets.token_hex(3), "b" + secrets.token_hex(3)
    folders = []
    try:
        for p in (a, b):
            ssh = SshTestbed.load(SshLab(p).up())
            folders.append(ssh.cpu.folder)
            ssh.close()
        yield a, b
    finally:
        for p in (a, b):
            SshLab(p).down()
            assert LocalTestbed(p).leftovers() == []
        # the sweep's CPU groups, in this machine's tree: cleared with the labs
        left = [
            f for f in folders for m, _, _ in cgroups.mounts() if Path(m, cgroups.TOP, f).exists()
        ]
        assert left == [], f"the ssh testbeds' CPU groups left: {left}"


def test_a_sweep_spreads_over_two_testbeds_and_survives_one(
    labs: tuple[str, str], tmp_path: Path
) -> None:
    a, b = labs
    inv_a, inv_b = str(SshLab(a).inventory), str(SshLab(b).inventory)
    spec = tmp_path / "two.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "res"
    p = subprocess.Popen(
        [*QB, "run", str(spec), "--out", str(out), "--hosts", inv_a, "--hosts", inv_b],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not any(x["source"] == inv_b and x["loads"] > 0 for x in _attempts(out)):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "lab B stored no load in time"
            time.sleep(0.1)
        _crash(b)  # mid-cell
        stdout, stderr = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    text = " ".join(stdout.split())
    assert p.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert f"testbed {inv_b} taken out of the sweep" in text
    assert "2 cells measured, 0 kept from before; 0 failed now" in text
    assert "could not be torn down" in stderr  # B is gone: said, not fatal
    atts = _attempts(out)
    on_b = [x for x in atts if x["source"] == inv_b]
    assert on_b and all(x["status"] == "failed" for x in on_b if x["loads"] < LOADS)
    latest: dict[str, dict] = {}
    for x in sorted(atts, key=lambda x: x["attempt"]):
        latest[x["cell"]] = x
    assert len(latest) == 2 and all(x["status"] == "done" for x in latest.values())
    cut = next(x for x in on_b if x["status"] == "failed")
    assert latest[cut["cell"]]["source"] == inv_a  # B's cell was measured again, on A
    assert latest[cut["cell"]]["attempt"] == cut["attempt"] + 1
    # both testbeds measured at the same time before B died
    first_a = min((x for x in atts if x["source"] == inv_a), key=lambda x: x["started"])
    assert cut["started"] < first_a["finished"]
    rep = subprocess.run([*QB, "report", str(out)], capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    reads_well(out / "report", "two-testbeds")
    with open(out / "report" / "testbeds.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["testbed"] for r in rows} <= {inv_a, inv_b} and len(rows) == 2
    html = (out / "report" / "index.html").read_text()
    assert inv_a in html and 'id="testbed-list"' in html
    # `run --hosts` makes it an ssh sweep, recorded in the stored spec, with the software
    # read on the client host; the report's rerun command names the hosts again
    held = json.loads((out / "sweep.json").read_text())
    assert held["spec"]["testbed"] == "ssh" and held["testbed"]["kind"] == "ssh"
    assert held["software"]["chromium"]
    assert f"--testbed ssh --hosts {inv_a}" in html
