"""Page sets of the reference study and the generator of the document tree.

One tree serves both arms byte for byte. Image bodies are JPEG-typed (SOI/JFIF
header, EOI trailer), incompressible and deterministic: a SHA-256 counter-mode
stream keyed by page and index, so every machine generates the same bytes and a
replication package can prove it by hash.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from quicbed.errors import QuicbedError, from_validation
from quicbed.paths import REPO_ROOT
from quicbed.replay import pagestore
from quicbed.yamlfile import read_yaml

PAGES_FILE = REPO_ROOT / "workloads" / "pages.yaml"
MANIFEST = "manifest.json"
_SIZE_RE = re.compile(r"^(\d+)(KB|MB|B)$")
_JPEG_HEAD = bytes.fromhex("ffd8ffe000104a46494600010100000100010000")
_JPEG_TAIL = bytes.fromhex("ffd9")


def _check_size(v: str | None) -> str | None:
    if v is not None and not _SIZE_RE.match(v):
        raise ValueError(f"size {v!r} is not like 5KB, 1MB or 300B")
    return v


def _check_count(v: int | None) -> int | None:
    if v is not None and v < 1:
        raise ValueError(f"count must be >= 1 (got {v})")
    return v


def size_bytes(size: str, kb: int) -> int:
    """``15KB`` -> 15 x kb bytes (the page set's unit)."""
    m = _SIZE_RE.match(size)
    assert m
    n, unit = int(m.group(1)), m.group(2)
    return n * {"B": 1, "KB": kb, "MB": kb * kb}[unit]


class PagePart(BaseModel):
    """``count`` images of ``size`` each: one part of a page of mixed image sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    size: str
    count: int

    _size = field_validator("size")(_check_size)
    _count = field_validator("count")(_check_count)


class PageDef(BaseModel):
    """A page: ``count`` images of one ``size``, or ``parts``, a list of (size, count)
    whose images follow one another in the listed order (``img-000.jpg`` first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    size: str | None = None
    count: int | None = None
    parts: tuple[PagePart, ...] | None = None

    _size = field_validator("size")(_check_size)
    _count = field_validator("count")(_check_count)

    @model_validator(mode="after")
    def _one_form(self) -> PageDef:
        if self.parts is not None:
            if self.size is not None or self.count is not None:
                raise ValueError("give either size and count, or parts, not both")
            if not self.parts:
                raise ValueError("parts is empty: a page has at least one image")
        elif self.size is None or self.count is None:
            raise ValueError("a page needs size and count (or parts: [{size, count}, ...])")
        return self

    def all_parts(self) -> tuple[PagePart, ...]:
        if self.parts is not None:
            return self.parts
        assert self.size is not None and self.count is not None
        return (PagePart(size=self.size, count=self.count),)

    @property
    def images(self) -> int:
        """How many images the page has (its objects besides the HTML)."""
        return sum(p.count for p in self.all_parts())

    def image_sizes(self, kb: int) -> list[int]:
        """The byte size of each image, in file order."""
        return [size_bytes(p.size, kb) for p in self.all_parts() for _ in range(p.count)]

    def image_bytes(self, kb: int) -> int:
        """The size of each image of a page of one image size."""
        if self.parts is not None:
            raise QuicbedError("a page of parts has images of several sizes (image_sizes)")
        assert self.size is not None
        return size_bytes(self.size, kb)

    def total_image_bytes(self, kb: int) -> int:
        return sum(self.image_sizes(kb))


class PageSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kb: int
    pages: dict[str, PageDef]


def load(path: Path = PAGES_FILE) -> PageSet:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise QuicbedError(f"{path}: a page set is a mapping (kb, pages)")
    try:
        return PageSet(**data)
    except ValidationError as exc:
        raise from_validation(exc, str(path)) from None


def check_page(name: str, pageset: PageSet | None = None) -> str:
    """The page name if defined (a page of the page set, an archive of the page store
    or a page model, quicbed.replay), else an error that lists the defined ones."""
    ps = pageset or load()
    if name not in ps.pages and pagestore.ensure(name) is None:
        raise QuicbedError(
            f"unknown page {name!r} (defined: {', '.join(ps.pages)}; replayed pages: "
            f"{', '.join(pagestore.known()) or 'none'}, quicbed pages list)"
        )
    return name


def body(page: str, index: int, size: int) -> bytes:
    """Deterministic, incompressible, JPEG-typed bytes of exactly ``size``."""
    if size < len(_JPEG_HEAD) + len(_JPEG_TAIL):
        raise QuicbedError(f"page {page}: an image of {size} bytes is too small for a JPEG")
    n = size - len(_JPEG_HEAD) - len(_JPEG_TAIL)
    seed = f"quicbed/{page}/{index}".encode()
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
        counter += 1
    return _JPEG_HEAD + bytes(out[:n]) + _JPEG_TAIL


def html(page: str, count: int) -> bytes:
    imgs = "\n".join(f'<img src="img-{i:03d}.jpg" alt="">' for i in range(count))
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f'<link rel="icon" href="data:,"><title>{page}</title></head>\n'
        f"<body>\n{imgs}\n</body></html>\n"
    ).encode()


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.exists() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def generate(
    root: Path, pages: list[str] | None = None, pageset: PageSet | None = None
) -> dict[str, Any]:
    """Write ``root/<page>/index.html`` and its images, and ``root/manifest.json``.

    Idempotent: identical files are not rewritten. Returns the manifest.
    """
    ps = pageset or load()
    names = pages or list(ps.pages)
    for n in names:
        check_page(n, ps)
    manifest: dict[str, Any] = {"kb": ps.kb, "pages": {}}
    mpath = root / MANIFEST
    if mpath.exists():
        manifest = json.loads(mpath.read_text())
    for name in names:
        p = ps.pages[name]
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        files = {"index.html": html(name, p.images)}
        sizes = p.image_sizes(ps.kb)
        for i, size in enumerate(sizes):
            files[f"img-{i:03d}.jpg"] = body(name, i, size)
        for fname, data in files.items():
            _write_if_changed(d / fname, data)
        entry: dict[str, Any] = {
            "objects": len(files),
            "bytes": sum(len(b) for b in files.values()),
        }
        if p.parts is None:  # one image size (the entries made before parts existed)
            entry["image_bytes"] = sizes[0]
        else:
            entry["parts"] = [
                {"image_bytes": size_bytes(x.size, ps.kb), "count": x.count} for x in p.parts
            ]
        entry["files"] = {
            f: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for f, b in files.items()
        }
        manifest["pages"][name] = entry
    manifest["kb"] = ps.kb
    _write_if_changed(mpath, json.dumps(manifest, indent=1, sort_keys=True).encode())
    return manifest
