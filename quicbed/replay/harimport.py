"""A browser's recording (HAR 1.2 with content) turned into a replay archive.

DevTools' "Save all as HAR with content" (Chrome, Firefox) holds every response's body,
text as text and binary as base64; this module decodes each body once, names it by its
SHA-256 and keeps the recorded order, status and headers (through the header rule), so
that every arm of a cell serves the page as it was recorded. What a replay cannot serve
is refused by name rather than dropped: a page with a hole in it would be measured as a
different page. What a replay need not serve (a failed request, a data: URL, a repeat
of the same request) is skipped and counted in the archive's ``source``, so the count
stays visible. docs/replay.md ("Importing a HAR") states each rule.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from pydantic import ValidationError

from quicbed.errors import QuicbedError, from_validation
from quicbed.replay import pagestore
from quicbed.replay.archive import MAX_ORIGINS, Archive, Entry, Origin, served_headers, split_url

#: statuses whose response has no body by definition (RFC 9110): an empty one is content
NO_BODY = frozenset({204, 205, 304})
#: the skipped kinds, each counted in the archive's source as ``skipped_<kind>``
SKIPPED = ("failed", "duplicate", "data", "scheme", "http_redirect")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_CHARSET = re.compile(r"charset\s*=\s*\"?([A-Za-z0-9._:-]+)", re.IGNORECASE)


@dataclass
class _Kept:
    """One entry the archive keeps, with what its origin needs from the recording."""

    entry: Entry
    connect_rtt: float | None  # this entry's handshake RTT, if it opened a connection
    wait: float | None  # the recorded wait (ms), None where unknown


@dataclass
class _Reading:
    """What a HAR turns into, before it is an Archive."""

    kept: list[_Kept] = field(default_factory=list)
    bodies: dict[str, bytes] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIPPED, 0))
    seen: set[tuple[str, str]] = field(default_factory=set)
    upgrades: dict[str, str] = field(default_factory=dict)  # skipped http:// -> https://


def default_name(path: Path) -> str:
    """The archive name a HAR gets without --name: its file name without ``.har``, in
    lower case, each character an archive name may not hold made a ``-``."""
    stem = path.name.removesuffix(".har").removesuffix(".HAR").lower()
    name = re.sub(r"[^a-z0-9._-]", "-", stem).lstrip("._-")
    return check_name(name or stem)


def check_name(name: str) -> str:
    """``name`` if an archive may be called so (it is a folder of the page store)."""
    if not _NAME.match(name):
        raise QuicbedError(
            f"archive name {name!r}: use lower-case letters, digits, '.', '_' and '-' "
            "(starting with a letter or digit)"
        )
    return name


def rtt_of(timings: dict[str, Any]) -> float | None:
    """The round trip a recorded connection set-up shows, in ms; None if it set none up.

    HAR 1.2 counts the TLS handshake (``ssl``) inside ``connect``: over TCP, connect less
    ssl is the TCP handshake, one round trip. Over QUIC the transport and TLS handshakes
    are the same round trip and browsers report ssl equal to connect (or no ssl), so
    where connect less ssl leaves nothing, connect itself is the round trip.
    """
    connect = _ms(timings.get("connect"))
    if connect is None or connect <= 0:
        return None
    ssl = _ms(timings.get("ssl")) or 0.0
    tcp = connect - ssl
    return round(tcp if tcp > 0 else connect, 3)


def _ms(value: Any) -> float | None:
    """A HAR time in ms; None for -1 (not applicable) or anything not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def _load(path: Path) -> tuple[dict[str, Any], str]:
    """The HAR's ``log`` and the file's SHA-256; refused if it is not a HAR."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise QuicbedError(f"HAR {path}: no such file") from None
    except IsADirectoryError:
        raise QuicbedError(f"HAR {path}: is a folder, not a file") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise QuicbedError(f"HAR {path}: not JSON ({exc})") from None
    log = data.get("log") if isinstance(data, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise QuicbedError(f"HAR {path}: not a HAR (no log.entries list)")
    return log, hashlib.sha256(raw).hexdigest()


def _headers(response: dict[str, Any], url: str) -> list[tuple[str, str]]:
    out = []
    for h in response.get("headers") or []:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise QuicbedError(f"HAR entry {url}: a response header without a name")
        out.append((h["name"], str(h.get("value", ""))))
    return out


def _text_codec(headers: list[tuple[str, str]]) -> str:
    """The codec a text body is encoded back with: the content-type's charset where
    Python knows it (a browser decodes text bodies into the HAR by it), else UTF-8."""
    for name, value in headers:
        if name.lower() == "content-type":
            m = _CHARSET.search(value)
            if m:
                try:
                    return codecs.lookup(m.group(1)).name
                except LookupError:
                    return "utf-8"
    return "utf-8"


def _body(entry: dict[str, Any], url: str, status: int, method: str) -> bytes:
    """The response body as the server sent it (decoded: identity), or a refusal."""
    content = entry["response"].get("content")
    content = content if isinstance(content, dict) else {}
    text = content.get("text")
    if text is None:
        size = content.get("size")
        empty = size == 0 or status in NO_BODY or 300 <= status < 400 or method == "HEAD"
        if empty:
            return b""
        raise QuicbedError(
            f"HAR entry {url}: no content (status {status}, size {size}); save the HAR with content"
        )
    if not isinstance(text, str):
        raise QuicbedError(f"HAR entry {url}: content.text is not a string")
    encoding = content.get("encoding")
    if encoding in (None, ""):
        headers = _headers(entry["response"], url)
        try:
            return text.encode(_text_codec(headers))
        except UnicodeEncodeError:
            return text.encode("utf-8")
    if encoding != "base64":
        raise QuicbedError(f"HAR entry {url}: content encoding {encoding!r} is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise QuicbedError(f"HAR entry {url}: body is not valid base64") from None


def _read_entry(n: int, e: Any, reading: _Reading) -> None:
    """Keep, skip (and count) or refuse the HAR's entry number ``n`` (from 0)."""
    if not isinstance(e, dict) or not isinstance(e.get("request"), dict):
        raise QuicbedError(f"HAR entry {n}: no request")
    req, resp = e["request"], e.get("response")
    url = str(req.get("url", "")).split("#", 1)[0]
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("data", "blob"):
        reading.skipped["data"] += 1
        return
    if scheme not in ("http", "https"):
        reading.skipped["scheme"] += 1  # ws:, wss:, chrome-extension: ...: no replay
        return
    if not isinstance(resp, dict):
        raise QuicbedError(f"HAR entry {url}: no response")
    status = resp.get("status")
    if status == 0 or status is None:
        reading.skipped["failed"] += 1  # failed, blocked or cancelled: nothing was served
        return
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise QuicbedError(f"HAR entry {url}: status {status!r} is not an HTTP status")
    method = str(req.get("method", "")).upper()
    headers = _headers(resp, url)
    location = _location(resp, headers, url)
    if scheme == "http":
        if 300 <= status < 400 and location and location.startswith("https://"):
            reading.skipped["http_redirect"] += 1
            reading.upgrades.setdefault(url, location.split("#", 1)[0])
            return
        raise QuicbedError(f"HAR entry {url}: a replay serves https origins only")
    key = (method, url)
    if key in reading.seen:  # before the 304 check: a revalidation of a kept entry
        reading.skipped["duplicate"] += 1
        return
    if status == 304:
        raise QuicbedError(
            f"HAR entry {url}: 304 Not Modified has no body to replay; "
            "record with the cache disabled"
        )
    reading.seen.add(key)
    body = _body(e, url, status, method)
    sha = hashlib.sha256(body).hexdigest()
    reading.bodies.setdefault(sha, body)
    served = served_headers(headers)
    if location and not any(n == "location" for n, _ in served):
        served.append(("location", location))
    try:
        entry = Entry(
            method=method,
            url=url,
            status=status,
            headers=tuple(served),
            body=sha,
            size=len(body),
        )
    except ValidationError as exc:
        raise from_validation(exc, f"HAR entry {url}") from None
    timings: dict[str, Any] = e["timings"] if isinstance(e.get("timings"), dict) else {}
    reading.kept.append(_Kept(entry, rtt_of(timings), _ms(timings.get("wait"))))


