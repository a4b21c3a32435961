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
from pathlib import Path
from typing import Literal

from quicbed.errors import QuicbedError
from quicbed.replay import corpus, models
from quicbed.replay.archive import MANIFEST, Archive, find, load, save, store

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
