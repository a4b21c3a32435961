"""The results store: one folder per experiment, an SQLite run index at its heart.

Append-only and crash-safe: every run is committed the moment it finishes (WAL
journal), so a crash loses at most the load in flight. Runs have deterministic IDs
(cell, attempt, arm, repetition): a run can never be stored twice. Failures and
invalid loads are rows too, with their reason; warm-ups are rows flagged as such.

Layout (the rest of a results folder: quicbed.results.folder)::

    DIR/store.sqlite                  cells, attempts (receipt, provenance), runs
    DIR/hars/<cell>/<attempt>/<arm>-<rep>.har.gz
    DIR/logs/<cell>/<attempt>/...     server logs, browser logs
    DIR/visual/<cell>/<attempt>/<arm>-<rep>/  a visual cell's frames per load

No SQL is written outside this module: every reader asks a method here, which
returns rows with their JSON columns decoded the same way everywhere.

Schema versions (``meta.schema_version``); MIGRATIONS[n] takes version n to n + 1:
  1 (quicbed 0.1.0): cells, attempts, runs, receipts, link_spans.
  2: cell_scenarios, the scenarios of the sweep's spec that plan each cell.
  3: transfers, a bulk or compete cell's record per attempt.
  4: attempts.reason (why an attempt failed, as quicbed.results.folder.FailureReason's
     code; filled from the problem's words for older attempts) and attempts.waited_s
     (seconds the attempt waited for a quiet host).
  5: runs.fcp_ms and runs.lcp_ms, a load's first and largest contentful paint (ms after
     the navigation's time origin, read by the page-load driver: client/paint.js);
     NULL for the loads of older stores, which never read them.
  6: runs.speed_index_ms and runs.visual_complete_ms, a load's visual progress from the
     frames its browser showed (quicbed.client.visual; only a cell with ``visual``
     captures them); NULL for the loads of older stores.
A writable store of an older version is migrated when it is opened, in one
transaction (a migration that stops leaves the store as it was); a read-only open
migrates an in-memory copy and leaves the file untouched. A newer version is refused.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.results.rows import AttemptRow, RunRow
from quicbed.spec.significance import DEFAULT_METRIC, METRICS  # the runs columns compared

SCHEMA_VERSION = 6
DB_NAME = "store.sqlite"


#: version 1's tables (IF NOT EXISTS: early version-1 stores lack receipts and link_spans,
#: which were added without a version bump; the migration to 2 adds them too)
_V1_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    cell_id TEXT PRIMARY KEY,
    config TEXT NOT NULL,          -- resolved cell configuration (JSON)
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    cell_id TEXT NOT NULL REFERENCES cells(cell_id),
    attempt INTEGER NOT NULL,
    started TEXT NOT NULL,
    finished TEXT,
    status TEXT NOT NULL,          -- running | done | failed
    problem TEXT,
    receipt TEXT,                  -- fidelity receipt (JSON)
    provenance TEXT,               -- versions, kernel, sysctls, git SHA (JSON)
    PRIMARY KEY (cell_id, attempt)
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,       -- cell:attempt:arm:rep
    cell_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    arm TEXT NOT NULL,
    rep INTEGER NOT NULL,          -- 0-based; warm-ups first
    seq INTEGER NOT NULL,          -- order of execution within the attempt
    warmup INTEGER NOT NULL,
    valid INTEGER NOT NULL,
    reason TEXT,                   -- why invalid ("" if valid)
    plt_ms REAL,                   -- HAR onLoad minus DNS
    onload_ms REAL,
    dns_ms REAL,
    nav_load_ms REAL,              -- Navigation Timing loadEventEnd
    ttfb_ms REAL,
    objects INTEGER,
    bytes INTEGER,
    protocols TEXT,                -- JSON list of protocols seen on the test origin
    used_0rtt INTEGER,             -- from the QUIC server's own log (NULL: not applicable)
    tls_resumed INTEGER,           -- from the server's log (NULL: unknown)
    har_path TEXT,
    started TEXT NOT NULL,
    detail TEXT                    -- JSON: per-entry timings etc.
);
CREATE TABLE IF NOT EXISTS receipts (     -- every receipt, also of resumed attempts
    cell_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    created TEXT NOT NULL,
    passed INTEGER NOT NULL,
    receipt TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS link_spans (  -- which receipt proves which loads of an attempt
    cell_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    receipt_created TEXT,          -- the receipt (in receipts) these loads ran under
    generation TEXT,               -- the link's generation that receipt measured
    shared INTEGER NOT NULL,       -- 1: the receipt was taken for an earlier cell
    first_seq INTEGER,             -- the loads covered (runs.seq), NULL if none ran
    last_seq INTEGER,
    started TEXT NOT NULL,
    finished TEXT NOT NULL,
    opening TEXT,                  -- spot check before the loads (JSON; NULL: fresh receipt)
    closing TEXT,                  -- check after the last load (JSON)
    passed INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_cell ON runs(cell_id, attempt, arm);
"""

