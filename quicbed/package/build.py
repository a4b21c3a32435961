"""Replication packages: one archive with which a reviewer verifies, regenerates, reruns.

Layout (format 1), under one top folder named after the archive::

    MANIFEST.json   format, created, quicbed version and git state, counts, what was
                    left out and why, notes, and size + SHA-256 of every other file
    SHA256SUMS      the same checksums for ``sha256sum -c`` (no quicbed needed)
    README.md       generated: contents, how to verify, regenerate each figure, rerun
                    each cell
    results/        a quicbed results folder: sweep.json, store.sqlite (a consistent
                    snapshot), hars/ (gzipped, unless --no-har), logs/ (server
                    connection logs, browser logs), link-traces/ (the traces of
                    the varying links its cells ran on), pages/ (the replay
                    archives its cells replayed), traces/ (only with --traces:
                    per-load captures, qlog, TCP samples, NetLogs; TLS key logs
                    only with --keys as well)
    report/         the report rebuilt from results/: index.html, table.csv,
                    figures.json, figures/*.png and *.svg
    data/           runs.csv, runs.parquet (one row per load), receipts.json (every
                    fidelity receipt), cells.json (cell configurations, attempts)
    provenance/     runs.json (software, machine, sysctls, offloads, testbed, as
                    recorded with the runs), package.json (what built the package)
    repo/           profile.py, playbooks/, roles/, workloads/, sweeps/ and the pin
                    files (requirements.txt, go.mod/go.sum, the driver's lock file),
                    as committed at the git SHA the runs recorded

Everything derived (report/, data/) is rebuilt at package time from the snapshot in
results/, so the package is consistent even if DIR/report is stale, and ``quicbed
verify`` can rebuild it again and compare. Nothing leaves the machine before a
secret scan (``quicbed.package.secretscan``) has passed; an existing archive is never
overwritten unless asked.

Format history (``MANIFEST.json`` ``format``; a newer one is refused by name):
  1 (quicbed 0.1.0): first version.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quicbed import __version__
from quicbed.errors import QuicbedError
from quicbed.model import capacity
from quicbed.package.secretscan import KEYLOG_RULES, Finding, scan_tree, user_needles
from quicbed.paths import REPO_ROOT, sha256_file
from quicbed.replay import pagestore
from quicbed.results import provenance
from quicbed.results.folder import SWEEP_FILE, is_running, read_sweep
from quicbed.results.store import ATTEMPT_DIRS, DB_NAME, Store
from quicbed.tarsafe import safe_extract

PACKAGE_FORMAT = 1
KIND = "quicbed replication package"
MANIFEST = "MANIFEST.json"
SUMS = "SHA256SUMS"
SUFFIX = ".tar.gz"
#: the parts of the repository that say how the testbed was built and what was swept,
#: and quicbed's own Go module (the emulator, the bulk client, the quic-go server); each
#: stack and browser adds the files that pin its own build (repo_paths)
REPO_PATHS = (
    "profile.py",
    "playbooks",
    "roles",
    "workloads",
    "sweeps",
    "scripts",
    "requirements.txt",
    "pyproject.toml",
    "go/go.mod",
    "go/go.sum",
    "go/patches",
)


def repo_paths() -> tuple[str, ...]:
    """REPO_PATHS and every stack's and browser's ``source_files``: a new stack's lock
    file travels in packages without this module naming it. The registries are imported
    here, not at the top: ``quicbed verify`` imports this module and none of the runner
    (tests/test_layering.py)."""
    from quicbed.client import browsers
    from quicbed.servers import stacks

    own = [f for c in stacks().values() for f in c.source_files]
    own += [f for c in browsers().values() for f in c.source_files]
    return (*REPO_PATHS, *dict.fromkeys(own))


#: Python packages whose versions decide the bytes of regenerated figures and numbers
DRAWN_WITH = ("matplotlib", "numpy", "scipy", "pyarrow")
#: where level ``full`` puts an arm's TLS key log, relative to the attempt's traces folder
KEYLOG_SUFFIX = "-keys.log"


@dataclass
class PackageResult:
    path: Path
    size: int
    sha256: str
    files: int
    counts: dict[str, int]
    notes: list[str] = field(default_factory=list)


def _stem(dest: Path) -> str:
    return dest.name[: -len(SUFFIX)]


def default_output(src: Path) -> Path:
    return src.resolve().with_name(src.resolve().name + SUFFIX)


def check_source(src: Path) -> None:
    """A finished quicbed results folder, or an error naming what is wrong with it."""
    if not src.exists():
        raise QuicbedError(f"{src}: no such folder")
    if not src.is_dir():
        raise QuicbedError(f"{src} is not a folder (give the results folder of a sweep)")
    if not (src / DB_NAME).exists():
        raise QuicbedError(f"{src} is not a quicbed results folder ({DB_NAME} missing)")
    if is_running(src):
        raise QuicbedError(
            f"{src}: a sweep is still running into it (its sweep.lock is held); package it "
            "when the sweep has finished"
        )


def drawn_with() -> dict[str, str | None]:
    pkgs = provenance.python_packages()
    lower = {k.lower(): v for k, v in pkgs.items()}
    return {name: lower.get(name) for name in DRAWN_WITH}


# --- building ---------------------------------------------------------------------------
def build_package(
    src: Path,
    dest: Path | None = None,
    *,
    no_har: bool = False,
    traces: bool = False,
    keys: bool = False,
    replace: bool = False,
    home: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> PackageResult:
    """Package the results folder ``src`` into ``dest`` (default ``src.tar.gz``).

    ``traces`` includes ``DIR/traces`` (per-load transport traces) but never a TLS
    key log; ``keys`` (only with ``traces``) includes the arms' key logs too: they
    decrypt every captured connection, so publishing them must be asked for by name.
    ``home`` and ``environ`` are where the secret scan looks for the user's own keys
    and tokens (default: the real ones).
    """
    if keys and not traces:
        raise QuicbedError("--keys includes the TLS key logs of the traces: give --traces too")
    src = Path(src)
    check_source(src)
    src = src.resolve()
    dest = Path(dest).resolve() if dest else default_output(src)
    if not dest.name.endswith(SUFFIX) or dest.name == SUFFIX:
        raise QuicbedError(f"-o: {dest.name!r} must be a file name ending in {SUFFIX}")
    if not dest.parent.is_dir():
        raise QuicbedError(f"-o: folder {dest.parent} does not exist")
    if dest.exists() and not replace:
        raise QuicbedError(f"{dest} exists; pass --replace to overwrite it")
    created = datetime.now(UTC).replace(microsecond=0)
    needles = user_needles(home, environ)
    with tempfile.TemporaryDirectory(prefix="quicbed-package-") as tmp:
        top = Path(tmp) / _stem(dest)
        results = top / "results"
        counts, notes, left_out = snapshot_results(src, results, no_har=no_har)
        asked: dict[str, frozenset[str]] = {}
        if traces:
            asked = copy_traces(src, results, keys=keys, counts=counts, left_out=left_out)
        elif (src / "traces").is_dir():
            left_out.append({"path": "results/traces", "why": "not asked for (--traces)"})
        notes += copy_repo(top / "repo", recorded_shas(results))
        _refuse_secrets(top, src, needles, ["results", "repo"], allow=asked)
        notes += build_derived(top, dest.name, src)
        write_provenance(top / "provenance", results, created)
        write_readme(top, dest.name, counts, no_har)
        _refuse_secrets(top, src, needles, ["report", "data", "provenance", "README.md"])
        manifest = write_manifest(top, dest.name, src.name, created, counts, left_out, notes)
        write_archive(top, dest, int(created.timestamp()))
    return PackageResult(
        dest, dest.stat().st_size, sha256_file(dest), len(manifest["files"]) + 1, counts, notes
    )


def snapshot_results(
    src: Path, dst: Path, *, no_har: bool
) -> tuple[dict[str, int], list[str], list[dict[str, Any]]]:
    """Copy the runs: a consistent SQLite snapshot, then exactly the HARs and logs of
    the attempts in it (a sweep or cell writing meanwhile cannot make them disagree)."""
    dst.mkdir(parents=True)
    # read-only: packaging never changes the folder (an older schema is migrated in the
    # copy only); a newer schema or a damaged store is refused
    store = Store.open_readonly(src)
    try:
        store.snapshot(dst / DB_NAME)
    finally:
        store.close()
    if (src / SWEEP_FILE).exists():
        shutil.copyfile(src / SWEEP_FILE, dst / SWEEP_FILE)
    store = Store.open_readonly(dst)
    try:
        attempts = [(a.cell_id, a.attempt, a.status) for a in store.all_attempts()]
        runs = store.all_runs()
        hars = [r.har_path for r in runs if r.har_path is not None]
        n_runs, n_cells = len(runs), len(store.cells())
        configs = list(store.cell_configs().values())
        conds = [cfg.get("condition") or {} for cfg in configs]
    finally:
        store.close()
    used = {
        c["trace"]: c["trace_sha256"] for c in conds if c.get("trace") and c.get("trace_sha256")
    }
    notes: list[str] = []
    left_out: list[dict[str, Any]] = []
    unfinished = [f"{c}:{a}" for c, a, s in attempts if s == "running"]
    if unfinished:
        notes.append(
            f"attempts interrupted before they finished (their stored loads are "
            f"included): {', '.join(unfinished)}"
        )
    copied = missing = 0
    if no_har:
        left_out.append({"path": "results/hars", "why": "--no-har", "count": len(hars)})
    else:
        for rel in hars:
            parts = Path(rel).parts
            if parts[:1] != ("hars",) or ".." in parts:
                raise QuicbedError(f"{src / DB_NAME}: a run points at {rel!r}, outside hars/")
            if _copy_regular(src / rel, dst / rel):
                copied += 1
            else:
                missing += 1
        if missing:
            notes.append(f"{missing} runs point at a HAR that is not in {src.name}/hars")
    n_logs = n_frames = skipped = 0
    for cid, att, _ in attempts:
        # the servers' and browsers' logs, and a visual cell's frames (the pictures its
        # Speed Index was scored from: quicbed.client.visual)
        for top in ("logs", "visual"):
            folder = src / top / cid / str(att)
            for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
                if p.is_dir():
                    continue
                if not _copy_regular(p, dst / p.relative_to(src)):
                    skipped += 1
                elif top == "logs":
                    n_logs += 1
                else:
                    n_frames += 1
    if skipped:
        notes.append(
            f"{skipped} entries of logs/ or visual/ that are not regular files were left out"
        )
    if used:  # the varying links' traces, so a rerun runs on them (quicbed.model.capacity)
        for why in capacity.carry(used, dst / capacity.CARRIED):
            left_out.append({"path": f"results/{capacity.CARRIED}", "why": why})
    pages = pagestore.replayed(configs)
    if pages:  # the replayed pages' archives, so a rerun replays them (quicbed.replay)
        for why in pagestore.carry(pages, dst / pagestore.CARRIED):
            left_out.append({"path": f"results/{pagestore.CARRIED}", "why": why})
    known = {DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", SWEEP_FILE, *ATTEMPT_DIRS}
    others = sorted(
        p.name + ("/" if p.is_dir() else "") for p in src.iterdir() if p.name not in known
    )
    if others:
        left_out.append(
            {
                "path": ", ".join(others),
                "why": "not part of the runs: the report "
                "and exports are rebuilt, the lock is transient",
            }
        )
    counts = {
        "cells": n_cells,
        "attempts": len(attempts),
        "runs": n_runs,
        "hars": copied,
        "logs": n_logs,
        "frames": n_frames,
    }
    return counts, notes, left_out


def copy_traces(
    src: Path, dst: Path, *, keys: bool, counts: dict[str, int], left_out: list[dict[str, Any]]
) -> dict[str, frozenset[str]]:
    """Copy ``traces/`` of the attempts in the snapshot; key logs only with ``keys``.

    Returns the secret scan's excuses: exactly the key logs copied on request (at
    ``traces/<cell>/<attempt>/<arm>-keys.log``), which may break the key-log rules;
    anything else that looks like a key log still stops the package.
    """
    store = Store.open_readonly(dst)
    try:
        attempts = [(a.cell_id, a.attempt) for a in store.all_attempts()]
    finally:
        store.close()
    n_files = n_keys = n_left = 0
    allow: dict[str, frozenset[str]] = {}
    for cid, att in sorted(attempts):
        base = src / "traces" / cid / str(att)
        for p in sorted(base.rglob("*")) if base.is_dir() else []:
            if p.is_dir():
                continue
            rel = p.relative_to(src)
            is_keylog = p.parent == base and p.name.endswith(KEYLOG_SUFFIX)
            if is_keylog and not keys:
                n_left += 1
                continue
            if _copy_regular(p, dst / rel):
                n_files += 1
                if is_keylog:
                    n_keys += 1
                    allow[f"results/{rel.as_posix()}"] = KEYLOG_RULES
    counts["traces"] = n_files
    counts["keys"] = n_keys
    if n_left:
        left_out.append(
            {
                "path": f"results/traces/*/*/*{KEYLOG_SUFFIX}",
                "count": n_left,
                "why": "TLS key logs are secrets (they decrypt the captures); --keys includes them",
            }
        )
    return allow


def _copy_regular(src: Path, dst: Path) -> bool:
    """Copy a regular file (never through a symlink: it could point anywhere)."""
    if src.is_symlink() or not src.is_file():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return True


def _refuse_secrets(
    top: Path,
    src: Path,
    needles: list[Any],
    parts: list[str],
    allow: Mapping[str, frozenset[str]] | None = None,
) -> None:
    """Stop before anything is written if any file of ``parts`` breaks a secret rule
    (``allow``: the rules excused per file); the error names the file where the user
    can remove it."""
    findings = scan_tree(top, needles, parts, allow)
    if not findings:
        return

    def where(f: Finding) -> tuple[int, str]:
        head, _, rest = f.path.partition("/")
        if head == "results":
            return 0, str(src / rest)
        if head == "repo":
            return 1, f"{REPO_ROOT / rest} (the repository copy)"
        return 2, f"{f.path} (derived from the results)"

    ranked = sorted(findings, key=lambda f: where(f)[0])
    first = ranked[0]
    more = f" (and {len(ranked) - 1} more)" if len(ranked) > 1 else ""
    raise QuicbedError(
        f"refusing to package: {where(first)[1]}: {first.rule}{more}; remove it and package "
        "again (nothing was written)"
    )


def recorded_shas(results: Path) -> list[tuple[str | None, bool]]:
    """(git SHA, dirty) of every attempt, oldest first, as recorded with the runs."""
    store = Store.open_readonly(results)
    try:
        attempts = sorted(store.all_attempts(), key=lambda a: a.started)
    finally:
        store.close()
    out = []
    for a in attempts:
        git = (a.provenance or {}).get("git") or {}
        out.append((git.get("sha"), bool(git.get("dirty"))))
    return out


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, timeout=60, check=False
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return subprocess.CompletedProcess(args, 1, b"", b"")


def copy_repo(dest: Path, recorded: list[tuple[str | None, bool]]) -> list[str]:
    """The profile, roles, workloads and sweeps as they were used: from git at the SHA
    the runs recorded (whatever the checkout holds now), else as they are, with a note."""
    dest.mkdir(parents=True)
    shas = list(dict.fromkeys(s for s, _ in recorded if s))
    notes = []
    if len(shas) > 1:
        notes.append(
            f"the runs recorded {len(shas)} git SHAs ({', '.join(s[:12] for s in shas)})"
            f"; repo/ is as of the latest, {shas[-1][:12]}"
        )
    sha = shas[-1] if shas else None
    paths = repo_paths()
    if sha and _git("cat-file", "-e", f"{sha}^{{commit}}").returncode == 0:
        present = _git("ls-tree", "--name-only", sha, "--", *paths).stdout.decode().split()
        tar = _git("archive", "--format=tar", sha, "--", *present)
        if tar.returncode == 0:
            with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
                safe_extract(t, dest, what=f"git archive {sha[:12]}")
            if any(dirty for _, dirty in recorded):
                notes.append(
                    "some runs were made from a checkout with uncommitted changes; "
                    f"repo/ holds what was committed at {sha[:12]}"
                )
            return notes
    why = f"git SHA {sha[:12]} is not in this checkout" if sha else "the runs recorded no git SHA"
    for rel in paths:
        p = REPO_ROOT / rel
        if p.is_dir():
            junk = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
            shutil.copytree(p, dest / rel, symlinks=False, ignore=junk)
        elif p.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest / rel)
    notes.append(
        f"{why}: repo/ is a copy of the working tree at package time and may differ "
        "from what the runs used"
    )
    return notes


def derived_data(results: Path) -> dict[str, Any]:
    """data/receipts.json and data/cells.json: the store's receipts and cells as JSON,
    for readers without SQLite. A pure function of the store (verify rebuilds them)."""
    store = Store.open_readonly(results)
    try:
        receipts = store.receipts()
        cells: dict[str, Any] = {
            cid: {"config": cfg, "attempts": []} for cid, cfg in store.cell_configs().items()
        }
        for a in store.all_attempts():
            cells[a.cell_id]["attempts"].append(
                a.model_dump(include={"attempt", "started", "finished", "status", "problem"})
            )
        for cid, scenarios in store.cell_scenarios().items():
            if cid in cells:  # only with a sweep's store: older packages' files stay equal
                cells[cid]["scenarios"] = scenarios
    finally:
        store.close()
    return {"receipts.json": receipts, "cells.json": cells}


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True) + "\n"


def build_derived(top: Path, archive_name: str, src: Path) -> list[str]:
    """report/ and data/, from results/ only."""
    from quicbed.report.build import build
    from quicbed.results.export import export

    results = top / "results"
    build(results, out=top / "report", source=archive_name)
    data = top / "data"
    data.mkdir()
    for fmt in ("csv", "parquet"):
        export(results, fmt, data / f"runs.{fmt}", source=archive_name)
    for name, obj in derived_data(results).items():
        (data / name).write_text(dump_json(obj))
    old = src / "report" / "table.csv"
    if old.exists() and old.read_bytes() != (top / "report" / "table.csv").read_bytes():
        return [f"{src.name}/report was older than the runs; report/ here is rebuilt from them"]
    return []


# --- provenance -----------------------------------------------------------------------
#: keys that differ between attempts without saying anything about the software
_PER_START = ("pid", "ts")


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in _PER_START}
    return value


def _distinct(items: list[tuple[str, Any]], total: int) -> list[dict[str, Any]] | None:
    """Group equal values: [{value, attempts}], attempts "all" when every one agrees
    (process IDs and start times of servers are left out: they always differ)."""
    groups: dict[str, dict[str, Any]] = {}
    for who, raw in items:
        if raw is None:
            continue
        value = _stable(raw)
        key = json.dumps(value, sort_keys=True)
        groups.setdefault(key, {"value": value, "attempts": []})["attempts"].append(who)
    if not groups:
        return None
    out = list(groups.values())
    for g in out:
        if len(g["attempts"]) == total:
            g["attempts"] = "all"
    return out


def write_provenance(dest: Path, results: Path, created: datetime) -> None:
    """provenance/runs.json: what ran, grouped from every attempt's record and receipt;
    gaps (things older runs did not record) are named, not guessed."""
    dest.mkdir(parents=True)
    store = Store.open_readonly(results)
    try:
        rows = store.all_attempts()
    finally:
        store.close()
    total = len(rows)
    fields: dict[str, list[tuple[str, Any]]] = {}
    for a in rows:
        who = f"{a.cell_id}:{a.attempt}"
        p = a.provenance or {}
        r = a.receipt or {}
        tuning = dict(r.get("tuning") or {})
        shaper = r.get("shaper") or {}
        for key, value in (
            ("quicbed", (p.get("software") or {}).get("quicbed")),
            ("git", p.get("git")),
            ("software", p.get("software")),
            ("components", p.get("components")),
            ("machine", p.get("machine")),
            ("host_sysctls", p.get("sysctls")),
            ("python_packages", p.get("python_packages")),
            ("testbed", r.get("testbed")),
            ("nic_offloads", tuning.pop("offloads", None)),
            ("testbed_sysctls", tuning or None),
            ("shaper", {k: shaper[k] for k in ("shaper", "emulator") if k in shaper} or None),
        ):
            fields.setdefault(key, []).append((who, value))
    recorded = {k: _distinct(v, total) for k, v in fields.items()}
    gaps = {
        "python_packages": "not recorded with these runs; package.json lists the packages of "
        "the machine that built this package, and repo/requirements.txt the pins",
        "host_sysctls": "not recorded with these runs; testbed_sysctls (from the receipts) "
        "has the buffers and congestion control set in the testbed",
        "nic_offloads": "not recorded with these runs; the local testbed refuses to run unless "
        "TSO, GSO and GRO are off on every veth end (LocalTestbed.check_offloads)",
        "testbed": "no receipt recorded the testbed",
    }
    body = {
        "attempts": total,
        "recorded": {k: v for k, v in recorded.items() if v is not None},
        "gaps": {
            k: gaps.get(k, "not recorded with these runs") for k, v in recorded.items() if v is None
        },
        "note": "values as recorded with each attempt ('all': every attempt agrees); "
        "'testbed_sysctls' and 'nic_offloads' come from the fidelity receipts",
    }
    (dest / "runs.json").write_text(dump_json(body))
    machine = provenance.machine()
    package = {
        "created": created.isoformat(),
        "quicbed": __version__,
        "git": provenance.git_state(),
        "python_packages": provenance.python_packages(),
        "machine": {k: machine[k] for k in ("kernel", "os", "cpu", "cores")},
    }
    (dest / "package.json").write_text(dump_json(package))


# --- README, manifest, archive ----------------------------------------------------------
def write_readme(top: Path, archive: str, counts: dict[str, int], no_har: bool) -> None:
    from quicbed.package.readme import readme

    (top / "README.md").write_text(readme(top, archive, counts, no_har))


def _walk(top: Path) -> list[str]:
    return sorted(p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file())


def write_manifest(
    top: Path,
    archive: str,
    source: str,
    created: datetime,
    counts: dict[str, int],
    left_out: list[dict[str, Any]],
    notes: list[str],
) -> dict[str, Any]:
    """SHA256SUMS first (it lists every other file), then MANIFEST.json (lists it too)."""
    files = {
        rel: {"size": (top / rel).stat().st_size, "sha256": sha256_file(top / rel)}
        for rel in _walk(top)
    }
    (top / SUMS).write_text("".join(f"{v['sha256']}  {k}\n" for k, v in files.items()))
    files[SUMS] = {"size": (top / SUMS).stat().st_size, "sha256": sha256_file(top / SUMS)}
    sweep = None
    if (top / "results" / SWEEP_FILE).exists():
        held = read_sweep(top / "results")
        sweep = {"name": held["spec"]["name"], "digest": held["digest"]}
    manifest = {
        "format": PACKAGE_FORMAT,
        "kind": KIND,
        "created": created.isoformat(),
        "quicbed": {"version": __version__, "git": provenance.git_state()},
        "archive": archive,
        "source": source,
        "sweep": sweep,
        "counts": counts,
        "left_out": left_out,
        "notes": notes,
        "drawn_with": drawn_with(),
        "files": dict(sorted(files.items())),
    }
    (top / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def write_archive(top: Path, dest: Path, mtime: int) -> None:
    """A normalised tar.gz (sorted, owner root, fixed modes and times), written beside
    ``dest`` and renamed into place: a crash never leaves half an archive under its name."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        paths = [top, *sorted(top.rglob("*"), key=lambda p: p.relative_to(top).as_posix())]
        with (
            open(tmp, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime, compresslevel=9) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for p in paths:
                info = tar.gettarinfo(p, arcname=p.relative_to(top.parent).as_posix())
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = mtime
                info.mode = 0o755 if p.is_dir() else 0o644
                if p.is_dir():
                    tar.addfile(info)
                else:
                    with open(p, "rb") as f:
                        tar.addfile(info, f)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


# --- reading --------------------------------------------------------------------------
def check_manifest(manifest: Any, archive: Path) -> dict[str, Any]:
    """The manifest's format is one this quicbed reads, and its file list is well formed."""
    if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
        raise QuicbedError(f"{archive}: {MANIFEST} is not the manifest of a quicbed package")
    fmt = manifest.get("format")
    if not isinstance(fmt, int) or fmt < 1:
        raise QuicbedError(f"{archive}: {MANIFEST} has no valid format (got {fmt!r})")
    if fmt > PACKAGE_FORMAT:
        made = (manifest.get("quicbed") or {}).get("version", "a newer version")
        raise QuicbedError(
            f"{archive} is package format {fmt}, newer than this quicbed reads "
            f"({PACKAGE_FORMAT}); update quicbed (the package was made by quicbed {made})"
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("size"), int) and isinstance(v.get("sha256"), str)
        for v in files.values()
    ):
        raise QuicbedError(f"{archive}: {MANIFEST} has no valid file list")
    return manifest


