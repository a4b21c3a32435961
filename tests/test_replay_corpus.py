"""The page models (quicbed.replay.corpus): built as their YAML says, every reference an
entry, every image a PNG a decoder takes, the same bytes on every build.

Pure tests: no root, no browser. The pinned digests are the claim that every machine
builds the same archives; a deliberate change to the builder or the YAML updates them.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from collections import Counter
from functools import cache
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from quicbed.errors import QuicbedError
from quicbed.replay import corpus, models, pagestore
from quicbed.replay.archive import Archive, load

ROOT = Path(__file__).resolve().parent.parent
#: the archives' digests, the same on every machine and Python version
DIGESTS = {
    "p25": "b3985c6e39a5553fc9e051dae5818654e60aacbfcd9620f5b5251ba3ba1b3348",
    "p50": "06290abf9f0ff28cdac05efe6380853e901efb7d621f149c1c0b28ff343e7b60",
    "p90": "fe46ff4538f7af8e719efe8392675390fc3e73ac5a5908a2fd1439fe83a4c106",
}
TYPE_OF = {v.split(";")[0]: k for k, v in corpus.CONTENT_TYPE.items()}
#: a URL in an HTML attribute, a CSS url() or a script's string
URL = re.compile(r"""https://[^\s"'()<>]+""")
#: every reference a text body makes, absolute or not
REFERENCE = re.compile(r"""(?:src|href)="([^"]*)"|url\("?([^")]*)"?\)""")


@cache
def built(name: str) -> tuple[Archive, dict[str, bytes]]:
    return corpus.build(name, models.load())


MODELS = list(models.load().models)


@pytest.mark.parametrize("name", MODELS)
def test_a_model_builds_to_the_same_archive_every_time(name: str) -> None:
    a, _ = built(name)
    again, _ = corpus.build(name, models.load())
    assert again.digest() == a.digest()
    assert a.digest() == DIGESTS[name]


