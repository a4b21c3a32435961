"""Rerun a cell of a replication package: the package's runs, plus a new attempt beside them.

The package itself is never changed. Its ``results/`` are extracted (after its
checksums pass) into a rerun folder, by default ``NAME-rerun/`` beside the
archive; ``quicbed cell`` then measures the cell with its exact stored
configuration as a new attempt there, and :func:`beside` prints the new result next
to the packaged one. Rerunning more cells of the same package reuses the folder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quicbed.analysis.stats import summarize
from quicbed.errors import QuicbedError
from quicbed.model import capacity
from quicbed.package.build import SUFFIX, check_files, open_package
from quicbed.paths import check_folder_target, sha256_file
from quicbed.replay import pagestore
from quicbed.results.folder import (
    checked_software,
    describe_changes,
    software_changes,
    used_software,
)
from quicbed.results.store import Store

# The spec, the analysis and the report are imported where used, not here: they bring in
# the stacks' and browsers' modules, and this module is read by commands that must not
# load the runner (tests/test_layering.py, test_verify_and_the_results_layout_...).

MARK = "rerun-of.json"


def is_package(path: str) -> bool:
    """``--from`` names a package (by its name or because it is a file), not a folder."""
    return path.endswith(SUFFIX) or Path(path).is_file()


def rerun_target(archive: Path, out: Path | None = None) -> Path:
    """The folder reruns of ``archive`` go to: ``out``, or ``NAME-rerun`` beside it."""
    archive = Path(archive).resolve()
    if out:
        return Path(out).resolve()
    return archive.with_name(archive.name[: -len(SUFFIX)] + "-rerun")


@contextmanager
def rerun_workspace(
    archive: Path, out: Path | None = None
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """:func:`rerun_folder` for the length of a block that may still refuse the rerun
    (an unknown ``--cell``, a time over ``--max-hours``): if the block raises, what
    this call extracted is removed again, so a refused rerun leaves nothing behind."""
    target = rerun_target(archive, out)
    existed, claimed = target.is_dir(), (target / MARK).exists()
    folder, held = rerun_folder(archive, out)
    try:
        yield folder, held
    except BaseException:
        if not claimed:
            _remove_extracted(folder, keep_folder=existed)
        raise


def _remove_extracted(folder: Path, *, keep_folder: bool) -> None:
    if not keep_folder:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for item in folder.iterdir():  # it was empty before: everything in it is ours
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)


def rerun_folder(archive: Path, out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """(results folder to rerun in, what it was extracted from and the packaged attempts)."""
    archive = Path(archive).resolve()
    if not archive.is_file():
        raise QuicbedError(f"--from: {archive}: no such file")
    out = rerun_target(archive, out)
    check_folder_target(out, "--out")
    digest = sha256_file(archive)
    mark = out / MARK
    if mark.exists():
        try:
            held = json.loads(mark.read_text())
            if not isinstance(held["packaged_attempts"], dict):  # what beside() reads
                raise TypeError
        except (OSError, ValueError, TypeError, KeyError):
            raise QuicbedError(f"{mark} is not a quicbed rerun mark (damaged?)") from None
        if held.get("archive_sha256") != digest:
            raise QuicbedError(
                f"{out} holds reruns of another package ({held.get('archive')}); "
                "choose another --out"
            )
        return out, held
    if out.exists() and any(out.iterdir()):
        raise QuicbedError(
            f"{out} exists and is not a rerun folder of {archive.name}; choose another --out"
        )
    with tempfile.TemporaryDirectory(prefix="quicbed-rerun-") as tmp:
        top, manifest = open_package(archive, Path(tmp))
        _, problems = check_files(top, manifest)
        if problems:
            raise QuicbedError(
                f"{archive.name} fails its checksums ({problems[0]}); see quicbed verify {archive}"
            )
        store = Store(top / "results")  # a damaged store is refused before anything moves
        try:
            latest = {cid: a.attempt for cid, a in store.latest_attempts().items()}
        finally:
            store.close()
        # the varying links' traces and the replayed pages first: refused by name
        # before anything moves
        capacity.install_carried(top / "results" / capacity.CARRIED)
        pagestore.install_carried(top / "results" / pagestore.CARRIED)
        out.mkdir(parents=True, exist_ok=True)
        for item in sorted((top / "results").iterdir()):
            shutil.move(item, out / item.name)
    held = {"archive": archive.name, "archive_sha256": digest, "packaged_attempts": latest}
    mark.write_text(json.dumps(held, indent=1) + "\n")
    return out, held


def beside(folder: Path, held: dict[str, Any], cell_id: str, attempt: int) -> list[str]:
    """The packaged attempt of ``cell_id`` and the new ``attempt``, side by side."""
    old_att = held["packaged_attempts"].get(cell_id)
    if old_att is None:
        return [f"cell {cell_id} has no packaged attempt to compare with"]
    store = Store(folder)
    try:
        cfg = store.cell_config(cell_id)
        old, new = store.attempt(cell_id, old_att), store.attempt(cell_id, attempt)
        plts = {
            (a, arm): store.plts(cell_id, a, arm) for a in (old_att, attempt) for arm in cfg["arms"]
        }
    finally:
        store.close()

    def f(v: float | None, fmt: str = ".1f") -> str:
        return "-" if v is None else format(v, fmt)

    from quicbed.report.transfers import is_transfer

    if is_transfer(cfg):
        out = _transfers_beside(folder, cell_id, old_att, attempt, held["archive"], f)
    else:
        out = _loads_beside(folder, cfg, cell_id, old_att, attempt, held["archive"], plts, f)
    packaged, rerun = (checked_software((x.provenance or {}).get("software")) for x in (old, new))
    uses = _used_software(cfg)
    changed = software_changes(packaged, rerun, uses)
    compared = [k for k in (uses or packaged) if k in packaged]
    out.append(
        "software: "
        + (
            "the same builds of " + ", ".join(compared)
            if not changed
            else "differs from the packaged runs in " + describe_changes(changed)
        )
    )
    mach_old, mach_new = ((x.provenance or {}).get("machine") or {} for x in (old, new))
    keys = ("kernel", "os", "cpu", "cores")
    if any(mach_old.get(k) != mach_new.get(k) for k in keys):
        out.append(
            "machine: packaged on "
            + ", ".join(str(mach_old.get(k)) for k in keys)
            + "; rerun on "
            + ", ".join(str(mach_new.get(k)) for k in keys)
        )
    if new.status != "done":
        out.append(f"the rerun failed: {new.problem}")
    return out


def _used_software(cfg: dict[str, Any]) -> tuple[str, ...] | None:
    """The components the software check compares for a stored cell (used_software);
    None where this quicbed cannot read the cell's arms: then every recorded one."""
    from quicbed.spec.cellconfig import make_cell

    try:
        return used_software([make_cell(**cfg)])
    except (QuicbedError, ValueError, TypeError):
        return None


