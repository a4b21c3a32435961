"""Verify a replication package on any machine: no root, no browser, no testbed.

Three layers, each reported by name:

1. **Bytes**: every file against ``MANIFEST.json`` (size and SHA-256); a missing,
   changed or unlisted file is named.
2. **Numbers**: the report (``table.csv``), the exports (``runs.csv``,
   ``runs.parquet``, ``receipts.json``, ``cells.json``) are rebuilt from
   ``results/`` alone and compared value by value with the packaged ones; each
   load's PLT, objects, bytes and protocols are recomputed from its HAR and compared
   with the store. Numbers compare equal up to 1e-9 relative: floating-point noise
   from another numpy/scipy build is not a difference, any real change is.
3. **Figures**: every heatmap is redrawn. What each cell shows (number, text,
   colour, significance: ``figures.json``) must be equal; the SVG and PNG files
   must also be byte-equal when this machine has the matplotlib that drew them
   (quicbed draws deterministically), else the bytes are not compared and the
   report says so: another matplotlib lays out glyphs differently, which is not a
   difference in the science.

``index.html`` is rebuilt but not compared byte for byte: it carries its build time.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.package.build import (
    DRAWN_WITH,
    check_files,
    derived_data,
    drawn_with,
    dump_json,
    open_package,
)
from quicbed.results.store import DB_NAME, Store

REL_TOL = 1e-9
ABS_TOL = 1e-9
#: differences listed per file before "and N more"
SHOW = 5
#: run columns that a HAR determines
HAR_FIELDS = ("plt_ms", "onload_ms", "dns_ms", "objects", "bytes", "protocols")


@dataclass
class VerifyResult:
    archive: Path
    manifest: dict[str, Any]
    checked: list[str] = field(default_factory=list)  # what matched, one line each
    problems: list[str] = field(default_factory=list)  # what differs, one line each
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def same(a: Any, b: Any) -> bool:
    """Equal, numbers up to floating-point noise (also when they come as CSV text)."""
    if a == b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return False
    return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def json_diff(a: Any, b: Any, where: str = "") -> list[str]:
    """Where two JSON values differ: 'path: packaged X, recomputed Y'."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only {'recomputed' if k not in a else 'packaged'}")
            else:
                out += json_diff(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} entries packaged, {len(b)} recomputed"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in json_diff(x, y, f"{where}[{i}]")
        ]
    return [] if same(a, b) else [f"{where or '.'}: packaged {a!r}, recomputed {b!r}"]


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        return list(r.fieldnames or []), list(r)


def csv_diff(packaged: Path, recomputed: Path, key: tuple[str, ...]) -> list[str]:
    """Row by row (matched on ``key``), column by column. Columns a newer quicbed appends
    (the packaged columns are a prefix of the recomputed ones) are not the package's
    claims: its own columns are compared."""
    cols_a, rows_a = _read_csv(packaged)
    cols_b, rows_b = _read_csv(recomputed)
    if cols_b[: len(cols_a)] != cols_a:
        return [f"columns differ: packaged {cols_a}, recomputed {cols_b}"]
    a = {tuple(r[k] for k in key): r for r in rows_a}
    b = {tuple(r[k] for k in key): r for r in rows_b}
    out = [
        f"row {':'.join(k)}: only {'packaged' if k in a else 'recomputed'}"
        for k in sorted(set(a) ^ set(b))
    ]
    for k in sorted(set(a) & set(b)):
        for col in cols_a:
            if not same(a[k][col], b[k][col]):
                out.append(
                    f"row {':'.join(k)} {col}: packaged {a[k][col]!r}, recomputed {b[k][col]!r}"
                )
    return out


def _add(res: VerifyResult, label: str, diffs: list[str], ok_text: str) -> None:
    if diffs:
        more = f" (and {len(diffs) - SHOW} more)" if len(diffs) > SHOW else ""
        res.problems += [f"{label}: {d}" for d in diffs[:SHOW]]
        if more:
            res.problems[-1] += more
    else:
        res.checked.append(ok_text)


