"""A replay archive: a recorded multi-origin page that every arm serves byte for byte.

The archive is the one description of a real page that the importer (a HAR), the page
models (quicbed.replay.corpus), the servers of every arm and the load verification
share; docs/replay.md states its format, the header rule and the matching rule. Bodies
are stored decoded, once per distinct content, named by their SHA-256, so an archive
proves its own bytes and two arms can be shown to have served the same ones.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from quicbed.errors import QuicbedError, from_validation
from quicbed.paths import REPO_ROOT, sha256_file

FORMAT: Literal[1] = 1
MANIFEST = "archive.json"
BODIES = "bodies"
#: where archives live unless QUICBED_PAGES says otherwise (imports and built models)
DEFAULT_STORE = REPO_ROOT / "pages"
#: the most origins one archive may have: the testbed gives each origin its own server
#: address, and the server has 100 extra ones, 10.10.1.100-199 of the testbed's /24
MAX_ORIGINS = 100

#: response headers no arm serves as recorded (docs/replay.md, "The header rule")
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: the response header every replay server adds: how the request matched (docs/replay.md)
REPLAY_HEADER = "x-quicbed-replay"
SERVER_SET = frozenset(
    {"content-length", "content-encoding", "alt-svc", "date", "server", REPLAY_HEADER}
)

#: how a request matched (docs/replay.md, "The matching rule")
How = Literal["url", "path"]


def served_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A recorded response's headers as every arm serves them: lower-case names in
    recorded order, without hop-by-hop, pseudo and server-set headers."""
    out = []
    for name, value in headers:
        n = name.strip().lower()
        if not n or n.startswith(":") or n in HOP_BY_HOP or n in SERVER_SET:
            continue
        out.append((n, value))
    return out


def split_url(url: str) -> tuple[str, str, str]:
    """``(origin, path, query)`` of an https URL: the origin as ``https://host[:port]``
    (the port only when not 443), the path at least ``/``, the fragment dropped."""
    u = urlsplit(url)
    if u.scheme != "https" or not u.hostname:
        raise QuicbedError(f"replay: {url!r} is not an https URL with a host")
    port = u.port or 443
    origin = f"https://{u.hostname}" + ("" if port == 443 else f":{port}")
    return origin, u.path or "/", u.query


class Entry(BaseModel):
    """One recorded request and its response."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = Field(pattern=r"^[A-Z]+$")
    url: str
    status: int = Field(ge=100, le=599)
    headers: tuple[tuple[str, str], ...] = ()
    body: str = Field(pattern=r"^[0-9a-f]{64}$")  # SHA-256 of bodies/<body>
    size: int = Field(ge=0)
    wait_ms: float | None = Field(default=None, ge=0)

    @field_validator("url")
    @classmethod
    def _https(cls, v: str) -> str:
        split_url(v)
        return v.split("#", 1)[0]


class Origin(BaseModel):
    """One origin of the page: its own address and certificate on the testbed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    origin: str
    host: str
    port: int = Field(default=443, ge=1, le=65535)
    rtt_ms: float | None = Field(default=None, ge=0)
    entries: tuple[Entry, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _own_entries(self) -> Origin:
        port = "" if self.port == 443 else f":{self.port}"
        if self.origin != f"https://{self.host}{port}":
            raise ValueError(f"origin {self.origin!r} is not https://{self.host}{port}")
        for e in self.entries:
            if split_url(e.url)[0] != self.origin:
                raise ValueError(f"entry {e.url} is not of origin {self.origin}")
        return self


class Archive(BaseModel):
    """The manifest of one archive (archive.json); bodies are files beside it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal[1] = FORMAT
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    main: str
    source: dict[str, str] = Field(default_factory=dict)
    origins: tuple[Origin, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _whole(self) -> Archive:
        seen = [o.origin for o in self.origins]
        twice = sorted({o for o in seen if seen.count(o) > 1})
        if twice:
            raise ValueError(f"origin {twice[0]} is listed twice")
        found = self.match("GET", self.main)
        if found is None or found[1] != "url":
            raise ValueError(f"main document {self.main} is not one of the entries")
        return self

    def origin_of(self, url: str) -> Origin | None:
        o, _, _ = split_url(url)
        return next((x for x in self.origins if x.origin == o), None)

    def match(self, method: str, url: str) -> tuple[Entry, How] | None:
        """The entry that answers ``method url`` by the matching rule, and how it
        matched; None: unmatched (served 404 and counted)."""
        origin = self.origin_of(url)
        if origin is None:
            return None
        _, path, query = split_url(url)
        same_path = [
            e for e in origin.entries if e.method == method and split_url(e.url)[1] == path
        ]
        for e in same_path:
            if split_url(e.url)[2] == query:
                return e, "url"
        return (same_path[0], "path") if same_path else None

    def entries(self) -> list[Entry]:
        return [e for o in self.origins for e in o.entries]

    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries())

    def digest(self) -> str:
        """SHA-256 of the manifest in canonical JSON: it names every body by its hash,
        so it is the archive's identity (a cell's identity holds it)."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def store() -> Path:
    """The page store: QUICBED_PAGES, or pages/ in the project."""
    return Path(os.environ.get("QUICBED_PAGES") or DEFAULT_STORE)


