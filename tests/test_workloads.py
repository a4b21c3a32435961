"""The page sets and the document tree generator."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import pytest

from quicbed.errors import QuicbedError
from quicbed.spec import workloads


def test_reference_page_sets() -> None:
    ps = workloads.load()
    assert ps.kb == 1024
    single = ["5kb", "10kb", "100kb", "200kb", "500kb", "1mb", "10mb"]
    multi = ["1mbx1", "500kbx2", "200kbx5", "100kbx10", "10kbx100", "5kbx200"]
    beta = ["bme-3.3mb", "bme-1mb", "bme-300kb"]
    assert list(ps.pages) == single + multi + beta
    for m in multi:  # the multi-object pages all total 1 MB
        p = ps.pages[m]
        assert p.image_bytes(ps.kb) * p.count == pytest.approx(1024 * 1024, rel=0.03)


def test_generate_is_deterministic_and_exact(tmp_path: Path) -> None:
    m = workloads.generate(tmp_path / "a", ["5kb", "10kbx100"])
    m2 = workloads.generate(tmp_path / "b", ["5kb", "10kbx100"])
    assert m["pages"] == m2["pages"]
    img = (tmp_path / "a" / "5kb" / "img-000.jpg").read_bytes()
    assert len(img) == 5 * 1024 and img[:3] == b"\xff\xd8\xff" and img[-2:] == b"\xff\xd9"
    assert len(zlib.compress(img, 9)) > 0.99 * len(img)  # incompressible
    page = m["pages"]["10kbx100"]
    assert page["objects"] == 101 and page["image_bytes"] == 10240
    html = (tmp_path / "a" / "10kbx100" / "index.html").read_text()
    assert html.count("<img ") == 100 and 'rel="icon" href="data:,"' in html
    f = page["files"]["img-042.jpg"]
    data = (tmp_path / "a" / "10kbx100" / "img-042.jpg").read_bytes()
    assert f == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert page["bytes"] == sum(x["bytes"] for x in page["files"].values())
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["pages"]["5kb"]


def test_regenerating_rewrites_nothing(tmp_path: Path) -> None:
    workloads.generate(tmp_path, ["100kb"])
    f = tmp_path / "100kb" / "img-000.jpg"
    before = f.stat().st_mtime_ns
    workloads.generate(tmp_path, ["100kb"])
    assert f.stat().st_mtime_ns == before


def test_unknown_page_lists_the_defined_ones(tmp_path: Path) -> None:
    with pytest.raises(QuicbedError, match=r"unknown page '7kb' \(defined: 5kb, 10kb"):
        workloads.generate(tmp_path, ["7kb"])
    assert not (tmp_path / "7kb").exists()


def test_bad_definitions_name_the_value(tmp_path: Path) -> None:
    bad = tmp_path / "pages.yaml"
    bad.write_text("kb: 1024\npages:\n  x: {size: 5kilo, count: 1}\n")
    with pytest.raises(QuicbedError, match="size '5kilo'"):
        workloads.load(bad)


EXPECTED_10KBX100 = "b020640c1668fa4273b02537037124b958b90465110aa17965195be77ce47310"


def test_the_beta_study_pages_mix_two_image_sizes(tmp_path: Path) -> None:
    """Seed 002's pages: 15 KB and 135 KB JPEG-only images, 153+8, 50+2 and 11+1."""
    ps = workloads.load()
    want = {"bme-3.3mb": (153, 8), "bme-1mb": (50, 2), "bme-300kb": (11, 1)}
    for name, (small, large) in want.items():
        p = ps.pages[name]
        assert p.images == small + large
        assert p.image_sizes(ps.kb) == [15 * 1024] * small + [135 * 1024] * large
        assert p.total_image_bytes(ps.kb) == (15 * small + 135 * large) * 1024
    m = workloads.generate(tmp_path, ["bme-300kb"])["pages"]["bme-300kb"]
    assert m["objects"] == 13 and "image_bytes" not in m
    assert m["parts"] == [{"image_bytes": 15360, "count": 11}, {"image_bytes": 138240, "count": 1}]
    assert m["files"]["img-010.jpg"]["bytes"] == 15360
    assert m["files"]["img-011.jpg"]["bytes"] == 138240
    assert m["bytes"] == 300 * 1024 + len((tmp_path / "bme-300kb" / "index.html").read_bytes())
    img = (tmp_path / "bme-300kb" / "img-011.jpg").read_bytes()
    assert img[:3] == b"\xff\xd8\xff" and img[-2:] == b"\xff\xd9"
    # the body of an image depends on its page and index only, as for every page
    assert img == workloads.body("bme-300kb", 11, 138240)
    with pytest.raises(QuicbedError, match="several sizes"):
        ps.pages["bme-1mb"].image_bytes(ps.kb)


def test_existing_pages_keep_their_bytes(tmp_path: Path) -> None:
    """Pages of one image size are generated as before parts existed: the manifest entry
    and every file's hash are those quicbed made then (computed at 7108f35)."""
    m = workloads.generate(tmp_path, ["10kbx100"])["pages"]["10kbx100"]
    assert sorted(m) == ["bytes", "files", "image_bytes", "objects"]
    blob = json.dumps(m, sort_keys=True).encode()
    assert hashlib.sha256(blob).hexdigest() == EXPECTED_10KBX100


@pytest.mark.parametrize(
    "body, match",
    [
        ("{size: 5KB, count: 1, parts: [{size: 5KB, count: 1}]}", "not both"),
        ("{parts: []}", "parts is empty"),
        ("{size: 5KB}", "needs size and count"),
        ("{parts: [{size: 5kilo, count: 1}]}", "size '5kilo'"),
        ("{parts: [{size: 5KB, count: 0}]}", "count must be >= 1"),
    ],
)
def test_bad_parts_name_the_value(tmp_path: Path, body: str, match: str) -> None:
    bad = tmp_path / "pages.yaml"
    bad.write_text(f"kb: 1024\npages:\n  x: {body}\n")
    with pytest.raises(QuicbedError, match=match):
        workloads.load(bad)
