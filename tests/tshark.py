"""tshark for the capture tests (test_traces_capture, test_firefox): one program run, and
one field of the packets a display filter matches, decrypted with a key log or not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def tshark(*args: str) -> str:
    if not shutil.which("tshark"):
        pytest.fail("tshark is not installed: `make setup` (the tools role) installs it")
    cp = subprocess.run(["tshark", *args], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout


def fields(capture: Path, keylog: Path | None, display: str, field: str) -> list[str]:
    """One field of the packets ``display`` matches, decrypted with ``keylog`` (or with
    no key log at all: an empty ``tls.keylog_file``)."""
    out = tshark(
        "-r",
        str(capture),
        "-o",
        f"tls.keylog_file:{keylog or ''}",
        "-Y",
        display,
        "-T",
        "fields",
        "-e",
        field,
    )
    return [ln for ln in out.splitlines() if ln.strip()]