def find(name: str) -> Path | None:
    """The folder of the archive ``name`` in the page store, or None."""
    if not name or "/" in name or name.startswith("."):
        return None
    folder = store() / name
    return folder if (folder / MANIFEST).is_file() else None


def digest_of(name: str) -> str:
    """The digest of the stored archive ``name`` (its manifest alone: cheap)."""
    folder = find(name)
    if folder is None:
        raise QuicbedError(f"no replay archive {name!r} in {store()} (quicbed pages list)")
    return load(folder, check_bodies=False).digest()


def save(archive: Archive, bodies: dict[str, bytes], folder: Path) -> Path:
    """Write ``archive`` and its bodies (by SHA-256) into ``folder``; returns it.

    Every body the manifest names must be given, and its hash must be its name."""
    named = {e.body for e in archive.entries()}
    missing = sorted(named - set(bodies))
    if missing:
        raise QuicbedError(f"replay archive {archive.name}: no body for {missing[0]}")
    (folder / BODIES).mkdir(parents=True, exist_ok=True)
    for sha in sorted(named):
        data = bodies[sha]
        if hashlib.sha256(data).hexdigest() != sha:
            raise QuicbedError(f"replay archive {archive.name}: body {sha} does not hash to it")
        path = folder / BODIES / sha
        if not path.exists() or path.stat().st_size != len(data):
            tmp = path.with_suffix(".part")
            tmp.write_bytes(data)
            tmp.replace(path)
    text = json.dumps(archive.model_dump(mode="json"), indent=1) + "\n"
    (folder / MANIFEST).write_text(text)
    return folder


def load(folder: Path, *, check_bodies: bool = True) -> Archive:
    """The archive in ``folder``, its manifest validated and (``check_bodies``) every
    body present with the size and hash its entries say."""
    path = folder / MANIFEST
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise QuicbedError(f"replay archive {folder}: no {MANIFEST} there") from None
    except json.JSONDecodeError as exc:
        raise QuicbedError(f"replay archive {path}: not JSON ({exc})") from None
    try:
        archive = Archive.model_validate(raw)
    except ValidationError as exc:
        raise from_validation(exc, f"replay archive {path}") from None
    if check_bodies:
        for e in archive.entries():
            body = folder / BODIES / e.body
            if not body.is_file():
                raise QuicbedError(f"replay archive {folder}: {e.url}: body {e.body} is missing")
            if body.stat().st_size != e.size:
                raise QuicbedError(
                    f"replay archive {folder}: {e.url}: body {e.body} has "
                    f"{body.stat().st_size} bytes, the entry says {e.size}"
                )
        for sha in {e.body for e in archive.entries()}:
            if sha256_file(folder / BODIES / sha) != sha:
                raise QuicbedError(f"replay archive {folder}: body {sha} does not hash to it")
    return archive
