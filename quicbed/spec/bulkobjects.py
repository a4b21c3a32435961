"""Large objects for bulk and compete experiments, beside the generated pages.

``generate_bulk(root, sizes)`` writes ``root/bulk/<size>.bin`` for each size (``1MB``,
``100MB``, ``1GB``; decimal units, as the page sizes' ``MB`` is not: a bulk object's
size is a byte count a goodput is computed from, so ``100MB`` is 10^8 bytes). Bodies
are deterministic and incompressible, like the pages' images: SHAKE-256 of a seed
per size and 1 MiB block, so every machine writes the same bytes and a manifest
(``root/bulk/manifest.json``: bytes and SHA-256 per object) can prove it. The pages'
own manifest and tree (quicbed.spec.workloads) are not touched.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from quicbed.errors import QuicbedError

FOLDER = "bulk"
MANIFEST = "manifest.json"
BLOCK = 1 << 20
_SIZE_RE = re.compile(r"^(\d+)(B|KB|MB|GB)$")
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9}
#: a bound on a typo (the object is written to disk on the server)
MAX_BYTES = 4 * 10**9


def parse_size(size: str) -> int:
    """Bytes of a bulk object's size name (``100MB`` = 10^8 bytes)."""
    m = _SIZE_RE.match(size)
    if not m:
        raise QuicbedError(f"bulk object size {size!r} is not like 10MB, 1GB or 500KB")
    n = int(m.group(1)) * _UNITS[m.group(2)]
    if not 0 < n <= MAX_BYTES:
        raise QuicbedError(f"bulk object size {size}: must be in (0, {MAX_BYTES} bytes]")
    return n


def object_path(size: str) -> str:
    """The object's path below the document root, as a URL path without the slash."""
    parse_size(size)
    return f"{FOLDER}/{size}.bin"


def _blocks(size: str, n: int) -> Any:
    for i in range(0, n, BLOCK):
        yield hashlib.shake_256(f"quicbed/bulk/{size}/{i // BLOCK}".encode()).digest(
            min(BLOCK, n - i)
        )


def generate_bulk(root: Path, sizes: list[str]) -> dict[str, Any]:
    """Write ``root/bulk/<size>.bin`` for each size; idempotent (an object whose size and
    recorded hash match is not rewritten). Returns the bulk manifest."""
    d = root / FOLDER
    d.mkdir(parents=True, exist_ok=True)
    mpath = d / MANIFEST
    manifest: dict[str, Any] = {"objects": {}}
    if mpath.exists():
        manifest = json.loads(mpath.read_text())
    for size in sizes:
        n = parse_size(size)
        path = d / f"{size}.bin"
        known = manifest["objects"].get(size)
        if known and path.exists() and path.stat().st_size == n == known["bytes"]:
            continue
        h = hashlib.sha256()
        tmp = path.with_suffix(".bin.tmp")
        with open(tmp, "wb") as f:
            for block in _blocks(size, n):
                h.update(block)
                f.write(block)
        tmp.replace(path)
        manifest["objects"][size] = {"path": object_path(size), "bytes": n, "sha256": h.hexdigest()}
    tmp_m = mpath.with_suffix(".json.tmp")
    tmp_m.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    tmp_m.replace(mpath)
    return manifest
