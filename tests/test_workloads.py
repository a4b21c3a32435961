"""The page sets and the document tree generator."""

from __future__ import annotations

import hashlib
import json
import zlib
from pathlib import Path

import pytest

from quicbed import workloads
from quicbed.errors import QuicbedError


def test_reference_page_sets() -> None:
    ps = workloads.load()
    assert ps.kb == 1024
    single = ["5kb", "10kb", "100kb", "200kb", "500kb", "1mb", "10mb"]
    multi = ["1mbx1", "500kbx2", "200kbx5", "100kbx10", "10kbx100", "5kbx200"]
    assert list(ps.pages) == single + multi
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
