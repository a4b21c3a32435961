"""Where quicbed finds its own built programs and data."""

from __future__ import annotations

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
