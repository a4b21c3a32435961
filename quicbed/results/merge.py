"""``quicbed merge``: the folders of one sweep's shards (or testbeds) as one results folder.

The merged folder reports, packages and verifies like a sweep run in one place, so
the rules are the sweep's own: folders of another spec (digest) or other software
are refused unless forced (pyperf refuses to combine incompatible runs), a folder
still being written is refused, and every attempt is kept with its rows, receipts,
link spans, HARs, logs and traces. A cell measured in two folders is refused too,
naming both; forced, both are kept, numbered by when they started, and the report
takes the latest as it does after a retry.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError
from quicbed.paths import check_folder_target
from quicbed.results.folder import (
    SWEEP_FILE,
    check_software,
    check_spec,
    folder_lock,
    is_running,
    read_sweep,
    sweep_software,
    write_sweep,
)
from quicbed.results.store import Store, now


@dataclass
class MergeOutcome:
    out: Path
    cells: int = 0
    attempts: int = 0
    #: what the merged folder lacks or holds twice, one line each
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Source:
    path: Path
    sweep: dict[str, Any]

    @property
    def shard(self) -> str | None:
        return self.sweep.get("shard")


def _read(path: Path) -> _Source:
    if not (path / SWEEP_FILE).is_file():
        raise QuicbedError(f"{path} is not a sweep's results folder (no {SWEEP_FILE})")
    if is_running(path):
        raise QuicbedError(f"{path} is still being written by a running sweep")
    return _Source(path, read_sweep(path))


def check_sources(sources: list[_Source], force: bool) -> list[str]:
    """Refuse folders that are not parts of one sweep (unless ``force``); the warnings
    about the set (shards missing) otherwise."""
    first = sources[0]
    uses = sweep_software(first.sweep["spec"])  # what the sweep's cells run
    for s in sources[1:]:
        check_spec(
            s.sweep,
            first.sweep["digest"],
            force=force,
            where=str(s.path),
            this=str(first.path),
            action="merge",
        )
        check_software(
            first.sweep["software"],
            s.sweep["software"],
            force=force,
            what=f"{s.path} was measured with other software than {first.path}",
            uses=uses,
        )
    warnings = []
    shards = [s.shard for s in sources if s.shard]
    counts = {int(x.split("/")[1]) for x in shards}
    if len(counts) > 1 and not force:
        raise QuicbedError(
            f"the folders are shards of different splits ({', '.join(sorted(set(shards)))}); "
            "use --force to merge anyway"
        )
    if len(counts) == 1:
        k = counts.pop()
        missing = [f"{i}/{k}" for i in range(1, k + 1) if f"{i}/{k}" not in shards]
        if missing:
            warnings.append(
                f"shard(s) {', '.join(missing)} not given: the merged folder lacks their "
                "cells (`quicbed run SPEC --out DIR --resume` adds them)"
            )
    return warnings


def merge(folders: list[Path], out: Path, *, force: bool = False) -> MergeOutcome:
    """Merge ``folders`` into the new results folder ``out``."""
    if not folders:
        raise QuicbedError("merge needs at least one results folder")
    paths = [Path(f).resolve() for f in folders]
    dup = sorted({str(p) for p in paths if paths.count(p) > 1})
    if dup:
        raise QuicbedError(f"folder given twice: {', '.join(dup)}")
    out = Path(out).resolve()
    if out in paths:
        raise QuicbedError(f"--out {out} is one of the folders to merge; choose a new folder")
    check_folder_target(out, "--out")
    if out.exists() and any(out.iterdir()):
        raise QuicbedError(f"--out {out} is not empty; merge into a new folder")
    sources = [_read(p) for p in paths]
    outcome = MergeOutcome(out=out, warnings=check_sources(sources, force))
    stores = [Store(s.path) for s in sources]
    try:
        # cell -> [(started, source index, attempt)]
        found: dict[str, list[tuple[str, int, int]]] = {}
        for i, st in enumerate(stores):
            for cid in st.cells():
                for att in st.attempts(cid):
                    found.setdefault(cid, []).append((att.started, i, att.attempt))
        twice = {
            cid: sorted({str(paths[i]) for _, i, _ in atts})
            for cid, atts in found.items()
            if len({i for _, i, _ in atts}) > 1
        }
        if twice and not force:
            cid, where = next(iter(twice.items()))
            raise QuicbedError(
                f"{len(twice)} cell(s) measured in more than one folder, e.g. {cid} in "
                f"{' and '.join(where)}; use --force to keep every attempt (numbered by "
                "start time; the report uses the latest)"
            )
        for cid, where in twice.items():
            outcome.warnings.append(
                f"cell {cid} was measured in {' and '.join(where)}: "
                "every attempt kept, the latest reported"
            )
        made = not out.exists()
        with folder_lock(out, "merge"):
            first = sources[0].sweep
            parts = [
                {
                    "folder": str(s.path),
                    "shard": s.shard,
                    "digest": s.sweep["digest"],
                    "testbed": s.sweep.get("testbed"),
                    "software": s.sweep["software"],
                    "created": s.sweep.get("created"),
                }
                for s in sources
            ]
            body = {
                "format": 1,
                "created": now(),
                "digest": first["digest"],
                "spec": first["spec"],
                "software": first["software"],
                "testbed": first.get("testbed"),
                "merged_from": parts,
            }
            try:
                merged = Store(out, create=True)
                try:
                    for cid, atts in found.items():
                        renumber = cid in twice
                        for n, (_, i, a) in enumerate(sorted(atts), start=1):
                            merged.import_attempt(stores[i], cid, a, n if renumber else a)
                            outcome.attempts += 1
                        outcome.cells += 1
                finally:
                    merged.close()
                write_sweep(out, body)
            except BaseException:
                if made:  # our own new folder: no half-merged folder is left behind
                    shutil.rmtree(out, ignore_errors=True)
                raise
    finally:
        for st in stores:
            st.close()
    return outcome
