"""Shards and merge: a spec run in K parts and merged is the spec run once.

The split is checked on the real presets (pure); the round trip runs real cells on
the local testbed: shards 1/2 and 2/2 into two folders, merged; the merged folder has
exactly the cells and stored run identities a single run of the spec stores (they
are deterministic: cell, attempt 1, arm, repetition of the plan), the statistics of
the shards unchanged, and it reports, packages, verifies and resumes as that run.
Every refusal (other spec, cell measured twice, non-empty --out) is tried.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from conftest import SharedLinks, reads_well
from made_rows import cell_row

from quicbed.analysis.cells import compare_cell
from quicbed.errors import QuicbedError
from quicbed.report.cellrow import CellRow
from quicbed.results.store import DB_NAME, Store
from quicbed.run.shard import Shard, assign, parse_shard, select
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec, plan

REPO = Path(__file__).resolve().parents[1]
QB = [sys.executable, "-m", "quicbed"]
#: two cells on two links, a shard each: the suite's two kept links (conftest.SharedLinks),
#: so the shards' sweeps reuse their receipts as a user's commands on a kept link do
SPEC = """
format: 1
name: halves
receipt_tcp_seconds: 1
defaults: {runs: 2, warmup: 1}
scenarios:
  slow:
    rate: [10]
    rtt: [36]
    pages: [5kb]
  fast:
    rate: [50]
    rtt: [20]
    pages: [5kb]
"""


def qb(*args: object, home: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [*QB, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.parametrize("preset", ["long-look.yaml", "demo.yaml", "quic-stacks.yaml"])
def test_shards_cover_the_plan_once_and_keep_conditions_together(preset: str) -> None:
    cells = plan(load_spec(REPO / "sweeps" / preset))
    ids = [pc.config.cell_id() for pc in cells]
    conditions = {pc.config.link_key() for pc in cells}
    for k in (1, 2, 3, 5):
        parts = assign(cells, k)
        got = [pc.config.cell_id() for part in parts for pc in part]
        assert sorted(got) == sorted(ids) and len(got) == len(set(got))
        assert parts == assign(cells, k)  # deterministic
        for part in parts:  # plan order within a shard
            pos = [ids.index(pc.config.cell_id()) for pc in part]
            assert pos == sorted(pos)
        if len(conditions) >= k:  # one receipt per condition: never split
            owner = {}
            for i, part in enumerate(parts):
                for pc in part:
                    assert owner.setdefault(pc.config.link_key(), i) == i
            assert all(parts), f"an idle shard of {k}"
        assert select(cells, Shard(k, k)) == parts[-1]
    # fewer conditions than shards: a condition is cut rather than a shard left idle
    one = [pc for pc in cells if pc.config.link_key() == cells[0].config.link_key()]
    if len(one) >= 3:
        assert all(assign(one, 3))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("3/2", "i must be 1..K"),
        ("0/2", "i must be 1..K"),
        ("1", "is not i/K"),
        ("a/b", "is not i/K"),
        ("1/0", "i must be 1..K"),
    ],
)
def test_bad_shards_are_named(text: str, why: str) -> None:
    with pytest.raises(QuicbedError, match=why) as e:
        parse_shard(text)
    assert repr(text) in str(e.value)


def _run_ids(root: Path) -> set[str]:
    with closing(sqlite3.connect(root / DB_NAME)) as con:
        return {r[0] for r in con.execute("SELECT run_id FROM runs")}


def _attempts(root: Path) -> dict[str, list[int]]:
    """Each cell's attempts in a folder: a cell whose receipt failed on a busy machine
    is measured again as attempt 2 by the sweep, so the tests count, not assume, them."""
    with closing(sqlite3.connect(root / DB_NAME)) as con:
        out: dict[str, list[int]] = {}
        for cid, att in con.execute("SELECT cell_id, attempt FROM attempts ORDER BY attempt"):
            out.setdefault(cid, []).append(att)
        return out


def _stats(root: Path) -> dict[str, dict[str, tuple]]:
    store = Store(root)
    try:
        out = {}
        for cid, att in store.latest_attempts().items():
            cfg = make_cell(**store.cell_config(cid))
            comps = compare_cell(store, cid, att.attempt, cfg)
            out[cid] = {
                p: (
                    c.reference.n,
                    c.reference.mean,
                    c.candidate.n,
                    c.candidate.mean,
                    c.pct_diff,
                    c.welch_p,
                )
                for p, c in comps.items()
            }
        return out
    finally:
        store.close()


@pytest.fixture(scope="module")
def folders(
    tmp_path_factory: pytest.TempPathFactory, shared_links: SharedLinks
) -> tuple[Path, Path]:
    """(work folder, home): the spec's two shards, measured, each on the kept link of its
    cell's condition."""
    base = tmp_path_factory.mktemp("shards")
    (base / "home").mkdir()
    (base / "halves.yaml").write_text(SPEC)
    cells = plan(load_spec(base / "halves.yaml"))
    for out, shard in (("s1", "1/2"), ("s2", "2/2")):
        (pc,) = select(cells, parse_shard(shard))
        cp = qb(
            "run",
            base / "halves.yaml",
            "--out",
            base / out,
            "--prefix",
            shared_links.kept_prefix(pc.config.condition),
            "--shard",
            shard,
            home=base / "home",
        )
        assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
        assert f"shard {shard} of sweep 'halves': 1 cells" in cp.stdout
    return base, base / "home"


