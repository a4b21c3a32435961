"""A page load's visual progress from the frames its browser showed: Speed Index and
visually complete, beside FCP and LCP.

The page-load drivers capture the frames (client/visual.js: Chromium's screencast, the
Gecko profiler's screenshots in Firefox) on the clock of the navigation's time origin;
this module scores them, so the rule is one, in Python, for every browser, and checkable
from the frames it keeps.

The rule (WebPageTest's histogram visual progress, as its documentation defines Speed
Index; written here from that definition):

- each frame is cut to the page's content area (Firefox's frames hold the browser's
  toolbar: the record's ``crop``) and described by its colour histogram: R, G and B, each
  in ``BINS`` bins, as fractions of the frame's pixels (so frames of other sizes compare);
- the start is the capture's first frame (the blank page every load starts from), the end
  its last (the page after the paint read); D(a, b) is the L1 distance of two histograms;
- a frame's progress is 1 - D(frame, end) / D(start, end), clamped to [0, 1];
- Speed Index is the integral, from the time origin to the last frame, of 1 - progress of
  the frame on screen (a frame is on screen from its time to the next frame's); before the
  first frame after the time origin, the frame before it is on screen;
- visually complete is the time of the first frame from which every frame's progress is at
  least ``COMPLETE`` (bins absorb the JPEG noise of a frame whose pixels did not change;
  what is left of it stays below 1 - COMPLETE).

The last frame is checked against a screenshot taken after the capture stopped, by another
path of the browser: their thumbnails (THUMB_WIDTH px wide, box-filtered) may differ by at
most FINAL_TOLERANCE on average.

A figure is null, with the reason named, where the frames cannot support it: no frames or
one, a first frame that is not the white blank page or is later than the first
contentful paint (no blank start),
a first visual change later than FCP by more than ``FCP_SLACK_MS`` (frames missed, or the
capture's clock not the page's), a last frame unlike the screenshot taken after the
capture (the capture missed the page's last paints),
or a page whose last frame looks like its start (nothing drawn). Like FCP and LCP, these
figures never decide whether a load counts.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

#: the final screenshot's file among a load's kept frames
FINAL_FILE = "final.png"
#: the load's visual figures that become its columns (ms after the time origin)
VISUAL_FIELDS = ("speed_index_ms", "visual_complete_ms")
#: histogram bins per colour channel: 256 levels in 32 bins of 8, so JPEG's few-level
#: noise in a frame whose pixels did not change mostly stays in its bin
BINS = 32
#: the progress from which a frame counts as visually complete
COMPLETE = 0.99
#: the least difference between two frames that is a visual change, as a share of the
#: colour mass (D / 6): frames of unchanged pixels differed by at most 0.005 % here (JPEG
#: noise), a 400x300 image appearing on a 1366x682 page by 9 %
CHANGE = 0.001
#: how much later than FCP the first visual change may be: the frame that shows the first
#: contentful paint is composited after it (Chromium's screencast frames came 10 ms
#: before to 11 ms after FCP here, Firefox's composited screenshots 0-48 ms after:
#: docs/benchmarks/visual.md); later than this, frames were missed or the clocks differ
FCP_SLACK_MS = 100.0
#: the share of the first frame's pixels that must be white (each channel in the top
#: bin): it is the blank page every load starts from, not the page before it
BLANK = 0.99
#: the last frame and the final screenshot are compared as thumbnails this many px wide
#: (box-filtered): the two are drawn by different paths at different sizes, and a page's
#: noise-like images (the corpus's) have unlike histograms at two scales but the same
#: mean colour per thumbnail pixel
THUMB_WIDTH = 48
#: the most they may differ: the mean absolute difference of the thumbnails' channels, as
#: a share of full scale (the same page: 0.7 % here; the frame before the last image
#: painted: 17 %)
FINAL_TOLERANCE = 0.03


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its time (ms after the time origin) and histogram."""

    ms: float
    hist: np.ndarray  # (3, BINS) fractions
    jpeg: bytes