def open_package(archive: Path, work: Path) -> tuple[Path, dict[str, Any]]:
    """Read the manifest first (a newer format is refused before anything else), then
    extract the package safely (regular files and folders only) below ``work``."""
    archive = Path(archive)
    if archive.is_dir():
        raise QuicbedError(f"{archive} is a folder; give the package file ({SUFFIX})")
    if not archive.is_file():
        raise QuicbedError(f"{archive}: no such file")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            tops = {m.name.split("/", 1)[0] for m in members}
            if len(tops) != 1:
                raise QuicbedError(f"{archive} is not a quicbed package (one top folder expected)")
            top = tops.pop()
            try:
                raw = tar.extractfile(f"{top}/{MANIFEST}")
            except KeyError:
                raise QuicbedError(f"{archive} is not a quicbed package (no {MANIFEST})") from None
            try:
                manifest = json.loads(raw.read() if raw else b"")
            except ValueError:
                raise QuicbedError(f"{archive}: {MANIFEST} is not JSON") from None
            check_manifest(manifest, archive)
            safe_extract(tar, Path(work), what=str(archive))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise QuicbedError(f"{archive} is not a readable {SUFFIX} (damaged? {exc})") from None
    return Path(work) / top, manifest


def check_files(top: Path, manifest: dict[str, Any]) -> tuple[int, list[str]]:
    """(files that match, one line per file that is missing, changed or not listed)."""
    listed: dict[str, dict[str, Any]] = manifest["files"]
    present = set(_walk(top)) - {MANIFEST}
    problems, ok = [], 0
    for rel, want in listed.items():
        if rel not in present:
            problems.append(f"{rel}: missing (listed in {MANIFEST})")
            continue
        size, digest = (top / rel).stat().st_size, sha256_file(top / rel)
        if size != want["size"] or digest != want["sha256"]:
            problems.append(
                f"{rel}: changed (SHA-256 {digest[:16]}..., size {size}; "
                f"{MANIFEST} says {want['sha256'][:16]}..., size {want['size']})"
            )
        else:
            ok += 1
    for rel in sorted(present - set(listed)):
        problems.append(f"{rel}: not listed in {MANIFEST} (added after packaging)")
    return ok, problems