#: MIGRATIONS[n] takes a store of schema version n to n + 1 (0: a new, empty database).
#: Each is run in the transaction that also records the new version; never edit one
#: that has been released: add the next.
MIGRATIONS: dict[int, str] = {
    0: _V1_TABLES,
    1: _V1_TABLES
    + """
CREATE TABLE cell_scenarios (      -- which scenarios of the sweep's spec plan a cell
    cell_id TEXT NOT NULL,         -- (a cell run by `quicbed cell` alone has none)
    scenario TEXT NOT NULL,
    PRIMARY KEY (cell_id, scenario)
);
""",
    2: """
CREATE TABLE transfers (           -- a bulk or compete cell's attempt (quicbed.run.bulk)
    cell_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,            -- bulk | compete
    created TEXT NOT NULL,
    result TEXT NOT NULL,          -- its record (JSON): every flow's samples, the queue
    PRIMARY KEY (cell_id, attempt)
);
""",
    3: """
ALTER TABLE attempts ADD COLUMN reason TEXT;      -- why it failed (FailureReason's code)
ALTER TABLE attempts ADD COLUMN waited_s REAL;    -- seconds it waited for a quiet host
UPDATE attempts SET reason = CASE
    WHEN problem LIKE 'the link is out of tolerance%' THEN 'link-out-of-tolerance'
    WHEN problem LIKE 'opening check:%' THEN 'link-opening-check'
    WHEN problem LIKE 'closing check after the last load:%' THEN 'link-closing-check'
    WHEN problem LIKE 'the link changed during the cell%' THEN 'link-changed'
    ELSE 'other' END
  WHERE status = 'failed';
""",
    4: """
ALTER TABLE runs ADD COLUMN fcp_ms REAL;          -- first contentful paint, ms
ALTER TABLE runs ADD COLUMN lcp_ms REAL;          -- largest contentful paint, ms
""",
    5: """
ALTER TABLE runs ADD COLUMN speed_index_ms REAL;      -- Speed Index, ms
ALTER TABLE runs ADD COLUMN visual_complete_ms REAL;  -- visually complete, ms
""",
}


#: folders with one sub-folder per cell and attempt (``<dir>/<cell>/<attempt>/``)
ATTEMPT_DIRS = ("hars", "logs", "traces", "visual")


def now() -> str:
    return datetime.now(UTC).isoformat()


