"""The page store's folders: an archive is added whole or not at all, never over another.

An import or a model build writes its archive into a hidden folder beside the store's
archives and renames it into place, so a crash leaves no half archive under a name
that a cell could load. An archive already stored under the name is kept when it is the
same (same digest, every body present and sound: a second build changes nothing) and
refused when it differs, unless the caller forces the replacement: a page measured
yesterday must not silently become another page today.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from quicbed.errors import QuicbedError
from quicbed.replay import corpus, models
from quicbed.replay.archive import BODIES, MANIFEST, Archive, find, load, save, store

Put = Literal["new", "unchanged", "replaced"]


def _store_folder(store: Path) -> Path:
    if store.exists() and not store.is_dir():
        raise QuicbedError(f"page store {store}: is a file, not a folder")
    return store


def put(archive: Archive, bodies: dict[str, bytes], store: Path, *, force: bool = False) -> Put:
    """Store ``archive`` as ``store/<name>``: "new", "unchanged" (the same archive is
    there), or "replaced" (another was, and ``force`` was given)."""
    folder = _store_folder(store) / archive.name
    if folder.exists():
        try:
            old = load(folder).digest()
        except QuicbedError:
            old = "unreadable"
        if old == archive.digest():
            return "unchanged"
        if not force:
            raise QuicbedError(
                f"page store {store}: {archive.name} exists with other content "
                f"(digest {old[:12]}); --force replaces it"
            )
    store.mkdir(parents=True, exist_ok=True)
    part = store / f".{archive.name}.part-{os.getpid()}"
    shutil.rmtree(part, ignore_errors=True)
    try:
        save(archive, bodies, part)
        if not folder.exists():
            part.rename(folder)
            return "new"
        gone = store / f".{archive.name}.old-{os.getpid()}"
        folder.rename(gone)
        part.rename(folder)
        shutil.rmtree(gone, ignore_errors=True)
        return "replaced"
    finally:
        shutil.rmtree(part, ignore_errors=True)


def names(store: Path) -> list[str]:
    """The archives in the store (folders with a manifest), sorted; hidden folders
    (an import under way) are not archives."""
    if not _store_folder(store).is_dir():
        return []
    return sorted(
        p.name for p in store.iterdir() if not p.name.startswith(".") and (p / MANIFEST).is_file()
    )


def get(store: Path, name: str, *, check_bodies: bool = True) -> Archive:
    """The archive ``name`` of the store, or an error listing those it has."""
    if not (store / name / MANIFEST).is_file():
        have = ", ".join(names(store)) or "none"
        raise QuicbedError(f"page store {store}: no archive {name!r} (stored: {have})")
    return load(store / name, check_bodies=check_bodies)


@functools.cache
def _model_names() -> frozenset[str]:
    """The page models' names (workloads/replay-models.yaml), read once per process."""
    return frozenset(models.load().models)


def ensure(name: str) -> Path | None:
    """The folder of the stored archive ``name``; a page model that is not stored yet
    is built into the store first (the same bytes on every machine, in well under a
    second), so ``--page p50`` needs no ``quicbed pages build``. None: neither."""
    folder = find(name)
    if folder is None and name in _model_names():
        built, bodies = corpus.build(name, models.load())
        put(built, bodies, store())
        folder = find(name)
    return folder


def known() -> list[str]:
    """Every replayed page a cell may name: the store's archives and the page models."""
    return sorted(set(names(store())) | _model_names())


# --- replication packages -----------------------------------------------------------
#: where a replication package carries the archives its cells replayed (under results/)
CARRIED = "pages"


def replayed(configs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The archives cells replayed: page name -> the digest each cell recorded."""
    return {str(c["page"]): str(c["replay"]) for c in configs if c.get("replay")}


def carry(used: Mapping[str, str], dest: Path) -> list[str]:
    """Copy the archives ``used`` (name -> the digest its cells recorded) from the page
    store into ``dest`` (a package's results folder's CARRIED), each whole, its bodies
    checked; returns why any was left out (not in the store, damaged, or stored with
    another digest than its cells replayed)."""
    missing = []
    for name, digest in sorted(used.items()):
        folder = find(name)
        if folder is None:
            missing.append(f"replay archive {name}: not in the page store {store()}")
            continue
        try:
            got = load(folder).digest()
        except QuicbedError as exc:
            missing.append(f"replay archive {name}: {exc}")
            continue
        if got != digest:
            missing.append(
                f"replay archive {name}: the page store's has digest {got[:12]}, its cells "
                f"replayed {digest[:12]}"
            )
            continue
        shutil.copytree(folder, dest / name)
    return missing


def install_carried(src: Path) -> list[str]:
    """Put the archives a package carries (``src``: its CARRIED folder) into the page
    store, so its cells replay on a rerun what they replayed; one already stored with
    the same digest is left as it is, one stored with another is refused by name.
    Returns the names installed."""
    installed = []
    for m in sorted(src.glob(f"*/{MANIFEST}")) if src.is_dir() else []:
        carried = load(m.parent)  # every body present and sound
        if carried.name != m.parent.name:
            raise QuicbedError(f"{m.parent}: holds the archive {carried.name!r}, not its own")
        held = find(carried.name)
        if held is not None:
            mine = load(held, check_bodies=False).digest()
            if mine != carried.digest():
                raise QuicbedError(
                    f"replay archive {carried.name} is in the page store {store()} with "
                    f"digest {mine[:12]}, the package's cells replayed "
                    f"{carried.digest()[:12]}: set QUICBED_PAGES to another folder for this "
                    "rerun"
                )
            continue
        bodies = {e.body: (m.parent / BODIES / e.body).read_bytes() for e in carried.entries()}
        put(carried, bodies, store())
        installed.append(carried.name)
    return installed
