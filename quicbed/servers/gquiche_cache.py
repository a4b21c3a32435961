"""Google QUICHE quic_server's response cache, made from a cell's document tree.

quic_server (quiche/quic/tools/quic_toy_server.cc) serves only what its memory-cache
backend loaded at start from ``--quic_response_cache_dir``
(quiche/quic/tools/quic_memory_cache_backend.cc, ``InitializeBackend``): every file
below that folder is one response, ``<dir>/<host>/<path>`` answering ``https://<host>
<path>`` (the port is ignored: ``GetKey``), and each file is the response's HTTP/1.x
status line and headers, an empty line, then the body (``ResourceFile::Read``, the
layout ``wget --save-headers`` writes). An ``X-Original-Url`` header replaces the
host and path the file name gives.

So the tree quicbed generates (``<docroot>/<page>/index.html`` and its images) is
copied once per host name the cell's certificate is valid for, each file with the
headers quicbed's other servers send (go/internal/docroot/handler.go, the apache_h2
role): ``cache-control: no-store, no-cache``, ``content-type`` by extension as
Apache's defaults give it, ``content-length``. The differences that remain, said in
docs/testbed.md: no ``date`` header (the backend adds none), and the page's
``index.html`` carries ``x-original-url: https://<host>/<page>/``, since a file
cannot be named ``<page>/``, which is the URL every arm loads; quic_server sends that
header on to the browser (the backend drops only ``connection``).

Runs on the server node, where the tree is (``python3 -m quicbed.servers.gquiche_cache
DOCROOT OUT HOST...``): standard library only, like every module a node runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

#: = go/internal/docroot/handler.go contentTypes (Apache's defaults for these files)
CONTENT_TYPES = {
    ".html": "text/html",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".json": "application/json",
}
DEFAULT_TYPE = "application/octet-stream"
CACHE_CONTROL = "no-store, no-cache"
INDEX = "index.html"


class CacheError(Exception):
    """A tree the cache cannot hold faithfully (the message names the file)."""


def headers(rel: Path, size: int, host: str) -> list[str]:
    """The status line and headers of the response for ``rel`` (a path in the tree)."""
    ctype = CONTENT_TYPES.get(rel.suffix.lower(), DEFAULT_TYPE)
    out = [
        "HTTP/1.1 200 OK",
        f"cache-control: {CACHE_CONTROL}",
        f"content-type: {ctype}",
        f"content-length: {size}",
    ]
    if rel.name == INDEX:
        folder = rel.parent.as_posix()
        url_path = "/" if folder == "." else f"/{folder}/"
        out.append(f"x-original-url: https://{host}{url_path}")
    return out


def _check_name(rel: Path) -> None:
    # ResourceFile::SetHostPathFromBase cuts a path at its first ',' (a query)
    if "," in rel.as_posix() or "\n" in rel.as_posix():
        raise CacheError(
            f"{rel.as_posix()!r}: quic_server's cache cannot serve a name with ',' or a newline"
        )


def build(docroot: Path, out: Path, hosts: list[str]) -> dict[str, int]:
    """Write the cache for every file below ``docroot`` and every name in ``hosts`` to
    ``out`` (replaced whole; made beside it first, so a failure leaves the old one)."""
    if not docroot.is_dir():
        raise CacheError(f"document tree {docroot} is not a folder")
    if not hosts:
        raise CacheError("no host name to serve the tree under")
    for h in hosts:
        if not h or "/" in h or h.startswith("."):
            raise CacheError(f"host name {h!r} cannot be a cache folder")
    files = sorted(p for p in docroot.rglob("*") if p.is_file() and not p.is_symlink())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    n = size = 0
    for host in hosts:
        for f in files:
            rel = f.relative_to(docroot)
            _check_name(rel)
            body = f.read_bytes()
            dest = tmp / host / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            head = "\n".join(headers(rel, len(body), host)) + "\n\n"
            dest.write_bytes(head.encode() + body)
            n += 1
            size += len(body)
    if n == 0:
        raise CacheError(f"document tree {docroot} has no files")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return {"files": n, "body_bytes": size, "hosts": len(hosts)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m quicbed.servers.gquiche_cache", description=__doc__.splitlines()[0]
    )
    ap.add_argument("docroot", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("hosts", nargs="+")
    a = ap.parse_args(argv)
    try:
        summary = build(a.docroot, a.out, a.hosts)
    except (CacheError, OSError) as exc:
        print(f"gquiche_cache: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