def open_db(db: Path, *, create: bool, readonly: bool = False) -> tuple[sqlite3.Connection, int]:
    """Connect to a store's SQLite file, refusing any file that is not a sound quicbed
    store; returns the connection and the store's schema version (0: a new database).

    SQLite happily treats a missing or 0-byte file as a new, empty database, so a
    reader (report, export, package, ``cell --from``) would turn a damaged results
    folder into a fresh one and report "no cells". Here only ``create`` may make a
    database, and only where no file exists; any existing file must be a regular
    file with SQLite's header that passes ``PRAGMA quick_check`` and has quicbed's
    meta table of a schema version this quicbed reads (SCHEMA_VERSION or an older one,
    which the caller migrates). Every refusal is one line naming the file.
    ``readonly``: nothing on this connection can write the file (``query_only``; SQLite's
    ``mode=ro`` where the file is not writable anyway: a ``mode=ro`` connection to a
    store in WAL mode cannot remove the ``-wal`` and ``-shm`` files it makes, so a
    reader would leave files in the folder it read).
    """
    if not (db.exists() or db.is_symlink()):
        if not create or readonly:
            raise QuicbedError(f"no quicbed results in {db.parent} ({DB_NAME} missing)")
        db.parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(db, isolation_level=None, timeout=30), 0
    bad = f"{db} is not a quicbed results store"
    # The file is never opened here except by SQLite: closing any descriptor of a file
    # drops every POSIX lock this process holds on it, so a header read of our own
    # would silently unlock a live connection of another thread (a sweep over several
    # testbeds runs cells side by side): another process could then take the WAL for
    # abandoned, checkpoint and delete it under the writer, and a crash lose its loads.
    try:
        if not db.is_file():
            raise QuicbedError(f"{bad} (not a regular file)")
        size = db.stat().st_size
    except OSError as exc:
        raise QuicbedError(f"{db}: {exc.strerror}") from None
    if size == 0:
        raise QuicbedError(f"{bad} (it is empty: 0 bytes)")
    if readonly and not os.access(db, os.W_OK):
        con = sqlite3.connect(
            f"{db.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, timeout=30
        )
    else:
        con = sqlite3.connect(db, isolation_level=None, timeout=30)
        if readonly:
            con.execute("PRAGMA query_only=ON")
    try:
        try:
            check = con.execute("PRAGMA quick_check").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):
                raise QuicbedError(f"{bad} (not an SQLite database)") from None
            raise
        if check != "ok":
            raise QuicbedError(f"{db} is damaged (SQLite: {check})")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        row = None
        if "meta" in tables:
            row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            raise QuicbedError(f"{bad} (an SQLite database without quicbed's schema_version)")
        version = int(row[0]) if str(row[0]).isdigit() else -1
        if not 1 <= version <= SCHEMA_VERSION:
            raise QuicbedError(
                f"{db} has schema version {row[0]}; this quicbed reads version {SCHEMA_VERSION}"
                + (" and older" if SCHEMA_VERSION > 1 else "")
            )
    except sqlite3.DatabaseError as exc:
        con.close()
        raise QuicbedError(f"{db} is damaged (SQLite: {exc})") from None
    except QuicbedError:
        con.close()
        raise
    return con, version


def _statements(script: str) -> Iterator[str]:
    """The statements of an SQL script, one by one (executescript would commit the
    transaction a migration runs in)."""
    stmt = ""
    for line in script.splitlines(keepends=True):
        stmt += line
        if sqlite3.complete_statement(stmt):
            yield stmt
            stmt = ""
    if stmt.strip() and not stmt.strip().startswith("--"):
        raise ValueError(f"incomplete SQL statement: {stmt.strip()[:60]}")


