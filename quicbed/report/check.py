"""What a reader sees: a report rendered in headless Chromium, and read back as a reader
would read it.

The report's own tests read numbers and SVG labels; none of them look at the page. This
check opens ``index.html`` in the browser quicbed already drives (the current Chromium,
with the switches that keep it off the network) and fails on what a reviewer would stop
at: visible text that is a placeholder (``None``, ``nan``, ``null``, ``undefined``, a
``Traceback``), a table with a header and no rows, an image that does not load, a link
to a file of the report or an anchor that is not there, and a page wider than the
browser's window (the main column overflowing sideways). It keeps a screenshot of the
whole page.

How: a copy of the page, beside it (so relative links resolve the same), with one
script appended that measures the rendered page and writes its findings into the DOM;
Chromium prints the DOM (``--dump-dom``) once the page has loaded. No DevTools session
and no driver: the findings are text in the page. The copy is removed afterwards.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from quicbed.client.chromium import Chromium
from quicbed.errors import QuicbedError

#: the window the page is read in: a laptop's
WIDTH, HEIGHT = 1280, 900
#: the tallest screenshot taken (a long report is cut there, and says so)
MAX_SHOT_HEIGHT = 16000
#: words that are a program's placeholders, not a report's words
PLACEHOLDERS = ("None", "nan", "NaN", "null", "undefined", "Traceback")
#: the id of the element the script writes its findings into
MARK = "quicbed-report-check"
COPY = "index.check.html"

#: measures the rendered page; its findings are JSON text in <pre id=MARK>
_SCRIPT = """
<script>
(() => {
  const words = %(words)s;
  const seen = (el) => {
    const s = getComputedStyle(el);
    return s.display !== "none" && s.visibility !== "hidden" && el.getClientRects().length;
  };
  const out = {placeholders: [], empty_tables: [], broken_images: [], links: [],
               anchors_missing: [], overflow_px: 0, height: 0};
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const re = new RegExp("(^|[^A-Za-z_])(" + words.join("|") + ")([^A-Za-z_]|$)");
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || !seen(el) || el.closest("script,style")) continue;
    const text = n.textContent.replace(/\\s+/g, " ").trim();
    if (text && re.test(text)) out.placeholders.push(text.slice(0, 160));
  }
  for (const img of document.images) {
    if (img.getAttribute("alt")) {
      const alt = img.getAttribute("alt");
      if (re.test(alt)) out.placeholders.push("image alt: " + alt.slice(0, 160));
    }
    if (!img.complete || img.naturalWidth === 0)
      out.broken_images.push(img.alt || img.src.slice(0, 80));
  }
  document.querySelectorAll("table").forEach((t, i) => {
    const body = [...t.rows].filter(r => r.querySelector("td"));
    if (!body.length) out.empty_tables.push(t.id || ("table " + (i + 1)));
  });
  document.querySelectorAll("a[href]").forEach(a => {
    const h = a.getAttribute("href");
    if (h.startsWith("#")) {
      if (h.length > 1 && !document.getElementById(decodeURIComponent(h.slice(1))))
        out.anchors_missing.push(h);
    } else if (!/^[a-z]+:/i.test(h)) out.links.push(h);
  });
  const doc = document.documentElement;
  out.overflow_px = Math.max(0, doc.scrollWidth - window.innerWidth);
  out.height = Math.max(doc.scrollHeight, document.body.scrollHeight);
  const pre = document.createElement("pre");
  pre.id = "%(mark)s";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


@dataclass
class ReportCheck:
    """What the check found in one report: each problem as one line a reader understands."""

    report: Path
    problems: list[str] = field(default_factory=list)
    #: the page's height in CSS pixels at the check's width
    height: int = 0
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Findings:
    """The script's findings, as it wrote them."""

    placeholders: list[str]
    empty_tables: list[str]
    broken_images: list[str]
    links: list[str]
    anchors_missing: list[str]
    overflow_px: int
    height: int


def _chromium(args: list[str], timeout: float, height: int = HEIGHT) -> str:
    size = f"--window-size={WIDTH},{height}"
    argv = [Chromium.program, *Chromium.quiet, "--hide-scrollbars", size, *args]
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise QuicbedError(f"{Chromium.program} is not installed (roles/{Chromium.role})") from None
    except subprocess.TimeoutExpired:
        raise QuicbedError(f"{Chromium.program} did not render it in {timeout:g} s") from None
    if cp.returncode != 0:
        tail = " | ".join(cp.stderr.strip().splitlines()[-3:])
        raise QuicbedError(f"{Chromium.program} failed on the report: {tail or cp.returncode}")
    return cp.stdout


def _findings(page: Path, timeout: float) -> _Findings:
    """The script's findings, from the DOM Chromium prints once the page has loaded."""
    copy = page.with_name(COPY)
    html = page.read_text()
    script = _SCRIPT % {"words": json.dumps(list(PLACEHOLDERS)), "mark": MARK}
    copy.write_text(
        html.replace("</body>", script + "</body>") if "</body>" in html else html + script
    )
    try:
        dom = _chromium(
            ["--dump-dom", "--virtual-time-budget=10000", copy.resolve().as_uri()], timeout
        )
    finally:
        copy.unlink(missing_ok=True)
    m = re.search(rf'<pre id="{MARK}">(.*?)</pre>', dom, re.S)
    if m is None:
        raise QuicbedError(f"{page}: the check's script did not run (the page did not load)")
    return _Findings(**json.loads(_unescape(m.group(1))))


def _unescape(text: str) -> str:
    """The DOM's serialisation of a <pre>'s text (only &, <, > and nbsp are escaped)."""
    for a, b in (("&lt;", "<"), ("&gt;", ">"), ("&nbsp;", "\u00a0"), ("&amp;", "&")):
        text = text.replace(a, b)
    return text


def _dead_links(report: Path, links: list[str]) -> list[str]:
    """Links to files of the report (or beside it) that are not there."""
    dead = []
    for h in dict.fromkeys(links):
        path = unquote(urlsplit(h).path)
        if path and not (report / path).exists():
            dead.append(h)
    return dead


def check_report(report: Path, screenshot: Path | None = None, timeout: float = 120) -> ReportCheck:
    """Render ``report/index.html`` and read it as a reader would; with ``screenshot``, a
    PNG of the whole page (up to MAX_SHOT_HEIGHT pixels) goes there."""
    page = report / "index.html"
    if not page.is_file():
        raise QuicbedError(f"{report} holds no report (no index.html): quicbed report FOLDER")
    found = _findings(page, timeout)
    res = ReportCheck(report, height=found.height)
    res.problems += [f"placeholder text: {text!r}" for text in found.placeholders]
    res.problems += [f"a table with no rows: {t}" for t in found.empty_tables]
    res.problems += [f"an image that does not load: {img}" for img in found.broken_images]
    res.problems += [f"a link to an anchor that is not there: {h}" for h in found.anchors_missing]
    dead = _dead_links(report, found.links)
    res.problems += [f"a link to a file that is not there: {h}" for h in dead]
    if found.overflow_px > 0:
        res.problems.append(f"the page is {found.overflow_px} px wider than a {WIDTH} px window")
    if screenshot is not None:
        height = min(max(res.height, HEIGHT), MAX_SHOT_HEIGHT)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        shot = [f"--screenshot={screenshot.resolve()}", page.resolve().as_uri()]
        _chromium(shot, timeout, height)
        res.screenshot = screenshot
    return res
