"""Schema versions of the results store: an old store is migrated, every row kept.

tests/fixtures/store-v1/store.sqlite was written by quicbed before schema version 2
(its make_v1.py says how); these tests never change it, only copies.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.results.store import DB_NAME, MIGRATIONS, SCHEMA_VERSION, Store

FIXTURE = Path(__file__).parent / "fixtures" / "store-v1"
V1_TABLES = ("meta", "cells", "attempts", "runs", "receipts", "link_spans")


#: version 1's columns of the tables later versions widened
V1_COLUMNS = {
    "attempts": "cell_id, attempt, started, finished, status, problem, receipt, provenance",
    "runs": "run_id, cell_id, attempt, arm, rep, seq, warmup, valid, reason, plt_ms, "
    "onload_ms, dns_ms, nav_load_ms, ttfb_ms, objects, bytes, protocols, used_0rtt, "
    "tls_resumed, har_path, started, detail",
}


def raw(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of version 1's tables, as SQLite holds them (no decoding), in version
    1's columns."""
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as con:
        return {
            t: con.execute(f"SELECT {V1_COLUMNS.get(t, '*')} FROM {t} ORDER BY rowid").fetchall()
            for t in V1_TABLES
        }


def version(db: Path) -> str:
    with closing(sqlite3.connect(db)) as con:
        return con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]


def reads(store: Store) -> dict[str, Any]:
    """What readers get through the Store API."""
    cells = store.cells()
    return {
        "cells": cells,
        "configs": store.cell_configs(),
        "attempts": store.all_attempts(),
        "receipts": store.receipts(),
        "runs": store.all_runs(),
        "spans": [store.link_spans(c, a.attempt) for c in cells for a in store.attempts(c)],
        "latest": store.latest_attempts(),
        "plts": [store.plts(c, 2, arm) for c in cells for arm in ("h2", "h3")],
    }


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    shutil.copyfile(FIXTURE / DB_NAME, folder / DB_NAME)
    assert version(folder / DB_NAME) == "1"
    return folder


def test_the_chain_reaches_this_version() -> None:
    assert sorted(MIGRATIONS) == list(range(SCHEMA_VERSION))


def test_a_version_1_store_is_migrated_with_every_row_kept(v1: Path) -> None:
    before = raw(v1 / DB_NAME)
    assert len(before["runs"]) == 4 and len(before["receipts"]) == 2
    store = Store(v1)
    try:
        got = reads(store)
        assert store.scenarios(got["cells"][0]) == [] and store.cell_scenarios() == {}
    finally:
        store.close()
    assert version(v1 / DB_NAME) == str(SCHEMA_VERSION)
    after = raw(v1 / DB_NAME)
    meta = [r for r in after.pop("meta") if r[0] != "schema_version"]
    assert meta == [r for r in before.pop("meta") if r[0] != "schema_version"]
    assert after == before
    # a second open finds nothing to do and reads the same
    store = Store(v1)
    try:
        assert reads(store) == got
        assert got["runs"][0].protocols in (["h2"], ["h3"])  # decoded like runs()
        assert got["attempts"][0].provenance["git"]["sha"] == "0" * 40
    finally:
        store.close()


def test_version_4_reads_an_old_failures_reason_from_its_words(v1: Path) -> None:
    """Attempts stored before the reason column get it from their problem's words, so
    a resume of an old folder measures again the cells that failed on their link."""
    store = Store(v1)
    try:
        first, second = store.attempts("ea0abcdd9504")
    finally:
        store.close()
    assert first.status == "failed" and first.reason == "link-out-of-tolerance"
    assert second.status == "done" and second.reason is None
    assert first.waited_s is None and second.waited_s is None


def test_version_5_reads_no_paint_for_old_loads(v1: Path) -> None:
    """Loads stored before the paint columns read fcp_ms and lcp_ms as null (never 0),
    through a writable and a read-only open alike; their PLTs are unchanged."""
    for opener in (Store.open_readonly, Store):
        store = opener(v1)
        try:
            runs = store.all_runs()
            assert len(runs) == 4 and all(r.plt_ms is not None for r in runs)
            assert {(r.fcp_ms, r.lcp_ms) for r in runs} == {(None, None)}
            cid = runs[0].cell_id
            assert store.values(cid, 2, "h2", "lcp_ms") == []
            assert store.values(cid, 2, "h2", "plt_ms") == store.plts(cid, 2, "h2") != []
        finally:
            store.close()


