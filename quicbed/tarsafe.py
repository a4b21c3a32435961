"""Unpacking tar streams that came from elsewhere (packages, remote hosts), safely."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from quicbed.errors import QuicbedError


def safe_extract(tar: tarfile.TarFile, dest: Path, *, what: str) -> None:
    """Extract regular files and folders only, each strictly below ``dest``.

    Written out by hand rather than with ``extractall(filter="data")``: that filter
    came with Python 3.11.4, and a verifier may well have Debian 12's 3.11.2.
    """
    dest.mkdir(parents=True, exist_ok=True)
    for m in tar.getmembers():
        parts = Path(m.name).parts
        if not parts and m.isdir():
            continue  # the archive's own root, "." as `tar -C dir -cf - .` writes it
        if not parts or m.name.startswith("/") or ".." in parts:
            raise QuicbedError(f"{what}: member {m.name!r} points outside the archive")
        if not (m.isfile() or m.isdir()):
            raise QuicbedError(f"{what}: {m.name} is not a regular file or folder")
        target = dest.joinpath(*parts)
        if m.isdir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        src = tar.extractfile(m)
        assert src is not None  # a regular file always has data
        with src, open(target, "wb") as f:
            shutil.copyfileobj(src, f)