def _decode(data: str, what: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError(f"{what} is not base64") from None


def _image(image: bytes, crop: dict[str, float] | None) -> Image.Image:
    """An encoded image (JPEG or PNG) as RGB, cut to ``crop`` (fractions of its width
    and height)."""
    try:
        img = Image.open(io.BytesIO(image)).convert("RGB")
    except (UnidentifiedImageError, OSError) as exc:
        raise ValueError(f"not an image ({exc})") from None
    if crop:
        w, h = img.size
        box = (
            round(crop["x"] * w),
            round(crop["y"] * h),
            round((crop["x"] + crop["width"]) * w),
            round((crop["y"] + crop["height"]) * h),
        )
        if box[2] <= box[0] or box[3] <= box[1]:
            raise ValueError(f"crop {crop} leaves nothing of a {w}x{h} frame")
        img = img.crop(box)
    return img


def histogram(image: bytes, crop: dict[str, float] | None = None) -> np.ndarray:
    """The (3, BINS) colour histogram of an encoded image cut to ``crop``, as fractions
    of its pixels."""
    px = np.asarray(_image(image, crop), dtype=np.uint8).reshape(-1, 3) // (256 // BINS)
    out = np.stack([np.bincount(px[:, c], minlength=BINS) for c in range(3)]).astype(float)
    return out / max(len(px), 1)


def thumbnail_difference(a: bytes, b: bytes, crop_a: dict[str, float] | None = None) -> float:
    """The mean absolute difference (0..1) of two images' thumbnails, THUMB_WIDTH px wide
    at ``a``'s aspect (``a`` cut to ``crop_a`` first)."""
    ia, ib = _image(a, crop_a), _image(b, None)
    size = (THUMB_WIDTH, max(1, round(THUMB_WIDTH * ia.height / ia.width)))
    ta = np.asarray(ia.resize(size, Image.Resampling.BOX), dtype=float)
    tb = np.asarray(ib.resize(size, Image.Resampling.BOX), dtype=float)
    return float(np.abs(ta - tb).mean() / 255)


def distance(a: np.ndarray, b: np.ndarray) -> float:
    """L1 distance of two histograms (0: alike; at most 2 per channel)."""
    return float(np.abs(a - b).sum())


def frames_of(record: dict[str, Any]) -> list[Frame]:
    """The record's frames in time order, decoded; a frame that is not an image is an
    error naming it."""
    crop = record.get("crop")
    out = []
    for i, f in enumerate(record.get("frames") or []):
        ms = f.get("ms")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not math.isfinite(ms):
            raise ValueError(f"frame {i}: time {ms!r} is not a number of ms")
        jpeg = _decode(f.get("jpeg", ""), f"frame {i}")
        try:
            out.append(Frame(float(ms), histogram(jpeg, crop), jpeg))
        except ValueError as exc:
            raise ValueError(f"frame {i} at {ms:.1f} ms: {exc}") from None
    return sorted(out, key=lambda f: f.ms)


def _changed(a: Frame, b: Frame) -> bool:
    return distance(a.hist, b.hist) / 6 > CHANGE


def progress(frames: list[Frame]) -> list[float]:
    """Each frame's visual progress, from the first frame (0) to the last (1); all
    zero when the last looks like the first."""
    start, end = frames[0].hist, frames[-1].hist
    total = distance(start, end)
    if total == 0:
        return [0.0 for _ in frames]
    return [min(1.0, max(0.0, 1 - distance(f.hist, end) / total)) for f in frames]


def speed_index(times: list[float], prog: list[float]) -> float:
    """The integral from 0 (the time origin) to the last frame of 1 - progress on screen."""
    total = 0.0
    for i in range(len(times) - 1):
        lo, hi = max(times[i], 0.0), max(times[i + 1], 0.0)
        total += (1 - prog[i]) * (hi - lo)
    return total


def visual_figures(
    record: dict[str, Any] | None, fcp_ms: float | None, folder: Path | None = None
) -> tuple[dict[str, float | None], dict[str, Any] | None]:
    """``speed_index_ms`` and ``visual_complete_ms`` of a load from its driver's
    ``visual`` record, and the load's visual detail (per frame its time and progress,
    first and last visual change, the final check, the problems). ``fcp_ms`` (the same
    load's) bounds when its first change may come. With ``folder``, the frames are kept
    there (save_frames) and each kept frame's row names its file. No record: nulls and
    no detail."""
    figures: dict[str, float | None] = dict.fromkeys(VISUAL_FIELDS)
    if record is None:
        return figures, None
    detail: dict[str, Any] = {
        k: record.get(k) for k in ("source", "viewport", "crop", "started_ms", "stopped_ms")
    }
    problems: list[str] = []
    detail["problems"] = problems
    if record.get("error"):
        problems.append(str(record["error"]))
        return figures, detail
    try:
        frames = frames_of(record)
    except ValueError as exc:
        problems.append(str(exc))
        return figures, detail
    if len(frames) < 2:
        problems.append(f"{len(frames)} frame(s): the capture needs a start and an end")
        return figures, detail
    prog = progress(frames)
    times = [f.ms for f in frames]
    detail["frames"] = [
        {"ms": round(t, 3), "progress": round(p, 4)} for t, p in zip(times, prog, strict=True)
    ]
    changed = [i for i in range(1, len(frames)) if _changed(frames[i], frames[i - 1])]
    first = times[changed[0]] if changed else None
    detail["first_change_ms"] = first
    detail["last_change_ms"] = times[changed[-1]] if changed else None
    problems += _checks(record, frames, times, first, fcp_ms, detail)
    if folder is not None:
        for row, name in zip(detail["frames"], save_frames(frames, folder), strict=True):
            if name:
                row["file"] = name
        final = (record.get("final") or {}).get("png")
        if final:  # what the last frame was checked against
            with contextlib.suppress(ValueError):  # a bad one is named by the check
                (folder / FINAL_FILE).write_bytes(_decode(final, "the final screenshot"))
    if not _changed(frames[0], frames[-1]):
        problems.append(
            "the last frame looks like the first: the page drew nothing the capture saw"
        )
    if problems:
        return figures, detail
    complete = next(times[i] for i in range(len(prog)) if all(p >= COMPLETE for p in prog[i:]))
    figures["speed_index_ms"] = round(speed_index(times, prog), 3)
    figures["visual_complete_ms"] = round(max(complete, 0.0), 3)
    return figures, detail


def _checks(
    record: dict[str, Any],
    frames: list[Frame],
    times: list[float],
    first_change: float | None,
    fcp_ms: float | None,
    detail: dict[str, Any],
) -> list[str]:
    """What makes the frames unfit to score: a start that is not the blank page, a first
    change too late for the page's FCP, an end unlike the page's final screenshot."""
    problems = []
    white = float(frames[0].hist[:, -1].min())
    if white < BLANK:
        problems.append(
            f"the first frame is not the blank page ({white:.0%} white, at least "
            f"{BLANK:.0%}): the capture began on another picture"
        )
    if fcp_ms is not None and times[0] > fcp_ms:
        problems.append(
            f"the first frame ({times[0]:.1f} ms) is later than the first contentful "
            f"paint ({fcp_ms:.1f} ms): no blank start"
        )
    if fcp_ms is not None and first_change is not None and first_change > fcp_ms + FCP_SLACK_MS:
        problems.append(
            f"the first visual change ({first_change:.1f} ms) is more than "
            f"{FCP_SLACK_MS:.0f} ms after the first contentful paint ({fcp_ms:.1f} ms): "
            "frames missed, or the capture's clock is not the page's"
        )
    final = record.get("final") or {}
    if final.get("error") or not final.get("png"):
        problems.append(str(final.get("error") or "no final screenshot to check the last frame by"))
        return problems
    try:
        shot = _decode(final["png"], "the final screenshot")
        off = thumbnail_difference(frames[-1].jpeg, shot, record.get("crop"))
    except ValueError as exc:
        problems.append(f"the final screenshot: {exc}")
        return problems
    detail["final_difference"] = round(off, 4)
    if off > FINAL_TOLERANCE:
        problems.append(
            f"the last frame differs from the final screenshot by {off:.1%} (at most "
            f"{FINAL_TOLERANCE:.0%}): the capture missed the page's last paints"
        )
    return problems


def save_frames(frames: list[Frame], folder: Path) -> list[str | None]:
    """The frames as JPEG files in ``folder`` (``NNN_<ms>ms.jpg``): the first, and each
    that is a visual change from the last one kept (the others repeat it), for a reader
    to see what was scored. Per frame its file name, or None where it was not kept."""
    folder.mkdir(parents=True, exist_ok=True)
    names: list[str | None] = []
    kept: Frame | None = None
    for i, f in enumerate(frames):
        if kept is not None and not _changed(f, kept):
            names.append(None)
            continue
        kept = f
        name = f"{i:03d}_{f.ms:.0f}ms.jpg"
        (folder / name).write_bytes(f.jpeg)
        names.append(name)
    return names