def _location(resp: dict[str, Any], headers: list[tuple[str, str]], url: str) -> str | None:
    """Where a redirect points, absolute: its location header, else HAR's redirectURL."""
    loc = next((v for n, v in headers if n.lower() == "location"), None)
    loc = loc or resp.get("redirectURL") or None
    return urljoin(url, str(loc)) if loc else None


def _main_url(log: dict[str, Any], path: Path) -> str:
    """The URL of the page's first entry: of ``log.pages[0]`` by pageref, else the
    HAR's first entry."""
    entries = log["entries"]
    pages = log.get("pages")
    if isinstance(pages, list) and pages and isinstance(pages[0], dict) and "id" in pages[0]:
        pid = pages[0]["id"]
        first = next((e for e in entries if isinstance(e, dict) and e.get("pageref") == pid), None)
        if first is None:
            raise QuicbedError(f"HAR {path}: no main document (page {pid!r} has no entries)")
    elif entries:
        first = entries[0]
    else:
        raise QuicbedError(f"HAR {path}: no main document (no entries)")
    return str(first.get("request", {}).get("url", "")).split("#", 1)[0]


def _final(url: str, reading: _Reading, path: Path) -> Entry:
    """The main document: the entry at ``url``, redirects followed (an http:// start is
    the recording's upgrade hop, skipped), which must be a 2xx with content."""
    kept = {k.entry.url: k.entry for k in reading.kept if k.entry.method == "GET"}
    seen: list[str] = []
    while True:
        url = reading.upgrades.get(url, url)
        entry = kept.get(url)
        if entry is None:
            raise QuicbedError(
                f"HAR {path}: main document {url} is not among the kept entries "
                "(it failed or was skipped)"
            )
        if 300 <= entry.status < 400:
            loc = dict(entry.headers).get("location")
            if not loc or url in seen:
                break
            seen.append(url)
            url = urljoin(url, loc).split("#", 1)[0]
            continue
        break
    if not 200 <= entry.status < 300 or entry.size == 0:
        raise QuicbedError(
            f"HAR {path}: main document {url} is {entry.status} with {entry.size} bytes, "
            "not a 2xx with content"
        )
    return entry


