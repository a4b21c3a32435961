"""Where quicbed finds its own built programs and data, and what a file's bytes hash to."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from quicbed.errors import QuicbedError

REPO_ROOT = Path(__file__).resolve().parent.parent


def bin_path(name: str) -> Path:
    """Path of one of the project's Go binaries (built by `make setup` into build/bin).

    QUICBED_BIN_DIR overrides the directory, e.g. on a testbed node.
    """
    bindir = Path(os.environ.get("QUICBED_BIN_DIR", REPO_ROOT / "build" / "bin"))
    path = bindir / name
    if not os.access(path, os.X_OK):
        raise QuicbedError(f"{name} is not built at {path} (run `make setup`)")
    return path


def check_folder_target(path: Path, option: str) -> None:
    """``path`` is a folder, or could be made one: an error naming ``option`` if a file
    stands at it or at one of its parents (``--out results.csv``, ``--out file/sub``)."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                raise QuicbedError(f"{option}: {p} is a file, not a folder")
            return


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks (packages, traces, archives)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