def _loads_beside(
    folder: Path,
    cfg: dict[str, Any],
    cell_id: str,
    old_att: int,
    attempt: int,
    archive: str,
    plts: dict[tuple[int, str], list[float]],
    f: Any,
) -> list[str]:
    out = [
        f"cell {cell_id}: packaged attempt {old_att} ({archive}) beside this "
        f"rerun, attempt {attempt}",
        f"{'arm':5}{'packaged n':>12}{'mean ms':>10}{'sd ms':>8}{'rerun n':>10}"
        f"{'mean ms':>10}{'sd ms':>8}{'mean change':>13}",
    ]
    for arm in cfg["arms"]:
        a, b = summarize(arm, plts[(old_att, arm)]), summarize(arm, plts[(attempt, arm)])
        change = (b.mean - a.mean) / a.mean * 100 if a.mean and b.mean is not None else None
        out.append(
            f"{arm:5}{a.n:>12}{f(a.mean):>10}{f(a.sd):>8}{b.n:>10}{f(b.mean):>10}"
            f"{f(b.sd):>8}{f(change, '+.1f') + ' %':>13}"
        )
    from quicbed.analysis.cells import compare_cell
    from quicbed.spec.cellconfig import make_cell

    store = Store(folder)
    try:
        by_attempt = {
            label: compare_cell(store, cell_id, a, make_cell(**cfg))
            for label, a in (("packaged", old_att), ("rerun", attempt))
        }
    finally:
        store.close()
    for pair in by_attempt["rerun"]:
        parts = []
        for label, comps in by_attempt.items():
            c = comps[pair]
            parts.append(
                f"{label} {f(c.pct_diff, '+.1f')} % (Welch p {f(c.welch_p, '.3g')})"
                if c.enough
                else f"{label}: {c.problem}"
            )
        ref, cand = pair.split("/")
        out.append(f"({ref} - {cand}) / {cand}: " + "; ".join(parts))
    return out


def _transfers_beside(
    folder: Path, cell_id: str, old_att: int, attempt: int, archive: str, f: Any
) -> list[str]:
    """A transfer cell's arms, packaged and rerun: goodput (bulk) or share (compete)."""
    from quicbed.analysis.transfers import stored_transfer
    from quicbed.results.transfers import BulkResult

    store = Store(folder)
    try:
        recs = {
            label: stored_transfer(store, cell_id, a) if store.transfer(cell_id, a) else None
            for label, a in (("packaged", old_att), ("rerun", attempt))
        }
    finally:
        store.close()
    out = [
        f"cell {cell_id}: packaged attempt {old_att} ({archive}) beside this rerun, "
        f"attempt {attempt}"
    ]
    for label, r in recs.items():
        if r is None:
            out.append(f"{label}: no transfer record")
            continue
        if isinstance(r, BulkResult):
            parts = [
                f"{s.arm} {f(s.goodput_mbit_mean, '.2f')} Mbit/s (n {s.n})"
                for s in r.summary.values()
            ]
        else:
            parts = [
                f"{s.arm} share {f(None if s.share_mean is None else s.share_mean * 100)} % "
                f"(fair {s.fair_share * 100:.0f} %)"
                for s in r.summary.values()
            ]
            parts.append(f"Jain {f(r.jain_mean, '.3f')}")
        out.append(f"{label}: " + "; ".join(parts))
    return out