def verify(archive: Path) -> VerifyResult:
    """Check, recompute and compare; the result lists what matched and what differs."""
    archive = Path(archive)
    with tempfile.TemporaryDirectory(prefix="quicbed-verify-") as tmp:
        top, manifest = open_package(archive, Path(tmp) / "pkg")
        res = VerifyResult(archive, manifest)
        n_ok, problems = check_files(top, manifest)
        if problems:
            res.problems += problems
        else:
            res.checked.append(f"checksums: all {n_ok} files match MANIFEST.json")
        for item in manifest.get("left_out", []):
            res.notes.append(f"left out at packaging: {item['path']} ({item['why']})")
        try:
            _recompute(res, top, Path(tmp) / "again")
        except Exception as exc:  # a damaged store must be reported, not crash verify
            res.problems.append(f"results/: statistics could not be recomputed ({exc})")
    return res


def _recompute(res: VerifyResult, top: Path, again: Path) -> None:
    # here, not at the top: the report reads arms through the stacks' registry, and
    # importing verify must load none of the runner (tests/test_layering.py)
    from quicbed.report.build import build
    from quicbed.report.transfers import FILE as TRANSFERS
    from quicbed.results.export import export

    results = top / "results"
    if not (results / DB_NAME).exists():
        raise FileNotFoundError(f"no {DB_NAME}")
    again.mkdir()
    report = build(results, out=again / "report", source=res.manifest.get("archive"))
    n_cells = len({r.cell_id for r in report.rows})
    table = csv_diff(
        top / "report" / "table.csv", again / "report" / "table.csv", ("cell_id", "pair")
    )
    _add(
        res,
        "report/table.csv",
        table,
        f"statistics: {n_cells} cells recomputed from results/, equal to report/table.csv",
    )
    if report.transfers.cells or (top / "report" / TRANSFERS).exists():
        n = len(report.transfers.cells)
        _add(
            res,
            f"report/{TRANSFERS}",
            csv_diff(top / "report" / TRANSFERS, again / "report" / TRANSFERS, ("cell_id", "arm")),
            f"statistics: {n} transfer cells recomputed from results/, equal to report/{TRANSFERS}",
        )
    for fmt in ("csv", "parquet"):
        export(results, fmt, again / f"runs.{fmt}")
    _add(
        res,
        "data/runs.csv",
        csv_diff(
            top / "data" / "runs.csv", again / "runs.csv", ("cell_id", "attempt", "arm", "rep")
        ),
        "exports: data/runs.csv equal to the store",
    )
    _compare_parquet(res, top / "data" / "runs.parquet", again / "runs.parquet")
    for name, obj in derived_data(results).items():
        packaged = json.loads((top / "data" / name).read_text())
        recomputed = json.loads(dump_json(obj))
        _add(
            res,
            f"data/{name}",
            json_diff(packaged, recomputed),
            f"exports: data/{name} equal to the store",
        )
    _compare_hars(res, results)
    _compare_figures(res, top / "report", again / "report")


def _compare_parquet(res: VerifyResult, packaged: Path, recomputed: Path) -> None:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        res.notes.append("data/runs.parquet not compared: pyarrow is not installed")
        return
    a, b = pq.read_table(packaged), pq.read_table(recomputed)
    diffs = []
    if a.schema.names != b.schema.names:
        diffs.append(f"columns differ: packaged {a.schema.names}, recomputed {b.schema.names}")
    else:
        ra, rb = a.to_pylist(), b.to_pylist()
        diffs = json_diff(ra, rb, "rows")
    _add(res, "data/runs.parquet", diffs, "exports: data/runs.parquet equal to the store")


def _page_hosts(cfg: dict[str, Any]) -> frozenset[str]:
    """The hosts whose bytes a load's row counts: the test host, or a replayed page's
    origins (from its archive in the page store, when it is there)."""
    from quicbed.replay import archive

    folder = archive.find(cfg["page"]) if cfg.get("replay") else None
    if folder is None:
        return frozenset([cfg["host"]])
    return frozenset(o.host for o in archive.load(folder, check_bodies=False).origins)