def _planned_run_ids(spec: Path, latest: dict[str, int]) -> set[str]:
    """What one run of the whole spec stores: every planned cell's measured attempt
    (``latest``: the first, unless a failed receipt made the sweep measure it again),
    each arm and repetition (warm-ups included)."""
    return {
        f"{cid}:{latest[cid]}:{arm}:{rep}"
        for pc in plan(load_spec(spec))
        for arm, rep in pc.config.schedule()
        if (cid := pc.config.cell_id())
    }


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_shards_merge_into_the_sweep_run_once(folders: tuple[Path, Path]) -> None:
    base, home = folders
    s1, s2 = base / "s1", base / "s2"
    assert json.loads((s1 / "sweep.json").read_text())["shard"] == "1/2"
    assert _run_ids(s1).isdisjoint(_run_ids(s2))
    cp = qb("merge", s1, s2, "--out", base / "merged", home=home)
    assert cp.returncode == 0, cp.stderr
    attempts = {**_attempts(s1), **_attempts(s2)}
    n = sum(len(a) for a in attempts.values())
    assert f"merged 2 folders: 2 cells, {n} attempts" in cp.stdout
    merged = base / "merged"
    assert _attempts(merged) == attempts  # one folder per cell: its numbers stay
    latest = {cid: a[-1] for cid, a in attempts.items()}
    # the cells, runs and identities one run of the spec stores
    assert _run_ids(merged) == _planned_run_ids(base / "halves.yaml", latest)
    assert _stats(merged) == {**_stats(s1), **_stats(s2)}  # numbers came through unchanged
    held = json.loads((merged / "sweep.json").read_text())
    assert held["digest"] == load_spec(base / "halves.yaml").digest()
    assert [p["shard"] for p in held["merged_from"]] == ["1/2", "2/2"] and "shard" not in held
    for cid in _stats(merged):  # every attempt's files came along
        assert len(list((merged / "hars" / cid / str(latest[cid])).glob("*.har.gz"))) == 6
    rep = qb("report", merged, home=home)
    reads_well(merged / "report", "merged")
    assert rep.returncode == 0, rep.stderr
    assert (merged / "report" / "testbeds.csv").read_text().count("\n") == 3
    pkg = qb("package", merged, "-o", base / "merged.tar.gz", home=home)
    assert pkg.returncode == 0, pkg.stderr
    ver = qb("verify", base / "merged.tar.gz", home=home)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    # the merged folder is a sweep of the spec: resuming it has nothing left to do
    again = qb(
        "run", base / "halves.yaml", "--out", merged, "--resume", "--prefix", "mx", home=home
    )
    assert again.returncode == 0 and "0 cells measured, 2 kept" in again.stdout, again.stderr


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_every_shard_records_the_scenarios_of_the_whole_plan(folders: tuple[Path, Path]) -> None:
    """Each cell's scenarios (store schema 2): written by the sweep for every cell of the
    spec, whichever shard measures it, and kept through merge and package."""
    base, home = folders
    want = {pc.config.cell_id(): [pc.scenario] for pc in plan(load_spec(base / "halves.yaml"))}
    merged = base / "merged"
    if not merged.exists():
        assert qb("merge", base / "s1", base / "s2", "--out", merged, home=home).returncode == 0
    for folder in (base / "s1", base / "s2", merged):
        store = Store.open_readonly(folder)
        try:
            got = store.cell_scenarios()
        finally:
            store.close()
        # the shards name every planned cell; the merged folder the cells it holds (all)
        assert got == want, folder


