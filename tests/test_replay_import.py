"""HAR import (quicbed.replay.harimport): a HAR made here, read, stored and read back.

The HAR holds what DevTools writes: text and base64 bodies, several origins, a repeat,
a failed request, a data: URL, a websocket, the http:// hop before the page, a redirect
and a 204. Every refusal is checked by its exact line. Pure tests: no root, no browser.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quicbed.errors import QuicbedError
from quicbed.replay import harimport, pagestore
from quicbed.replay.archive import MAX_ORIGINS, load

ROOT = Path(__file__).resolve().parent.parent
PNG = bytes.fromhex("89504e470d0a1a0a") + bytes(range(256)) * 3  # binary, not UTF-8
HTML = "<!DOCTYPE html><title>Café</title><p>Bonjour, café crème.</p>"
LATIN1 = "body::after{content:'café'}"


def entry(
    url: str,
    status: int = 200,
    *,
    method: str = "GET",
    text: str | None = None,
    b64: bytes | None = None,
    mime: str = "text/plain",
    headers: list[tuple[str, str]] | None = None,
    timings: dict[str, float] | None = None,
    size: int | None = None,
    pageref: str = "page_1",
) -> dict[str, Any]:
    content: dict[str, Any] = {"mimeType": mime}
    if text is not None:
        content["text"], content["size"] = text, len(text.encode())
    if b64 is not None:
        content.update(text=base64.b64encode(b64).decode(), encoding="base64", size=len(b64))
    if size is not None:
        content["size"] = size
    hs = headers if headers is not None else [("Content-Type", mime)]
    return {
        "pageref": pageref,
        "startedDateTime": "2025-01-01T00:00:00.000Z",
        "request": {"method": method, "url": url, "headers": []},
        "response": {
            "status": status,
            "headers": [{"name": n, "value": v} for n, v in hs],
            "content": content,
            "redirectURL": "",
        },
        "timings": timings or {"connect": -1, "ssl": -1, "wait": 5},
    }


def har(entries: list[dict[str, Any]], pages: bool = True) -> dict[str, Any]:
    log: dict[str, Any] = {
        "version": "1.2",
        "creator": {"name": "WebInspector", "version": "537.36"},
        "entries": entries,
    }
    if pages:
        log["pages"] = [{"id": "page_1", "title": "x", "pageTimings": {}}]
    return {"log": log}


def good_entries() -> list[dict[str, Any]]:
    return [
        entry(  # the typed http:// address, upgraded: skipped
            "http://www.site.example/",
            307,
            headers=[("Location", "https://www.site.example/")],
            size=0,
        ),
        entry(
            "https://www.site.example/",
            text=HTML,
            mime="text/html",
            headers=[
                ("content-type", "text/html; charset=utf-8"),
                ("content-encoding", "br"),
                ("content-length", "51"),
                ("date", "Wed, 01 Jan 2025 00:00:00 GMT"),
                ("server", "nginx"),
                ("alt-svc", 'h3=":443"'),
                (":status", "200"),
                ("Connection", "keep-alive"),
                ("Set-Cookie", "a=1"),
                ("Cache-Control", "no-cache"),
            ],
            timings={"connect": 60.0, "ssl": 30.0, "wait": 50.0},
        ),
        entry(
            "https://cdn.site.example/logo.png#top",
            b64=PNG,
            mime="image/png",
            timings={"connect": 40.0, "ssl": 20.0, "wait": 25.0},
        ),
        entry("https://cdn.site.example/app.js?v=1", text="var a=1;", mime="text/javascript"),
        entry("https://cdn.site.example/app.js?v=1", text="var a=2;", mime="text/javascript"),
        entry("https://ads.other.example/x.js", 0, size=0),  # blocked: skipped
        entry("data:image/gif;base64,R0lGODlhAQABAAAAACw=", text="GIF"),
        entry("wss://push.site.example/socket", 101, size=0),
        entry(
            "https://cdn.site.example/latin.css",
            text=LATIN1,
            mime="text/css",
            headers=[("Content-Type", "text/css; charset=ISO-8859-1")],
        ),
        entry(
            "https://www.site.example/old",
            301,
            headers=[("Location", "/new")],
            size=0,
        ),
        entry("https://www.site.example/new", text='{"ok":true}', mime="application/json"),
        entry(  # over QUIC: ssl reported equal to connect
            "https://stats.site.example/collect",
            204,
            method="POST",
            size=0,
            timings={"connect": 15.0, "ssl": 15.0, "wait": 40.0},
        ),
    ]


def write(tmp_path: Path, data: Any, name: str = "site.har") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_har_becomes_an_archive(tmp_path: Path) -> None:
    path = write(tmp_path, har(good_entries()))
    a, bodies = harimport.read_har(path, "site")
    assert a.main == "https://www.site.example/"
    assert [o.origin for o in a.origins] == [
        "https://www.site.example",
        "https://cdn.site.example",
        "https://stats.site.example",
    ]
    www, cdn, stats = a.origins
    assert [e.url for e in www.entries] == [
        "https://www.site.example/",
        "https://www.site.example/old",
        "https://www.site.example/new",
    ]
    assert [e.url for e in cdn.entries] == [
        "https://cdn.site.example/logo.png",  # the fragment is not part of a URL
        "https://cdn.site.example/app.js?v=1",
        "https://cdn.site.example/latin.css",
    ]
    # round trips: TCP's is connect less ssl; QUIC's, where that leaves nothing, connect
    assert (www.rtt_ms, cdn.rtt_ms, stats.rtt_ms) == (30.0, 20.0, 15.0)
    # server time: wait less the origin's round trip, never below 0
    assert [e.wait_ms for e in www.entries] == [20.0, 0.0, 0.0]
    assert [e.wait_ms for e in cdn.entries] == [5.0, 0.0, 0.0]
    assert stats.entries[0].wait_ms == 25.0
    main = www.entries[0]
    assert main.headers == (
        ("content-type", "text/html; charset=utf-8"),
        ("set-cookie", "a=1"),
        ("cache-control", "no-cache"),
    )
    assert bodies[main.body] == HTML.encode("utf-8")
    logo, js, css = cdn.entries
    assert bodies[logo.body] == PNG and logo.size == len(PNG)
    assert bodies[js.body] == b"var a=1;"  # the first of a repeated request is kept
    assert bodies[css.body] == LATIN1.encode("latin-1")  # back in its own charset
    old = www.entries[1]
    assert (old.status, dict(old.headers)["location"], old.size) == (301, "/new", 0)
    beacon = stats.entries[0]
    assert (beacon.method, beacon.status, beacon.size) == ("POST", 204, 0)
    assert bodies[beacon.body] == b""
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert a.source == {
        "kind": "har",
        "file": "site.har",
        "sha256": sha,
        "creator": "WebInspector 537.36",
        "skipped_failed": "1",
        "skipped_duplicate": "1",
        "skipped_data": "1",
        "skipped_scheme": "1",
        "skipped_http_redirect": "1",
    }


def test_import_stores_it_and_it_reads_back(tmp_path: Path) -> None:
    path = write(tmp_path, har(good_entries()))
    store = tmp_path / "pages"
    a = harimport.import_har(path, "site", store)
    back = load(store / "site")  # every body present, of its size and hash
    assert back == a and back.digest() == a.digest()
    for e in back.entries():
        data = (store / "site" / "bodies" / e.body).read_bytes()
        assert len(data) == e.size and hashlib.sha256(data).hexdigest() == e.body
    logo = back.match("GET", "https://cdn.site.example/logo.png")
    assert logo is not None and (store / "site" / "bodies" / logo[0].body).read_bytes() == PNG


def test_the_imported_archive_matches_by_the_rule(tmp_path: Path) -> None:
    a, _ = harimport.read_har(write(tmp_path, har(good_entries())), "site")
    exact = a.match("GET", "https://cdn.site.example/app.js?v=1")
    assert exact is not None and exact[1] == "url"
    buster = a.match("GET", "https://cdn.site.example/app.js?v=99")
    assert buster is not None and buster[1] == "path" and buster[0].url.endswith("?v=1")
    beacon = a.match("POST", "https://stats.site.example/collect")
    assert beacon is not None and beacon[0].status == 204
    assert a.match("GET", "https://stats.site.example/collect") is None  # method differs
    assert a.match("GET", "https://ads.other.example/x.js") is None  # failed: no origin
    assert a.match("GET", "https://www.site.example/missing") is None


def test_without_pages_the_first_entry_is_the_main_document(tmp_path: Path) -> None:
    es = good_entries()[1:4]
    a, _ = harimport.read_har(write(tmp_path, har(es, pages=False)), "site")
    assert a.main == "https://www.site.example/"


def test_the_main_document_is_found_through_redirects(tmp_path: Path) -> None:
    es = [
        entry("https://site.example/", 301, headers=[("location", "https://www.site.example/")]),
        *good_entries()[1:3],
    ]
    a, _ = harimport.read_har(write(tmp_path, har(es)), "site")
    assert a.main == "https://www.site.example/"
    assert a.origins[0].entries[0].status == 301  # the redirect is served as recorded


def refusal(tmp_path: Path, data: Any) -> str:
    with pytest.raises(QuicbedError) as exc:
        harimport.read_har(write(tmp_path, data), "site")
    return str(exc.value)


def test_refusals_name_the_bad_value(tmp_path: Path) -> None:
    p = tmp_path / "site.har"
    main = entry("https://www.site.example/", text=HTML, mime="text/html")
    assert refusal(tmp_path, "{not json") == (
        f"HAR {p}: not JSON (Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1))"
    )
    assert refusal(tmp_path, {"log": {"version": "1.2"}}) == (
        f"HAR {p}: not a HAR (no log.entries list)"
    )
    assert refusal(tmp_path, [1, 2]) == f"HAR {p}: not a HAR (no log.entries list)"
    img = entry("https://cdn.site.example/a.png", mime="image/png", size=1200)
    assert refusal(tmp_path, har([main, img])) == (
        "HAR entry https://cdn.site.example/a.png: no content (status 200, size 1200); "
        "save the HAR with content"
    )
    bad = entry("https://cdn.site.example/a.png", mime="image/png")
    bad["response"]["content"].update(text="iVBOR#w0KG", encoding="base64", size=8)
    assert refusal(tmp_path, har([main, bad])) == (
        "HAR entry https://cdn.site.example/a.png: body is not valid base64"
    )
    other = entry("https://www.site.example/", text=HTML, mime="text/html", pageref="page_2")
    assert refusal(tmp_path, har([other])) == (
        f"HAR {p}: no main document (page 'page_1' has no entries)"
    )
    missing = entry("https://www.site.example/", text="gone", mime="text/html", status=404)
    assert refusal(tmp_path, har([missing])) == (
        f"HAR {p}: main document https://www.site.example/ is 404 with 4 bytes, "
        "not a 2xx with content"
    )
    empty = entry("https://www.site.example/", text="", mime="text/html")
    assert refusal(tmp_path, har([empty])) == (
        f"HAR {p}: main document https://www.site.example/ is 200 with 0 bytes, "
        "not a 2xx with content"
    )
    failed = entry("https://www.site.example/", 0, size=0)
    script = entry("https://cdn.site.example/b.js", text="1", mime="text/javascript")
    assert refusal(tmp_path, har([failed, script])) == (
        f"HAR {p}: main document https://www.site.example/ is not among the kept entries "
        "(it failed or was skipped)"
    )
    plain = entry("http://cdn.site.example/a.js", text="1", mime="text/javascript")
    assert refusal(tmp_path, har([main, plain])) == (
        "HAR entry http://cdn.site.example/a.js: a replay serves https origins only"
    )
    cached = entry("https://cdn.site.example/a.js", 304, size=0)
    assert refusal(tmp_path, har([main, cached])) == (
        "HAR entry https://cdn.site.example/a.js: 304 Not Modified has no body to replay; "
        "record with the cache disabled"
    )
    fresh = entry("https://cdn.site.example/a.js", text="1")
    a, _ = harimport.read_har(write(tmp_path, har([main, fresh, cached])), "site")
    assert a.source["skipped_duplicate"] == "1"  # a 304 of a kept request is a repeat
    many = [main] + [
        entry(f"https://h{i}.site.example/a.js", text="1", mime="text/javascript")
        for i in range(MAX_ORIGINS)
    ]
    assert refusal(tmp_path, har(many)) == (
        f"HAR {p}: 101 origins; the testbed gives at most 100 server addresses"
    )


def test_names_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(QuicbedError) as exc:
        harimport.read_har(tmp_path / "none.har", "site")
    assert str(exc.value) == f"HAR {tmp_path / 'none.har'}: no such file"
    with pytest.raises(QuicbedError) as exc:
        harimport.check_name("My Site")
    assert str(exc.value) == (
        "archive name 'My Site': use lower-case letters, digits, '.', '_' and '-' "
        "(starting with a letter or digit)"
    )
    assert harimport.default_name(Path("/x/News Site 2025.har")) == "news-site-2025"
    assert harimport.default_name(Path("www.example.com.har")) == "www.example.com"


def test_the_store_keeps_an_archive_and_refuses_another_by_its_name(tmp_path: Path) -> None:
    store = tmp_path / "pages"
    first = write(tmp_path, har(good_entries()), "a.har")
    a, bodies = harimport.read_har(first, "site")
    assert pagestore.put(a, bodies, store) == "new"
    manifest = store / "site" / "archive.json"
    stamp = manifest.stat().st_mtime_ns
    assert pagestore.put(a, bodies, store) == "unchanged"
    assert manifest.stat().st_mtime_ns == stamp
    es = good_entries()
    es[1]["response"]["content"]["text"] = "<p>another page</p>"
    b, other = harimport.read_har(write(tmp_path, har(es), "b.har"), "site")
    with pytest.raises(QuicbedError) as exc:
        pagestore.put(b, other, store)
    assert str(exc.value) == (
        f"page store {store}: site exists with other content (digest {a.digest()[:12]}); "
        "--force replaces it"
    )
    assert load(store / "site").digest() == a.digest()  # untouched
    assert pagestore.put(b, other, store, force=True) == "replaced"
    assert load(store / "site").digest() == b.digest()
    kept = {p.name for p in (store / "site" / "bodies").iterdir()}
    assert kept == {e.body for e in b.entries()}  # the old page's bodies are gone
    assert sorted(p.name for p in store.iterdir()) == ["site"]  # no leftovers


def quicbed(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "quicbed", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
    )


def test_the_command_imports_and_refuses_in_one_line(tmp_path: Path) -> None:
    write(tmp_path, har(good_entries()), "site.har")
    ok = quicbed("pages", "import", "site.har", "--store", "pages", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("site: new; 3 origins, 7 entries, ")
    assert "skipped: failed 1, duplicate 1, data 1, scheme 1, http_redirect 1" in ok.stdout
    again = quicbed("pages", "import", "site.har", "--store", "pages", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("site: unchanged;")
    shown = quicbed("pages", "show", "site", "--store", "pages", "--json", cwd=tmp_path)
    data = json.loads(shown.stdout)
    assert [(o["host"], o["rtt_ms"], o["entries"]) for o in data["origins"]] == [
        ("www.site.example", 30.0, 3),
        ("cdn.site.example", 20.0, 3),
        ("stats.site.example", 15.0, 1),
    ]
    es = good_entries()
    es[1]["response"]["content"]["text"] = "<p>another page</p>"
    write(tmp_path, har(es), "other.har")
    digest = json.loads(shown.stdout)["digest"]
    cases = [
        (["pages", "import", "gone.har"], "quicbed: error: HAR gone.har: no such file"),
        (
            ["pages", "import", "other.har", "--name", "site", "--store", "pages"],
            f"quicbed: error: page store pages: site exists with other content (digest "
            f"{digest[:12]}); --force replaces it",
        ),
        (
            ["pages", "import", "site.har", "--name", "Bad Name", "--store", "pages"],
            "quicbed: error: archive name 'Bad Name': use lower-case letters, digits, '.', "
            "'_' and '-' (starting with a letter or digit)",
        ),
        (
            ["pages", "show", "nope", "--store", "pages"],
            "quicbed: error: page store pages: no archive 'nope' (stored: site)",
        ),
    ]
    for argv, line in cases:
        cp = quicbed(*argv, cwd=tmp_path)
        assert (cp.returncode, cp.stderr) == (2, line + "\n"), argv
    forced = quicbed(
        "pages",
        "import",
        "other.har",
        "--name",
        "site",
        "--store",
        "pages",
        "--force",
        cwd=tmp_path,
    )
    assert forced.returncode == 0 and forced.stdout.startswith("site: replaced;")