def read_har(path: Path, name: str) -> tuple[Archive, dict[str, bytes]]:
    """The archive a HAR makes, and its bodies by SHA-256; nothing is written."""
    check_name(name)
    log, sha = _load(path)
    reading = _Reading()
    for n, e in enumerate(log["entries"]):
        _read_entry(n, e, reading)
    if not reading.kept:
        raise QuicbedError(f"HAR {path}: no entry a replay can serve")
    main = _final(_main_url(log, path), reading, path)
    origins = _origins(reading.kept)
    if len(origins) > MAX_ORIGINS:
        raise QuicbedError(
            f"HAR {path}: {len(origins)} origins; the testbed gives at most {MAX_ORIGINS} "
            "server addresses"
        )
    creator: dict[str, Any] = log["creator"] if isinstance(log.get("creator"), dict) else {}
    source = {
        "kind": "har",
        "file": path.name,
        "sha256": sha,
        "creator": f"{creator.get('name', '?')} {creator.get('version', '?')}".strip(),
        **{f"skipped_{k}": str(n) for k, n in reading.skipped.items()},
    }
    try:
        archive = Archive(name=name, main=main.url, source=source, origins=tuple(origins))
    except ValidationError as exc:
        raise from_validation(exc, f"HAR {path}") from None
    return archive, reading.bodies


def _origins(kept: list[_Kept]) -> list[Origin]:
    """Per origin, in the order of its first entry: its entries, its RTT (from its first
    entry that opened a connection) and each entry's server time (wait less that RTT)."""
    groups: dict[str, list[_Kept]] = {}
    for k in kept:
        groups.setdefault(split_url(k.entry.url)[0], []).append(k)
    out = []
    for origin, ks in groups.items():
        rtt = next((k.connect_rtt for k in ks if k.connect_rtt is not None), None)
        entries = tuple(
            k.entry.model_copy(
                update={
                    "wait_ms": None
                    if rtt is None or k.wait is None
                    else round(max(0.0, k.wait - rtt), 3)
                }
            )
            for k in ks
        )
        u = urlsplit(origin)
        out.append(
            Origin(
                origin=origin,
                host=u.hostname or "",
                port=u.port or 443,
                rtt_ms=rtt,
                entries=entries,
            )
        )
    return out


def import_har(path: Path, name: str, store: Path, *, force: bool = False) -> Archive:
    """Read the HAR at ``path`` into the archive ``store/name`` and return it. An
    archive of that name with other content is kept unless ``force``."""
    archive, bodies = read_har(path, name)
    pagestore.put(archive, bodies, store, force=force)
    return archive