def test_the_build_does_not_depend_on_the_interpreter_hash_seed() -> None:
    code = (
        "from quicbed.replay import corpus, models; ms = models.load(); "
        "print(' '.join(corpus.build(n, ms)[0].digest() for n in ms.models))"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert outs == {" ".join(built(n)[0].digest() for n in MODELS) + "\n"}


@pytest.mark.parametrize("name", MODELS)
def test_counts_bytes_and_origins_are_the_models(name: str) -> None:
    ms = models.load()
    m = ms.models[name]
    a, bodies = built(name)
    kinds = Counter()
    sizes = Counter()
    for e in a.entries():
        kind = TYPE_OF[dict(e.headers)["content-type"].split(";")[0]]
        kinds[kind] += 1
        sizes[kind] += e.size
        assert len(bodies[e.body]) == e.size
    assert dict(kinds) == {k: b.count for k, b in m.types.items() if b.count}
    assert dict(sizes) == {k: b.kb * 1024 for k, b in m.types.items() if b.count}
    assert len(a.entries()) == m.requests
    assert len(a.origins) == m.origins
    first = [o for o in a.origins if o.host.endswith(f".{name}.example")]
    assert len(first) == m.first_party_hosts
    third = sum(len(o.entries) for o in a.origins if o not in first)
    assert third == models.third_party_requests(ms, m)
    assert all(o.host.endswith(".example") for o in a.origins)  # RFC 2606's reserved TLD
    assert a.main == f"https://www.{name}.example/"


def test_the_p90_model_has_at_least_20_origins() -> None:
    assert len(built("p90")[0].origins) >= 20


def texts(a: Archive, bodies: dict[str, bytes]) -> dict[str, str]:
    """The text bodies (HTML, CSS, JS) by URL."""
    return {
        e.url: bodies[e.body].decode("ascii")
        for e in a.entries()
        if TYPE_OF[dict(e.headers)["content-type"].split(";")[0]] in ("html", "css", "js")
    }


@pytest.mark.parametrize("name", MODELS)
def test_every_reference_is_an_entry_and_every_entry_is_referenced_once(name: str) -> None:
    a, bodies = built(name)
    named = Counter()
    for url, text in texts(a, bodies).items():
        for m in REFERENCE.finditer(text):
            ref = m.group(1) or m.group(2)
            assert ref.startswith(("https://", "data:")), (url, ref)  # no relative URLs
        for ref in URL.findall(text):
            hit = a.match("GET", ref)
            assert hit is not None and hit[1] == "url", (url, ref)
            named[ref] += 1
    entries = {e.url for e in a.entries()}
    assert set(named) == entries - {a.main}
    assert set(named.values()) == {1}  # a tree: each resource named by one body, once


@pytest.mark.parametrize("name", MODELS)
def test_the_tree_is_what_a_browser_follows(name: str) -> None:
    a, bodies = built(name)
    t = texts(a, bodies)
    page = t[a.main]
    head, body = page.split("</head>")
    assert '<link rel="icon" href="data:,">' in head  # no favicon request to miss
    assert '<link rel="stylesheet" href="https://' in head  # render-blocking style
    assert re.search(r'<script src="https://[^"]+"></script>', head)  # a sync script
    assert re.search(r'<script src="https://[^"]+" defer></script>', head)
    assert re.search(r'<script src="https://[^"]+" async></script>', head)
    assert re.search(r"<h1>\w", body) and re.search(r"<p>\w[\w ]{40,}", body)  # text to paint
    assert re.search(r'<img class="hero" src="https://[^"]+" .*fetchpriority="high"', body)
    css = "".join(v for k, v in t.items() if ".css" in k or "css2?" in k)
    assert "@font-face" in css and "background:url(" in css
    fonts = re.findall(r'font-family:"(qbf\d+)";src:url\("([^"]+)"\)', css)
    assert fonts and all(f'class="{f}"' in page for f, _ in fonts)  # each font is used
    bgs = re.findall(r"\.(qbg\d+)\{background", css)
    assert bgs and all(f'class="{b}"' in page for b in bgs)  # each background is shown
    js = "".join(v for k, v in t.items() if k not in (a.main,) and "<html" not in v)
    assert re.search(r'  img\("https://', js) and re.search(r'  get\("https://', js)
    if name != "p25":  # a tag manager's injected scripts and an ad's iframe
        assert re.search(r'  js\("https://', js)
        assert '<iframe src="https://' in page


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """A PNG's chunks, each CRC checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    out, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        kind, payload = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        (crc,) = struct.unpack(">I", data[i + 8 + n : i + 12 + n])
        assert zlib.crc32(kind + payload) == crc, kind
        out.append((kind, payload))
        i += 12 + n
    return out


@pytest.mark.parametrize("name", MODELS)
def test_every_image_is_a_png_that_decodes(name: str) -> None:
    a, bodies = built(name)
    pngs = [bodies[e.body] for e in a.entries() if dict(e.headers)["content-type"] == "image/png"]
    assert pngs
    for data in pngs:
        cs = chunks(data)
        assert cs[0][0] == b"IHDR" and cs[-1][0] == b"IEND"
        w, h, depth, colour = struct.unpack(">IIBB", cs[0][1][:10])
        channels = {2: 3, 0: 1}[colour]
        raw = zlib.decompress(b"".join(p for k, p in cs if k == b"IDAT"))
        assert depth == 8 and len(raw) == h * (1 + channels * w)
        assert all(raw[r * (1 + channels * w)] == 0 for r in range(h))  # filter: none
        img = mpimg.imread(io.BytesIO(data), format="png")
        assert img.shape[:2] == (h, w)


@pytest.mark.parametrize("name", MODELS)
def test_the_page_and_the_images_agree_on_sizes(name: str) -> None:
    a, bodies = built(name)
    page = bodies[a.match("GET", a.main)[0].body].decode()  # type: ignore[index]
    m = re.search(r'<img class="hero" src="([^"]+)" width="(\d+)" height="(\d+)"', page)
    assert m
    hero = bodies[a.match("GET", m.group(1))[0].body]  # type: ignore[index]
    assert struct.unpack(">II", hero[16:24]) == (int(m.group(2)), int(m.group(3)))
    # the hero is the page's largest image: largest contentful paint is its paint
    sizes = [e.size for e in a.entries() if dict(e.headers)["content-type"] == "image/png"]
    assert len(hero) == max(sizes)


def test_building_into_the_store_twice_changes_nothing(tmp_path: Path) -> None:
    ms = models.load()
    a, bodies = corpus.build("p25", ms)
    assert pagestore.put(a, bodies, tmp_path) == "new"
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert pagestore.put(*corpus.build("p25", ms), tmp_path) == "unchanged"
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before
    assert load(tmp_path / "p25").digest() == a.digest()


def test_unknown_and_impossible_models_are_refused(tmp_path: Path) -> None:
    ms = models.load()
    with pytest.raises(QuicbedError) as exc:
        models.check_models(["p50", "p99"], ms)
    assert str(exc.value) == "unknown page model 'p99' (defined: p25, p50, p90)"
    text = (ROOT / "workloads" / "replay-models.yaml").read_text()
    wide = tmp_path / "wide.yaml"
    wide.write_text(text.replace("third_party_hosts: 54", "third_party_hosts: 97"))
    with pytest.raises(QuicbedError) as exc:
        models.load(wide)
    assert str(exc.value) == f"{wide}: models.p90: 101 origins; the testbed has 100 addresses"
    thin = tmp_path / "thin.yaml"
    thin.write_text(text.replace("js:    {count: 11, kb: 244}", "js:    {count: 11, kb: 5}"))
    with pytest.raises(QuicbedError) as exc:
        models.load(thin)
    assert str(exc.value) == f"{thin}: models.p25: types.js: 5 KB cannot hold 11 files"


def test_the_command_builds_and_lists(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QUICBED_PAGES": str(tmp_path / "pages")}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "quicbed", "pages", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )

    first = run("build", "p25", "p50")
    assert first.returncode == 0, first.stderr
    assert [line.split(";")[0] for line in first.stdout.splitlines()] == ["p25: new", "p50: new"]
    again = run("build", "p25")
    assert again.stdout.startswith("p25: unchanged;")
    listed = run("list", "--json")
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert set(rows) == {"p25", "p50"}
    assert rows["p50"]["digest"] == DIGESTS["p50"]
    assert rows["p50"]["source"]["kind"] == "model" and rows["p50"]["origins"] == 24
    bad = run("build", "p99")
    assert (bad.returncode, bad.stderr) == (
        2,
        "quicbed: error: unknown page model 'p99' (defined: p25, p50, p90)\n",
    )


def test_a_package_carries_the_archives_its_cells_replayed_and_a_rerun_installs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replication package holds each replayed page's archive whole (results/pages/,
    checked against the digest its cells recorded), so a reviewer's rerun replays the
    same bytes: the rerun installs it into an empty page store once, and refuses a store
    that holds another archive under the name (issue 40: packages lacked them)."""
    from quicbed.model.link import make_condition
    from quicbed.package.build import snapshot_results
    from quicbed.results.store import Store
    from quicbed.spec.cellconfig import make_cell

    monkeypatch.setenv("QUICBED_PAGES", str(tmp_path / "mine"))
    assert pagestore.ensure("p25") is not None
    cfg = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="p25", runs=2)
    assert cfg.replay == load(tmp_path / "mine" / "p25").digest()
    store = Store(tmp_path / "res", create=True)
    store.add_cell(cfg.cell_id(), cfg.model_dump(mode="json"))
    store.finish_attempt(cfg.cell_id(), store.new_attempt(cfg.cell_id(), {}), "done")
    store.close()
    _, _, left_out = snapshot_results(tmp_path / "res", tmp_path / "pkg", no_har=False)
    assert left_out == []
    carried = tmp_path / "pkg" / pagestore.CARRIED
    assert load(carried / "p25").digest() == cfg.replay  # whole: its bodies checked too
    # a store that lost it, or holds another digest: left out, said why
    assert pagestore.carry({"p90": cfg.replay}, tmp_path / "x")[0].startswith(
        "replay archive p90: not in the page store"
    )
    assert "its cells replayed" in pagestore.carry({"p25": "0" * 64}, tmp_path / "y")[0]
    # another machine: an empty store gets the archive, once
    monkeypatch.setenv("QUICBED_PAGES", str(tmp_path / "elsewhere"))
    assert pagestore.install_carried(carried) == ["p25"]
    assert load(tmp_path / "elsewhere" / "p25").digest() == cfg.replay
    assert pagestore.install_carried(carried) == []
    # a store holding another archive under the name is refused by name
    monkeypatch.setenv("QUICBED_PAGES", str(tmp_path / "third"))
    other, bodies = corpus.build("p50", models.load())
    pagestore.put(other.model_copy(update={"name": "p25"}), bodies, tmp_path / "third")
    with pytest.raises(
        QuicbedError, match=r"replay archive p25 is in the page store .* QUICBED_PAGES"
    ):
        pagestore.install_carried(carried)