def migrate(con: sqlite3.Connection, version: int) -> None:
    """Take an open store of schema ``version`` to SCHEMA_VERSION: every migration and
    the new version number in one transaction, so a store is never half migrated. The
    version is read again under the write lock: of two processes opening one old store,
    the second finds it migrated."""
    if version == SCHEMA_VERSION:
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        meta = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'")
        row = (
            meta.fetchone()
            and con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        )
        version = int(row[0]) if row else 0
        for n in range(version, SCHEMA_VERSION):
            for stmt in _statements(MIGRATIONS[n]):
                con.execute(stmt)
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        con.execute("INSERT OR IGNORE INTO meta VALUES ('created', ?)", (now(),))
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def table_rows(db: Path) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(table, row) for every row of every table of any SQLite file, read-only: what a
    secret scan reads (it looks at every value, whatever the schema)."""
    con = sqlite3.connect(f"{Path(db).resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for t in tables:
            for row in con.execute(f'SELECT * FROM "{t}"'):
                yield t, tuple(row)
    finally:
        con.close()


def check_metric(metric: str) -> str:
    """``metric`` if a comparison can be drawn on it (METRICS), else an error naming the
    choices: the name goes into SQL, so nothing else ever does."""
    if metric not in METRICS:
        raise QuicbedError(f"unknown metric {metric!r} (one of {', '.join(METRICS)})")
    return metric


#: the columns of each table that hold JSON; every reader gets them decoded (None if empty)
JSON_COLUMNS = {
    "cells": ("config",),
    "attempts": ("receipt", "provenance"),
    "runs": ("protocols", "detail"),
    "receipts": ("receipt",),
    "link_spans": ("opening", "closing"),
    "transfers": ("result",),
}


def _decoded(table: str, row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    for k in JSON_COLUMNS[table]:
        d[k] = json.loads(d[k]) if d[k] else None
    return d


def _attempt_row(row: sqlite3.Row) -> AttemptRow:
    return AttemptRow.model_validate(_decoded("attempts", row))


def _run_row(row: sqlite3.Row) -> RunRow:
    d = _decoded("runs", row)
    del d["run_id"]  # RunRow.run_id: it follows from the row's keys
    d["detail"] = d["detail"] or {}
    return RunRow.model_validate(d)


#: cell settings added after cells were first stored, and what a stored cell without
#: one ran: its configuration read back means what was measured (a cell stored before
#: key_exchange ran each stack's own group), and its identity stays what it was
_STORED_BEFORE = {"key_exchange": "stack"}


def stored_config(config: dict[str, Any]) -> dict[str, Any]:
    """A stored cell configuration with the settings it predates filled in as it ran."""
    return {**_STORED_BEFORE, **config}


class Store:
    """A results folder. A store of an older schema version is migrated as it is opened
    (see the module's docstring), a newer one is refused."""

    def __init__(self, root: Path, *, create: bool = False, readonly: bool = False) -> None:
        self.root = Path(root)
        db = self.root / DB_NAME
        con, version = open_db(db, create=create, readonly=readonly)
        if readonly and version != SCHEMA_VERSION:  # migrate a copy, never the file
            mem = sqlite3.connect(":memory:", isolation_level=None)
            try:
                con.backup(mem)
            finally:
                con.close()
            con = mem
        elif not readonly:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
        try:
            migrate(con, version)
            if readonly:  # the migrated copy too: a reader that writes is a bug, not a copy
                con.execute("PRAGMA query_only=ON")
        except BaseException:
            con.close()
            raise
        con.row_factory = sqlite3.Row
        self.db = con

    @classmethod
    def open_readonly(cls, root: Path) -> Store:
        """The store of ``root`` for reading only (see open_db): nothing this process
        does can change the file; an older schema is migrated in memory."""
        return cls(root, readonly=True)

    def close(self) -> None:
        self.db.close()

    def snapshot(self, dest: Path) -> None:
        """A consistent copy of the whole store as one self-contained file at ``dest``
        (rollback journal, no WAL beside it): what a replication package holds."""
        snap = sqlite3.connect(dest)
        try:
            self.db.backup(snap)
            snap.execute("PRAGMA journal_mode=DELETE")
        finally:
            snap.close()

    # --- cells and attempts -----------------------------------------------------------
    def add_cell(self, cell_id: str, config: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO cells VALUES (?, ?, ?)",
            (cell_id, json.dumps(config, sort_keys=True), now()),
        )

    def cell_config(self, cell_id: str) -> dict[str, Any]:
        row = self.db.execute("SELECT config FROM cells WHERE cell_id=?", (cell_id,)).fetchone()
        if row is None:
            raise QuicbedError(f"no cell {cell_id!r} in {self.root}")
        return stored_config(json.loads(row[0]))

    def cells(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT cell_id FROM cells ORDER BY created")]

    def cell_configs(self) -> dict[str, dict[str, Any]]:
        """cell_id -> its stored configuration, every cell, by cell ID."""
        rows = self.db.execute("SELECT cell_id, config FROM cells ORDER BY cell_id")
        return {r[0]: stored_config(json.loads(r[1])) for r in rows}

    # --- scenarios (schema 2) -----------------------------------------------------------
    def add_scenarios(self, pairs: list[tuple[str, str]]) -> None:
        """Record (cell_id, scenario) pairs of a sweep's plan; pairs already there stay."""
        with self._transaction():
            self.db.executemany("INSERT OR IGNORE INTO cell_scenarios VALUES (?, ?)", pairs)

    def scenarios(self, cell_id: str) -> list[str]:
        """The scenarios of the sweep's spec that plan ``cell_id``, in plan order; none
        for a cell measured by ``quicbed cell`` alone (or in a store older than schema 2)."""
        rows = self.db.execute(
            "SELECT scenario FROM cell_scenarios WHERE cell_id=? ORDER BY rowid", (cell_id,)
        )
        return [r[0] for r in rows]

    def cell_scenarios(self) -> dict[str, list[str]]:
        """cell_id -> its scenarios (``scenarios``), for every cell a sweep planned."""
        out: dict[str, list[str]] = {}
        for cid, sc in self.db.execute(
            "SELECT cell_id, scenario FROM cell_scenarios ORDER BY rowid"
        ):
            out.setdefault(cid, []).append(sc)
        return out

    def new_attempt(self, cell_id: str, provenance: dict[str, Any]) -> int:
        row = self.db.execute(
            "SELECT COALESCE(MAX(attempt), 0) FROM attempts WHERE cell_id=?", (cell_id,)
        ).fetchone()
        attempt = int(row[0]) + 1
        self.db.execute(
            "INSERT INTO attempts (cell_id, attempt, started, status, provenance) "
            "VALUES (?, ?, ?, 'running', ?)",
            (cell_id, attempt, now(), json.dumps(provenance, sort_keys=True)),
        )
        return attempt

    def set_receipt(self, cell_id: str, attempt: int, receipt: dict[str, Any]) -> None:
        """Keep every receipt; the attempt shows the latest."""
        self.db.execute(
            "INSERT INTO receipts VALUES (?, ?, ?, ?, ?)",
            (cell_id, attempt, now(), int(bool(receipt.get("passed"))), json.dumps(receipt)),
        )
        self.db.execute(
            "UPDATE attempts SET receipt=? WHERE cell_id=? AND attempt=?",
            (json.dumps(receipt), cell_id, attempt),
        )

    def set_versions(self, cell_id: str, attempt: int, versions: dict[str, Any]) -> None:
        """Add what the servers and the browser reported about themselves to provenance."""
        self.add_provenance(cell_id, attempt, "components", versions)

    def add_provenance(self, cell_id: str, attempt: int, key: str, value: Any) -> None:
        """Set one key of an attempt's provenance (versions, the trace level, ...)."""
        prov = self.attempt(cell_id, attempt).provenance or {}
        prov[key] = value
        self.db.execute(
            "UPDATE attempts SET provenance=? WHERE cell_id=? AND attempt=?",
            (json.dumps(prov, sort_keys=True), cell_id, attempt),
        )

    def reopen_attempt(self, cell_id: str, attempt: int) -> None:
        self.db.execute(
            "UPDATE attempts SET status='running', finished=NULL WHERE cell_id=? AND attempt=?",
            (cell_id, attempt),
        )

    def latest_attempts(self) -> dict[str, AttemptRow]:
        """cell_id -> its latest attempt row (status tells done/failed/running), decoded
        as ``attempt()`` returns it."""
        rows = self.db.execute(
            "SELECT a.* FROM attempts a JOIN (SELECT cell_id, MAX(attempt) m FROM attempts "
            "GROUP BY cell_id) l ON a.cell_id=l.cell_id AND a.attempt=l.m"
        )
        return {r["cell_id"]: _attempt_row(r) for r in rows}

    def all_attempts(self) -> list[AttemptRow]:
        """Every attempt of every cell (by cell ID, then attempt), decoded as ``attempt()``."""
        rows = self.db.execute("SELECT * FROM attempts ORDER BY cell_id, attempt")
        return [_attempt_row(r) for r in rows]

    def receipts(self) -> list[dict[str, Any]]:
        """Every receipt ever taken (also of resumed and failed attempts), decoded, by
        cell ID, attempt and time."""
        rows = self.db.execute("SELECT * FROM receipts ORDER BY cell_id, attempt, created")
        return [_decoded("receipts", r) for r in rows]

    def attempts(self, cell_id: str) -> list[AttemptRow]:
        """Every attempt of a cell, first first."""
        rows = self.db.execute(
            "SELECT * FROM attempts WHERE cell_id=? ORDER BY attempt", (cell_id,)
        )
        return [_attempt_row(r) for r in rows]

    def finish_attempt(
        self,
        cell_id: str,
        attempt: int,
        status: str,
        problem: str = "",
        *,
        reason: str | None = None,
        waited_s: float | None = None,
    ) -> None:
        """How the attempt ended: ``reason`` is a failure's code (FailureReason),
        ``waited_s`` the seconds it waited for a quiet host (added to a resumed
        attempt's)."""
        self.db.execute(
            "UPDATE attempts SET finished=?, status=?, problem=?, reason=?, "
            "waited_s=COALESCE(waited_s, 0) + ? WHERE cell_id=? AND attempt=?",
            (now(), status, problem, reason, waited_s or 0.0, cell_id, attempt),
        )

    def attempt(self, cell_id: str, attempt: int | None = None) -> AttemptRow:
        """One attempt of a cell; the latest unless given."""
        q = "SELECT * FROM attempts WHERE cell_id=? ORDER BY attempt DESC LIMIT 1"
        args: tuple[Any, ...] = (cell_id,)
        if attempt is not None:
            q, args = "SELECT * FROM attempts WHERE cell_id=? AND attempt=?", (cell_id, attempt)
        row = self.db.execute(q, args).fetchone()
        if row is None:
            raise QuicbedError(f"no attempt {attempt or 'at all'} of cell {cell_id!r}")
        return _attempt_row(row)

    def import_attempt(self, src: Store, cell_id: str, attempt: int, as_attempt: int) -> None:
        """Copy one attempt of ``src`` (its cell, rows, receipts, link spans and files)
        into this store as attempt ``as_attempt`` (``quicbed merge``). Paths inside the
        rows that name the attempt's folders follow the new number. One transaction:
        a merge that stops leaves no half attempt behind."""
        self.add_cell(cell_id, src.cell_config(cell_id))
        if self.db.execute(
            "SELECT 1 FROM attempts WHERE cell_id=? AND attempt=?", (cell_id, as_attempt)
        ).fetchone():
            raise QuicbedError(f"{self.root}: cell {cell_id} already has attempt {as_attempt}")
        old = [f"{d}/{cell_id}/{attempt}/" for d in ATTEMPT_DIRS]
        new = [f"{d}/{cell_id}/{as_attempt}/" for d in ATTEMPT_DIRS]

        def moved(text: str | None) -> str | None:
            if text is None or as_attempt == attempt:
                return text
            for a, b in zip(old, new, strict=True):
                text = text.replace(a, b)
            return text

        for d in ATTEMPT_DIRS:
            here = src.root / d / cell_id / str(attempt)
            if here.is_dir():
                shutil.copytree(here, self.root / d / cell_id / str(as_attempt), dirs_exist_ok=True)
        q = src.db.execute
        with self._transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO cell_scenarios VALUES (?, ?)",
                [(cell_id, sc) for sc in src.scenarios(cell_id)],
            )
            for table in ("attempts", "receipts", "link_spans", "runs", "transfers"):
                for r in q(
                    f"SELECT * FROM {table} WHERE cell_id=? AND attempt=?", (cell_id, attempt)
                ):
                    row = dict(r)
                    row["attempt"] = as_attempt
                    if table == "runs":
                        row["run_id"] = f"{cell_id}:{as_attempt}:{row['arm']}:{row['rep']}"
                        row["har_path"] = moved(row["har_path"])
                        row["detail"] = moved(row["detail"])
                    cols, marks = ", ".join(row), ", ".join("?" for _ in row)
                    self.db.execute(
                        f"INSERT INTO {table} ({cols}) VALUES ({marks})", tuple(row.values())
                    )

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """The block's writes all or none (BEGIN IMMEDIATE: the write lock up front)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # --- runs -------------------------------------------------------------------------
    def paths(self, cell_id: str, attempt: int) -> tuple[Path, Path]:
        """(HAR folder, log folder) of an attempt, created on demand."""
        har = self.root / "hars" / cell_id / str(attempt)
        logs = self.root / "logs" / cell_id / str(attempt)
        har.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        return har, logs

    def add_run(self, run: RunRow, har: dict[str, Any] | None) -> RunRow:
        """Write the HAR (gzip), then commit the row: a row never points at a missing HAR.
        Returns the row as stored (its HAR path and start time filled in)."""
        fill: dict[str, Any] = {}
        if har is not None:
            hdir, _ = self.paths(run.cell_id, run.attempt)
            path = hdir / f"{run.arm}-{run.rep:03d}.har.gz"
            tmp = path.with_suffix(".tmp")
            with gzip.open(tmp, "wt") as f:
                json.dump(har, f)
            tmp.replace(path)
            fill["har_path"] = str(path.relative_to(self.root))
        if not run.started:
            fill["started"] = now()
        run = run.model_copy(update=fill)
        row = run.model_dump()
        for k in JSON_COLUMNS["runs"]:
            row[k] = None if row[k] is None else json.dumps(row[k])
        row["run_id"] = run.run_id
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.db.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", tuple(row.values()))
        return run

    def runs(self, cell_id: str, attempt: int | None = None) -> list[RunRow]:
        if attempt is None:
            attempt = self.attempt(cell_id).attempt
        rows = self.db.execute(
            "SELECT * FROM runs WHERE cell_id=? AND attempt=? ORDER BY seq", (cell_id, attempt)
        )
        return [_run_row(r) for r in rows]

    def all_runs(self) -> list[RunRow]:
        """Every stored load of every attempt, by run ID, decoded as ``runs()``."""
        return [_run_row(r) for r in self.db.execute("SELECT * FROM runs ORDER BY run_id")]

    def update_run_detail(self, run_id: str, patch: dict[str, Any]) -> None:
        """Merge keys into a stored run's ``detail`` (its traces, once they are complete).

        Only ``detail`` ever changes after a run is stored: its measured values never do.
        """
        row = self.db.execute("SELECT detail FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise QuicbedError(f"no run {run_id!r} in {self.root}")
        detail = json.loads(row[0]) if row[0] else {}
        detail.update(patch)
        self.db.execute("UPDATE runs SET detail=? WHERE run_id=?", (json.dumps(detail), run_id))

    def plts(self, cell_id: str, attempt: int, arm: str) -> list[float]:
        """PLTs of the valid, non-warm-up runs of one arm: the only input to statistics."""
        return self.values(cell_id, attempt, arm, DEFAULT_METRIC)

    def values(self, cell_id: str, attempt: int, arm: str, metric: str) -> list[float]:
        """``metric`` (one of METRICS) of the valid, non-warm-up runs of one arm that have
        it, by repetition: the input to statistics. A load without the figure (NULL: an
        LCP not measured) is left out, so a sample may be smaller than the valid runs."""
        check_metric(metric)
        rows = self.db.execute(
            f"SELECT {metric} FROM runs WHERE cell_id=? AND attempt=? AND arm=? AND valid=1 "
            f"AND warmup=0 AND {metric} IS NOT NULL ORDER BY rep",
            (cell_id, attempt, arm),
        )
        return [float(r[0]) for r in rows]

    # --- link proof -------------------------------------------------------------------
    def add_link_span(self, span: dict[str, Any]) -> None:
        """One receipt's share of an attempt: the loads it covers and the checks around them."""
        row = dict(span)
        for k in ("opening", "closing"):
            if row.get(k) is not None and not isinstance(row[k], str):
                row[k] = json.dumps(row[k])
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        self.db.execute(f"INSERT INTO link_spans ({cols}) VALUES ({marks})", tuple(row.values()))

    def link_spans(self, cell_id: str, attempt: int) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT * FROM link_spans WHERE cell_id=? AND attempt=? ORDER BY started",
            (cell_id, attempt),
        )
        return [_decoded("link_spans", r) for r in rows]

    def set_transfer(self, cell_id: str, attempt: int, kind: str, result: dict[str, Any]) -> None:
        """A transfer cell's record of one attempt (quicbed.run.bulk's BulkResult or
        CompeteResult as JSON): what the report, verify and package reruns read."""
        self.db.execute(
            "INSERT OR REPLACE INTO transfers VALUES (?, ?, ?, ?, ?)",
            (cell_id, attempt, kind, now(), json.dumps(result)),
        )

    def transfer(self, cell_id: str, attempt: int) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT * FROM transfers WHERE cell_id=? AND attempt=?", (cell_id, attempt)
        ).fetchone()
        return None if row is None else _decoded("transfers", row)