@pytest.mark.root
@pytest.mark.browser
@pytest.mark.slow
def test_merge_refuses_what_is_not_one_sweep(folders: tuple[Path, Path]) -> None:
    base, home = folders
    s1, s2 = base / "s1", base / "s2"
    whole = base / "merged"  # the whole sweep (the round trip's merge), holding s1's cell too
    if not whole.exists():
        assert qb("merge", s1, s2, "--out", whole, home=home).returncode == 0
    cp = qb("merge", whole, s1, "--out", base / "twice", home=home)
    assert cp.returncode == 2 and "measured in more than one folder" in cp.stderr
    assert not (base / "twice").exists()
    forced = qb("merge", whole, s1, "--out", base / "twice", "--force", home=home)
    assert forced.returncode == 0, forced.stderr
    assert "every attempt kept, the latest reported" in " ".join(forced.stdout.split())
    store = Store(base / "twice")
    try:
        cid = next(iter(_stats(s1)))
        k = len(_attempts(s1)[cid])  # 1, or 2 where its receipt failed once
        atts = store.attempts(cid)
        assert [a.attempt for a in atts] == list(range(1, 2 * k + 1))  # renumbered by start
        assert all(a.started <= b.started for a, b in itertools.pairwise(atts))
        rows = store.runs(cid, 2 * k)
        assert rows and all(r.run_id.startswith(f"{cid}:{2 * k}:") for r in rows)
        assert all((base / "twice" / r.har_path).is_file() for r in rows if r.har_path)
    finally:
        store.close()
    cp = qb("merge", s1, s2, "--out", base / "twice", home=home)
    assert cp.returncode == 2 and "is not empty" in cp.stderr
    cp = qb("merge", s1, s1, "--out", base / "x", home=home)
    assert cp.returncode == 2 and "folder given twice" in cp.stderr
    cp = qb("merge", s1, base / "home", "--out", base / "x", home=home)
    assert cp.returncode == 2 and "is not a sweep's results folder" in cp.stderr
    other = json.loads((s2 / "sweep.json").read_text())
    (base / "other").mkdir()
    other["digest"] = "0" * 16
    (base / "other" / "sweep.json").write_text(json.dumps(other))
    cp = qb("merge", s1, base / "other", "--out", base / "x", home=home)
    assert cp.returncode == 2 and "holds another spec" in cp.stderr
    assert not (base / "x").exists()
    # a shard folder resumes only as that shard
    cp = qb("run", base / "halves.yaml", "--out", s1, "--resume", "--shard", "2/2", home=home)
    assert cp.returncode == 2 and "holds shard 1/2, not shard 2/2" in cp.stderr
    cp = qb("run", base / "halves.yaml", "--out", s1, "--shard", "1/3", home=home)
    assert cp.returncode == 2, cp.stderr
    cp = qb("run", base / "halves.yaml", "--out", base / "y", "--shard", "4/3", home=home)
    assert cp.returncode == 2 and "--shard: '4/3'" in cp.stderr


def _row(cid: str, testbed: dict, rtt: float = 36) -> CellRow:
    cond = {"rate_mbit": 10, "rtt_ms": rtt, "loss_pct": 0, "jitter_ms": 0, "queue": "2bdp"}
    return cell_row(
        cell_id=cid,
        rtt_ms=rtt,
        testbed=testbed,
        condition=json.dumps(cond, sort_keys=True),
    )


def test_each_attempt_names_its_testbed_and_the_report_warns_on_mixed_hardware() -> None:
    from quicbed.report.build import testbeds
    from quicbed.results.provenance import measured_on

    def ssh(source: str, hw: str) -> dict:
        roles = ("server", "client", "bridge")
        nodes = {
            r: {
                "host": f"{r}.{source}",
                "port": 22,
                "hardware_type": hw,
                "image": "UBUNTU22-64-STD",
            }
            for r in roles
        }
        machines = {r: {"machine": {"kernel": "5.15.0-91-generic", "cpu": "Xeon"}} for r in nodes}
        return {"testbed": {"kind": "ssh", "source": source, "nodes": nodes}, "nodes": machines}

    a, b, c = (
        measured_on(ssh(s, hw))
        for s, hw in (("e1.xml", "d430"), ("e2.xml", "m510"), ("e3.xml", "d430"))
    )
    assert (a["label"], a["hardware"], a["kernel"], a["image"]) == (
        "e1.xml",
        "d430",
        "5.15.0-91-generic",
        "UBUNTU22-64-STD",
    )
    local = measured_on(
        {
            "testbed": {"kind": "local", "prefix": "qb"},
            "machine": {"cpu": "EPYC", "kernel": "6.1.0"},
        }
    )
    assert local["label"] == "local qb" and local["hardware"] == "EPYC"
    rows = [_row("x1", a), _row("x2", b), _row("x3", c, rtt=112), _row("x4", a, rtt=112)]
    found, warnings = testbeds(rows)
    assert [(t["label"], t["cells"]) for t in found] == [
        ("e1.xml", 2),
        ("e2.xml", 1),
        ("e3.xml", 1),
    ]
    assert len({t["colour"] for t in found}) == 3
    (w,) = warnings  # 36 ms ran on d430 and m510; 112 ms on two d430 testbeds: fine
    assert "RTT 36 ms" in w and "d430: 1 cell(s); m510: 1 cell(s)" in w
