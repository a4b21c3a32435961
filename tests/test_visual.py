"""Visual progress per load (issue 40 item 4): frames captured by the page-load drivers
(client/visual.js) scored into Speed Index and visually complete by one rule
(quicbed.client.visual), stored (schema 6), exported, compared; a cell's ``visual``
setting in its identity; and the drivers' frames of a real page in Chromium, Chromium 72
and Firefox, scored and checked against the page's own FCP and final screenshot.

The unit tests draw their frames with Pillow, so every expected figure is arithmetic on
known pictures.
"""

from __future__ import annotations

import base64
import io
import random
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw
from test_paint import BROWSERS, HOST, Served, served, spec_for, three_loads  # noqa: F401

from quicbed.client import visual
from quicbed.client.har import metrics
from quicbed.errors import QuicbedError
from quicbed.model.link import make_condition
from quicbed.results.export import COLUMNS
from quicbed.results.rows import RunRow
from quicbed.results.store import Store
from quicbed.spec.cellconfig import make_cell
from quicbed.spec.sweepspec import load_spec, plan

W, H = 200, 120


def _picture(black_rows: int = 0, toolbar: int = 0, noise: bool = False, fmt: str = "JPEG") -> str:
    """A W x H white picture whose top ``black_rows`` rows of the content (below a
    ``toolbar`` of noise when asked) are black, base64."""
    img = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(img)
    if black_rows:
        draw.rectangle((0, toolbar, W - 1, toolbar + black_rows - 1), fill="black")
    if noise and toolbar:
        rnd = random.Random(black_rows)
        for x in range(W):
            for y in range(toolbar):
                img.putpixel((x, y), (rnd.randrange(256),) * 3)
    buf = io.BytesIO()
    img.save(buf, fmt, **({"quality": 80} if fmt == "JPEG" else {}))
    return base64.b64encode(buf.getvalue()).decode()


def _record(frames: list[tuple[float, int]], **over: Any) -> dict[str, Any]:
    """A driver's record: (ms, black rows) per frame; the final screenshot the last
    frame's picture as PNG."""
    last = frames[-1][1] if frames else 0
    return {
        "source": "test",
        "viewport": {"width": W, "height": H},
        "crop": None,
        "frames": [{"ms": ms, "jpeg": _picture(rows)} for ms, rows in frames],
        "final": {"png": _picture(last, fmt="PNG")},
        "started_ms": -20.0,
        "stopped_ms": 900.0,
        "error": None,
        **over,
    }