def _compare_hars(res: VerifyResult, results: Path) -> None:
    """Each load's figures recomputed from its raw HAR equal the stored row."""
    from quicbed.client import har

    store = Store.open_readonly(results)
    try:
        hosts = {cid: _page_hosts(cfg) for cid, cfg in store.cell_configs().items()}
        runs = [(r, r.har_path) for r in store.all_runs() if r.har_path is not None]
    finally:
        store.close()
    diffs, checked, absent = [], 0, 0
    for r, har_path in runs:
        path = results / har_path
        if not path.exists():
            absent += 1
            continue
        with gzip.open(path, "rt") as f:
            m = har.metrics(json.load(f), None, hosts[r.cell_id])
        checked += 1
        for k in HAR_FIELDS:
            stored = getattr(r, k)  # protocols: decoded by the store
            if not same(stored, m.get(k)):
                diffs.append(
                    f"{r.har_path}: {k} is {stored!r} in the store, {m.get(k)!r} from the HAR"
                )
    if absent and not any("hars" in x["path"] for x in res.manifest.get("left_out", [])):
        diffs.append(f"{absent} HARs the store points at are not in the package")
    if checked or diffs:
        _add(
            res,
            "results/hars",
            diffs,
            f"raw data: {checked} loads' PLT, objects, bytes and protocols recomputed from "
            "their HARs, equal to the store",
        )
    elif absent:
        res.notes.append(f"HARs left out: the {absent} loads' figures were taken from the store")


def _compare_figures(res: VerifyResult, packaged: Path, again: Path) -> None:
    a = json.loads((packaged / "figures.json").read_text())
    b = json.loads((again / "figures.json").read_text())
    _add(
        res,
        "report/figures.json",
        json_diff(a, b, "figures"),
        f"figures: {len(b)} heatmap(s) redrawn from the recomputed statistics; every cell "
        "shows the same number, colour and significance",
    )
    names_a = sorted(p.name for p in (packaged / "figures").iterdir())
    names_b = sorted(p.name for p in (again / "figures").iterdir())
    if names_a != names_b:
        res.problems.append(f"report/figures: packaged {names_a}, regenerated {names_b}")
        return
    made, here = res.manifest.get("drawn_with") or {}, drawn_with()
    if any(made.get(k) != here.get(k) for k in DRAWN_WITH if k != "pyarrow"):
        res.notes.append(
            "figure files not compared byte for byte: drawn with "
            + ", ".join(f"{k} {made.get(k)}" for k in DRAWN_WITH if k != "pyarrow")
            + "; this machine has "
            + ", ".join(f"{k} {here.get(k)}" for k in DRAWN_WITH if k != "pyarrow")
        )
        return
    differ = [
        n
        for n in names_a
        if (packaged / "figures" / n).read_bytes() != (again / "figures" / n).read_bytes()
    ]
    _add(
        res,
        "report/figures",
        [f"{n}: regenerated bytes differ" for n in differ],
        f"figures: {len(names_a)} files (SVG, PNG) regenerated byte-equal",
    )


def lines(res: VerifyResult) -> list[str]:
    """What ``quicbed verify`` prints."""
    m = res.manifest
    git = ((m.get("quicbed") or {}).get("git") or {}).get("sha") or "?"
    out = [
        f"{res.archive.name}: package format {m['format']}, made {m.get('created')} by "
        f"quicbed {(m.get('quicbed') or {}).get('version')} (git {git[:12]})"
    ]
    out += [f"  ok       {c}" for c in res.checked]
    out += [f"  DIFFERS  {p}" for p in res.problems]
    out += [f"  note     {n}" for n in res.notes]
    if res.ok:
        out.append(
            "verified: every file is intact, and every statistic and figure follows "
            "from the packaged runs"
        )
    else:
        out.append(f"NOT verified: {len(res.problems)} difference(s) above")
    return out