def test_version_6_reads_no_visual_figures_for_old_loads(v1: Path) -> None:
    """Loads stored before the visual columns read speed_index_ms and visual_complete_ms
    as null, and a comparison on them finds no values."""
    store = Store.open_readonly(v1)
    try:
        runs = store.all_runs()
        assert {(r.speed_index_ms, r.visual_complete_ms) for r in runs} == {(None, None)}
        assert store.values(runs[0].cell_id, 2, "h2", "speed_index_ms") == []
    finally:
        store.close()


def test_a_read_only_open_migrates_a_copy_and_leaves_the_file(v1: Path) -> None:
    digest = hashlib.sha256((v1 / DB_NAME).read_bytes()).hexdigest()
    ro = Store.open_readonly(v1)
    try:
        got = reads(ro)
        assert ro.cell_scenarios() == {}
        with pytest.raises(sqlite3.OperationalError, match="readonly"):  # even the copy
            ro.add_cell("abc", {})
    finally:
        ro.close()
    assert hashlib.sha256((v1 / DB_NAME).read_bytes()).hexdigest() == digest
    assert version(v1 / DB_NAME) == "1"
    rw = Store(v1)
    try:
        assert reads(rw) == got
    finally:
        rw.close()


def test_a_read_only_store_cannot_be_written(tmp_path: Path) -> None:
    Store(tmp_path, create=True).close()
    ro = Store.open_readonly(tmp_path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro.add_cell("abc", {})
    finally:
        ro.close()


def test_a_newer_store_is_refused(v1: Path) -> None:
    with closing(sqlite3.connect(v1 / DB_NAME)) as con, con:
        con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (SCHEMA_VERSION + 1,))
    for opener in (Store, Store.open_readonly):
        with pytest.raises(QuicbedError, match=f"schema version {SCHEMA_VERSION + 1}; this"):
            opener(v1)


def test_a_failed_migration_leaves_the_store_as_it_was(
    v1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = raw(v1 / DB_NAME)
    broken = dict(MIGRATIONS)
    broken[SCHEMA_VERSION - 1] = MIGRATIONS[SCHEMA_VERSION - 1] + "\nSELECT no_such_function();\n"
    monkeypatch.setattr("quicbed.results.store.MIGRATIONS", broken)
    with pytest.raises(sqlite3.OperationalError, match="no_such_function"):
        Store(v1)
    assert version(v1 / DB_NAME) == "1"
    assert raw(v1 / DB_NAME) == before
    with closing(sqlite3.connect(v1 / DB_NAME)) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    assert "cell_scenarios" not in tables


def test_scenarios_are_kept_per_cell_and_carried_by_merge(tmp_path: Path) -> None:
    src = Store(tmp_path / "a", create=True)
    try:
        src.add_scenarios(
            [("c1", "baseline"), ("c2", "baseline"), ("c1", "lossy"), ("c1", "baseline")]
        )
        assert src.scenarios("c1") == ["baseline", "lossy"]
        assert src.scenarios("nope") == []
        assert src.cell_scenarios() == {"c1": ["baseline", "lossy"], "c2": ["baseline"]}
        src.add_cell("c1", {"host": "x"})
        src.new_attempt("c1", {})
        src.finish_attempt("c1", 1, "done")
        dst = Store(tmp_path / "b", create=True)
        try:
            dst.import_attempt(src, "c1", 1, 1)
            assert dst.cell_scenarios() == {"c1": ["baseline", "lossy"]}
        finally:
            dst.close()
    finally:
        src.close()


def test_reading_a_store_leaves_its_folder_as_it_was(tmp_path: Path) -> None:
    store = Store(tmp_path, create=True)  # WAL mode, as a sweep writes it
    store.add_cell("abc", {"host": "x"})
    store.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    ro = Store.open_readonly(tmp_path)
    try:
        # read back with what it predates filled in as it ran (Store.stored_config)
        assert ro.cell_configs() == {"abc": {"host": "x", "key_exchange": "stack"}}
    finally:
        ro.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before == [DB_NAME]