# --- the rule ---------------------------------------------------------------------------------
def test_speed_index_integrates_what_is_not_yet_shown() -> None:
    """White until 100 ms, half black until 300 ms, all black after: progress 0, 0.5, 1;
    Speed Index 100 x 1 + 200 x 0.5 = 200 ms (the frame before the time origin is on
    screen from 0), visually complete at 300 ms; frames that repeat one are no change."""
    rec = _record([(-10, 0), (40, 0), (100, H // 2), (200, H // 2), (300, H), (400, H)])
    figures, detail = visual.visual_figures(rec, fcp_ms=95.0)
    assert detail is not None and detail["problems"] == []
    prog = [f["progress"] for f in detail["frames"]]
    assert prog[0] == prog[1] == 0 and prog[-1] == prog[-2] == 1
    assert prog[2] == prog[3] == pytest.approx(0.5, abs=0.02)
    assert figures["speed_index_ms"] == pytest.approx(200, abs=5)
    assert figures["visual_complete_ms"] == 300
    assert (detail["first_change_ms"], detail["last_change_ms"]) == (100, 300)
    assert detail["final_difference"] < visual.FINAL_TOLERANCE


def test_the_content_area_alone_is_scored() -> None:
    """A toolbar of noise that changes in every frame (Firefox's frames hold the browser's
    own): cut off by the record's crop, it moves no progress and makes no change."""
    tb = 30
    rows = [(-5, 0), (50, 0), (150, 45), (250, 90)]
    frames = [{"ms": ms, "jpeg": _picture(r, toolbar=tb, noise=True)} for ms, r in rows]
    crop = {"x": 0.0, "y": tb / H, "width": 1.0, "height": (H - tb) / H}
    shot = Image.open(io.BytesIO(base64.b64decode(_picture(90, toolbar=tb, fmt="PNG"))))
    buf = io.BytesIO()
    shot.crop((0, tb, W, H)).save(buf, "PNG")  # the viewport alone, as BiDi's screenshot
    final = {"png": base64.b64encode(buf.getvalue()).decode()}
    rec = {**_record([(0, 0)]), "frames": frames, "crop": crop, "final": final}
    figures, detail = visual.visual_figures(rec, fcp_ms=140.0)
    assert detail is not None and detail["problems"] == []
    assert detail["first_change_ms"] == 150 and figures["visual_complete_ms"] == 250
    assert figures["speed_index_ms"] == pytest.approx(150 + 100 * 0.5, abs=6)
    uncut, _ = visual.visual_figures({**rec, "crop": None}, fcp_ms=140.0)
    assert uncut["speed_index_ms"] != figures["speed_index_ms"]  # the crop is what scores


@pytest.mark.parametrize(
    ("frames", "over", "fcp", "named"),
    [
        ([(-5, 0), (300, H)], {"error": "frame capture failed: gone"}, None, "gone"),
        ([(5, 0)], {}, None, "1 frame(s)"),
        ([(-5, 0), (100, 0)], {}, None, "drew nothing"),
        ([(120, 0), (300, H)], {}, 100.0, "no blank start"),
        ([(-5, H // 2), (300, H)], {}, None, "the first frame is not the blank page"),
        ([(-5, 0), (300, H)], {}, 100.0, "more than 100 ms after the first contentful"),
        ([(-5, 0), (300, H)], {"final": {"png": _picture(0, fmt="PNG")}}, None, "missed"),
        ([(-5, 0), (300, H)], {"final": {"error": "screenshot failed: x"}}, None, "x"),
        ([(-5, 0), (300, H)], {"final": {"png": "%%"}}, None, "not base64"),
    ],
)
def test_frames_that_cannot_support_the_figures_are_null_and_named(
    frames: list[tuple[float, int]], over: dict[str, Any], fcp: float | None, named: str
) -> None:
    figures, detail = visual.visual_figures(_record(frames, **over), fcp_ms=fcp)
    assert figures == {"speed_index_ms": None, "visual_complete_ms": None}
    assert detail is not None and any(named in p for p in detail["problems"]), detail


def test_a_frame_that_is_no_picture_is_named() -> None:
    rec = _record([(-5, 0), (300, H)])
    rec["frames"][1]["jpeg"] = base64.b64encode(b"not a jpeg").decode()
    figures, detail = visual.visual_figures(rec, fcp_ms=None)
    assert figures["speed_index_ms"] is None
    assert detail is not None and "frame 1 at 300.0 ms: not an image" in detail["problems"][0]
    rec["frames"][1]["ms"] = "soon"
    _, detail = visual.visual_figures(rec, fcp_ms=None)
    assert detail is not None and "time 'soon' is not a number" in detail["problems"][0]


def test_no_record_no_figures() -> None:
    assert visual.visual_figures(None, 10.0) == (
        {"speed_index_ms": None, "visual_complete_ms": None},
        None,
    )


def test_the_kept_frames_are_the_changes_and_the_final_screenshot(tmp_path: Path) -> None:
    """Frames that repeat the last kept one are not written; each kept frame's row names
    its file; the final screenshot beside them."""
    rec = _record([(-5, 0), (40, 0), (100, 60), (150, 60), (300, H)])
    _, detail = visual.visual_figures(rec, fcp_ms=90.0, folder=tmp_path / "h2-001")
    assert detail is not None
    files = [f.get("file") for f in detail["frames"]]
    assert files == ["000_-5ms.jpg", None, "002_100ms.jpg", None, "004_300ms.jpg"]
    assert sorted(p.name for p in (tmp_path / "h2-001").iterdir()) == sorted(
        [*(f for f in files if f), visual.FINAL_FILE]
    )


# --- stored, exported, in the identity --------------------------------------------------------
def test_visual_figures_are_stored_and_exported(tmp_path: Path) -> None:
    store = Store(tmp_path, create=True)
    try:
        cols = {r[1]: r[2] for r in store.db.execute("PRAGMA table_info(runs)")}
    finally:
        store.close()
    for k in visual.VISUAL_FIELDS:
        assert cols[k] == "REAL" and k in COLUMNS
        assert RunRow.model_fields[k].annotation == (float | None)


def test_a_package_carries_the_frames(tmp_path: Path) -> None:
    """A replication package holds a visual cell's kept frames and final screenshot
    (what its Speed Index was scored from), counted, and verifies with them."""
    import tarfile

    from quicbed.package.build import build_package
    from quicbed.package.verify import lines, verify

    root = tmp_path / "res"
    cfg = make_cell(condition=make_condition(rate_mbit=10, rtt_ms=36), page="5kb", visual=True)
    store = Store(root, create=True)
    try:
        cid = cfg.cell_id()
        store.add_cell(cid, cfg.model_dump(mode="json"))
        att = store.new_attempt(cid, {"quicbed": "test"})
        store.set_receipt(cid, att, {"passed": True, "checks": []})
        store.finish_attempt(cid, att, "done")
    finally:
        store.close()
    frames = root / "visual" / cid / str(att) / "h2-000"
    frames.mkdir(parents=True)
    (frames / "000_-3ms.jpg").write_bytes(base64.b64decode(_picture(0)))
    (frames / visual.FINAL_FILE).write_bytes(base64.b64decode(_picture(0, fmt="PNG")))
    pkg = build_package(root, tmp_path / "p.tar.gz")
    assert pkg.counts["frames"] == 2
    res = verify(pkg.path)
    assert res.ok, "\n".join(lines(res))
    with tarfile.open(pkg.path) as tar:
        names = {m.name for m in tar.getmembers()}
    assert f"p/results/visual/{cid}/{att}/h2-000/{visual.FINAL_FILE}" in names


def test_visual_is_in_a_cells_identity_only_when_on() -> None:
    cond = make_condition(rate_mbit=10, rtt_ms=36)
    plain = make_cell(condition=cond, page="5kb")
    assert make_cell(condition=cond, page="5kb", visual=False).cell_id() == plain.cell_id()
    on = make_cell(condition=cond, page="5kb", visual=True)
    assert on.visual and on.cell_id() != plain.cell_id()
    with pytest.raises(QuicbedError, match="visual: Input should be a valid boolean"):
        make_cell(condition=cond, page="5kb", visual="sometimes")
    with pytest.raises(QuicbedError, match="visual is for page loads"):
        make_cell(
            condition=cond,
            page="objects/10MB",
            kind="bulk",
            warmup=0,
            transfer={"size": "10MB", "flows": (("h3", 1),)},
            visual=True,
        )


def test_a_scenario_asks_for_frames(tmp_path: Path) -> None:
    body = (
        "format: 1\nname: v\ntestbed: local\ndefaults: {runs: 3}\nscenarios:\n"
        "  a: {rate: [10], rtt: [36], pages: [5kb], visual: true}\n"
        "  b: {rate: [10], rtt: [36], pages: [5kb]}\n"
    )
    (tmp_path / "v.yaml").write_text(body)
    spec = load_spec(tmp_path / "v.yaml")
    cells = {c.scenario: c.config for c in plan(spec)}
    assert cells["a"].visual and not cells["b"].visual
    (tmp_path / "w.yaml").write_text(body.replace("visual: true", "visual: yes please"))
    with pytest.raises(QuicbedError, match="visual"):
        load_spec(tmp_path / "w.yaml")


# --- real frames: the drivers in Chromium, Chromium 72 and Firefox ----------------------------
@pytest.mark.root
@pytest.mark.browser
@pytest.mark.parallel  # the figures are ordered against the page's own, never against a time
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n == "firefox" else n for n in BROWSERS]
)
def test_the_drivers_capture_frames_that_score_a_real_page(
    served: Served,  # noqa: F811 - test_paint's fixture
    name: str,
    tmp_path: Path,
) -> None:
    """Visual loads of the paint page (a heading, then a 300x300 image) in the kept tab
    and in a fresh context: frames from the blank start to the page as loaded, scored
    with no problem, the first change at FCP or after (20 ms before it at most), Speed
    Index between the first change and visually complete, which comes before the
    driver's paint read; the last frame like the final screenshot. The synthetic page
    draws nothing: null, named.
    (test_paint's loads, which do not ask, have no frames.)"""
    cls, spec = spec_for(served, name, visual=True)
    b = cls(spec, served.tb, served.logs)
    try:
        b.start()
        loads = three_loads(b)
    finally:
        b.stop()
    for r in loads:
        assert r["ok"], r["error"]
        assert r["visual"]["error"] is None and r["visual"]["started_ms"] < 0
    for i, r in enumerate(loads[:2]):
        m = metrics(r["har"], r["nav"], {HOST}, r["paint"])
        figures, detail = visual.visual_figures(r["visual"], m["fcp_ms"], tmp_path / str(i))
        assert detail is not None and detail["problems"] == [], detail["problems"]
        si, vc, first = (
            figures["speed_index_ms"],
            figures["visual_complete_ms"],
            detail["first_change_ms"],
        )
        assert si is not None and vc is not None
        # Chromium's screencast stamps a frame at its swap, and rounds FCP to 4 ms: its
        # first change came up to 10 ms before FCP (docs/benchmarks/visual.md)
        assert m["fcp_ms"] <= first + 20 and first <= si <= vc <= r["paint"]["read_ms"], (m, detail)
        assert detail["frames"][0]["ms"] <= m["fcp_ms"]
        kept = sorted(p.name for p in (tmp_path / str(i)).iterdir())
        assert visual.FINAL_FILE in kept and len(kept) >= 3  # the start, a change, the end
    figures, detail = visual.visual_figures(loads[2]["visual"], None)
    assert figures["speed_index_ms"] is None
    assert detail is not None and "drew nothing" in " ".join(detail["problems"])
