"""The page models built into replay archives: real dependency trees, the same bytes
everywhere.

A model (quicbed.replay.models) gives counts and bytes per content type and a number of
first- and third-party hosts; this module makes a page a browser really walks: the HTML
links render-blocking CSS and sync scripts in its head, defer and async scripts, a hero
image for largest contentful paint and visible text for first contentful paint; the CSS
pulls fonts (@font-face) and background images; scripts, once run, insert more scripts
(a tag manager's), images, and fetch() JSON; ad and video iframes hold their own images
and scripts. Every URL any body names is an entry of the archive, and every entry is
named by exactly one body, so a load that fetches everything matches everything.

Nothing is random: every choice is by rule and every byte comes from SHAKE-256 keyed
by the model's name, so a model builds to the same archive (the same digest) on every
machine and Python version. docs/replay.md ("The page models") states the rules.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from quicbed.errors import QuicbedError
from quicbed.replay.archive import Archive, Entry, Origin
from quicbed.replay.models import (
    FIRST_PARTY,
    IFRAME_BYTES,
    KINDS,
    Kind,
    ModelSet,
    PageModel,
    fingerprint,
    third_party_requests,
)
from quicbed.replay.png import SMALLEST, png

#: the builder's version: a change to what it writes changes every model's digest anyway;
#: this names the rules a stored archive was built by
GENERATOR = "1"
#: third parties in the order a model takes them (round robin), each with its host's
#: first label and what it serves first, then what it may serve more of
CATEGORIES: tuple[tuple[str, str, Kind, tuple[Kind, ...]], ...] = (
    ("tagmgr", "www", "js", ("json", "js")),
    ("analytics", "collect", "js", ("json", "image")),
    ("fonts", "fonts", "css", ("font",)),
    ("ads", "ad", "html", ("image", "js", "json")),
    ("cdn", "cdn", "js", ("js", "css")),
    ("consent", "cmp", "js", ("json", "js")),
    ("social", "connect", "js", ("image", "js")),
    ("pixel", "px", "image", ("image",)),
    ("video", "player", "html", ("image", "js")),
    ("chat", "widget", "js", ("js", "json", "image")),
)
#: the categories of the third parties after the first of each: the many on large pages
#: are mostly ads, trackers and analytics (an assumption: the Web Almanac gives the
#: categories' medians, not how they grow)
TAIL = ("ads", "pixel", "analytics", "ads", "social", "pixel", "video", "ads", "analytics", "cdn")
#: third-party images that are tracking pixels, the smallest PNG (SMALLEST bytes)
PIXELS = ("pixel", "analytics")
#: what a kind is served as (every entry also allows any origin to read it: fonts and
#: fetch() are CORS requests, and resource timing of other origins needs the second)
CONTENT_TYPE: dict[Kind, str] = {
    "html": "text/html; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "font": "font/woff2",
    "image": "image/png",
    "json": "application/json",
}
EXT: dict[Kind, str] = {
    "html": "html",
    "css": "css",
    "js": "js",
    "font": "woff2",
    "image": "png",
    "json": "json",
}
#: how a resource is reached: from the main document's head (css, sync, defer, async),
#: its body (hero, img, body), a stylesheet (font, bg), a script (inject, insert,
#: fetch) or an iframe's document (frame-img, frame-js)
How = str
#: how the first party's scripts after app.js (defer) and the one sync script are
#: named by the main document, in turn; and its images after the hero
FIRST_JS = ("async", "defer", "body")
FIRST_IMAGES = ("img", "bg", "insert")
#: the relative weight of the hero image among the page's images (the rest: 1 to 4)
HERO_WEIGHT = 10
_WORD_TEXT = (
    "network page origin packet stream server client browser image script style font "
    "request response latency bandwidth queue loss window handshake record header body "
    "paint layout frame render cache replay archive model testbed link delay path route "
    "socket buffer congestion flow transfer object document element pixel text paragraph "
    "section article story report figure table result measure sample run cell arm sweep"
)
#: the visible text's words (a page's text must paint for first contentful paint)
WORDS = tuple(_WORD_TEXT.split())


@dataclass
class Host:
    name: str
    party: str  # "first" or "third"
    category: str  # a first-party label, or the third party's category
    counters: dict[str, int] = field(default_factory=dict)

    def next_path(self, kind: Kind) -> str:
        n = self.counters[kind] = self.counters.get(kind, 0) + 1
        return _path(self.category, self.party, kind, n)


@dataclass
class Res:
    """One resource of the page: its host, its path, its size, and who names it how."""

    index: int
    kind: Kind
    host: int
    path: str
    size: int = 0
    how: How = ""
    parent: int | None = None
    children: list[int] = field(default_factory=list)
    width: int = 0  # images
    height: int = 0

    @property
    def is_main(self) -> bool:
        return self.index == 0


def _path(category: str, party: str, kind: Kind, n: int) -> str:
    """A resource's path: what such a host serves such a file under."""
    ext = EXT[kind]
    if party == "first":
        return {
            "html": "/" if n == 1 else f"/embed/widget-{n - 1}.html",
            "css": f"/assets/css/site-{n}.css",
            "js": "/assets/js/app.js" if n == 1 else f"/assets/js/chunk-{n}.js",
            "font": f"/assets/fonts/sans-{n}.woff2",
            "image": "/images/hero.png" if n == 1 else f"/images/photo-{n}.png",
            "json": f"/api/v1/feed-{n}.json",
        }[kind]
    named = {
        ("tagmgr", "js"): "/gtm.js?id=QB-{n}",
        ("tagmgr", "json"): "/tag/config-{n}.json",
        ("analytics", "js"): "/analytics.js" if n == 1 else "/analytics-{n}.js",
        ("analytics", "json"): "/collect?v=2&t=pageview&n={n}",
        ("fonts", "css"): "/css2?family=Model+Sans+{n}&display=swap",
        ("fonts", "font"): "/s/modelsans/v1/font-{n}.woff2",
        ("ads", "html"): "/ads/frame-{n}.html",
        ("ads", "image"): "/ads/creative-{n}.png",
        ("ads", "js"): "/ads/show-{n}.js",
        ("ads", "json"): "/ads/bid-{n}.json",
        ("analytics", "image"): "/pixel-{n}.png",
        ("cdn", "js"): "/libs/lib-{n}.min.js",
        ("cdn", "css"): "/libs/lib-{n}.min.css",
        ("consent", "js"): "/cmp.js" if n == 1 else "/cmp-{n}.js",
        ("consent", "json"): "/cmp/vendors-{n}.json",
        ("social", "js"): "/sdk.js" if n == 1 else "/sdk-{n}.js",
        ("social", "image"): "/widgets/like-{n}.png",
        ("pixel", "image"): "/tr?id={n}&ev=PageView",
        ("video", "html"): "/embed/video-{n}.html",
        ("video", "image"): "/vi/poster-{n}.png",
        ("video", "js"): "/player/player-{n}.js",
        ("chat", "js"): "/widget.js" if n == 1 else "/widget-{n}.js",
        ("chat", "json"): "/chat/config-{n}.json",
        ("chat", "image"): "/chat/avatar-{n}.png",
    }
    return named.get((category, kind), f"/{category}/{kind}-{n}.{ext}").format(n=n)


def hosts_of(name: str, m: PageModel) -> list[Host]:
    """The page's hosts: first party under ``<name>.example``, each third party a site
    of its own, ``<label>.<category><k>-<name>.example`` (RFC 2606's reserved TLD)."""
    out = [Host(f"{label}.{name}.example", "first", label) for label in FIRST_PARTY]
    out = out[: m.first_party_hosts]
    seen: dict[str, int] = {}
    cats = [c[0] for c in CATEGORIES]
    for i in range(m.third_party_hosts):
        cat = cats[i] if i < len(cats) else TAIL[(i - len(cats)) % len(TAIL)]
        label = next(c[1] for c in CATEGORIES if c[0] == cat)
        seen[cat] = seen.get(cat, 0) + 1
        out.append(Host(f"{label}.{cat}{seen[cat]}-{name}.example", "third", cat))
    return out


def _third(host: Host) -> tuple[Kind, tuple[Kind, ...]]:
    _, _, first, more = next(c for c in CATEGORIES if c[0] == host.category)
    return first, more


class Plan:
    """Which resources the page has, on which hosts, and who names each one."""

    def __init__(self, name: str, ms: ModelSet) -> None:
        self.name = name
        self.model = m = ms.models[name]
        self.hosts = hosts_of(name, m)
        self.left: dict[Kind, int] = {k: m.types[k].count for k in KINDS}
        self.res: list[Res] = []
        self._allot(third_party_requests(ms, m))
        self._link()

    # --- which resources, on which host ------------------------------------------------
    def _add(self, kind: Kind, host: int) -> Res:
        if self.left[kind] < 1:
            raise QuicbedError(f"page model {self.name}: no {kind} left to place")  # a bug
        self.left[kind] -= 1
        r = Res(len(self.res), kind, host, self.hosts[host].next_path(kind))
        self.res.append(r)
        return r

    def _www(self, label: str) -> int:
        """The first-party host of ``label``, or the nearest one the model has."""
        order = {
            "img": ("img", "static", "www"),
            "api": ("api", "www"),
            "static": ("static", "www"),
        }
        labels = [h.category for h in self.hosts if h.party == "first"]
        return next(labels.index(x) for x in (*order.get(label, ()), label, "www") if x in labels)

    def _allot(self, third_requests: int) -> None:
        # the first party's minimum, something on each of its hosts: the main document,
        # its style, app.js, the hero, and (with an api host) the feed app.js fetches
        labels = {h.category for h in self.hosts if h.party == "first"}
        least: list[tuple[Kind, str]] = [
            ("html", "www"),
            ("css", "static"),
            ("js", "static"),
            ("image", "img"),
        ]
        for need, label in least + ([("json", "api")] if "api" in labels else []):
            self._add(need, self._www(label))
        third = [i for i, h in enumerate(self.hosts) if h.party == "third"]
        for i in third:  # each third party serves its own first thing, else what is left
            first, _ = _third(self.hosts[i])
            kinds: tuple[Kind, ...] = (first, "js", "image", "json", "css")
            kind: Kind | None = next((k for k in kinds if self.left[k]), None)
            if kind is None:
                raise QuicbedError(f"page model {self.name}: too few requests for its hosts")
            self._add(kind, i)
        placed = len(third)
        while placed < third_requests:  # then the third parties' share, round robin
            before = placed
            for i in third:
                more = _third(self.hosts[i])[1]
                extra: Kind | None = next((k for k in more if self.left[k]), None)
                if extra is not None and placed < third_requests:
                    self._add(extra, i)
                    placed += 1
            if placed == before:
                break
        for kind in KINDS:  # the rest is the first party's
            label = {"html": "www", "image": "img", "json": "api"}.get(kind, "static")
            while self.left[kind]:
                self._add(kind, self._www(label))

    # --- who names which ------------------------------------------------------------------
    def _on(self, host: int, kind: Kind) -> list[Res]:
        return [r for r in self.res if r.host == host and r.kind == kind and not r.is_main]

    def _name(self, child: Res, parent: Res, how: How) -> None:
        child.parent, child.how = parent.index, how
        parent.children.append(child.index)

    def _party(self, r: Res) -> str:
        return self.hosts[r.host].party

    def _link(self) -> None:
        """Give every resource but the main document the one body that names it."""
        main = self.res[0]
        first_js = [r for r in self.res if r.kind == "js" and self._party(r) == "first"]
        first_css = [r for r in self.res if r.kind == "css" and self._party(r) == "first"]
        fonts_css = [
            r for r in self.res if r.kind == "css" and self.hosts[r.host].category == "fonts"
        ]
        tags = [  # each tag manager's first script: it injects the other third parties'
            self._on(i, "js")[0]
            for i, h in enumerate(self.hosts)
            if h.category == "tagmgr" and self._on(i, "js")
        ]
        app = first_js[0]
        tag = itertools.cycle(tags or [app])
        css = itertools.cycle(first_css)
        first_images = itertools.count()
        for r in self.res[1:]:
            host = self.hosts[r.host]
            frames = self._on(r.host, "html") if host.party == "third" else []
            own_js = self._on(r.host, "js")
            if r.kind == "html":
                self._name(r, main, "iframe")
            elif r.kind == "css":
                self._name(r, main, "css")
            elif r.kind == "font":
                self._name(r, (self._on(r.host, "css") or fonts_css or first_css)[0], "font")
            elif r.kind == "js" and host.party == "first":
                n = first_js.index(r)
                how = "defer" if n == 0 else "sync" if n == 1 else FIRST_JS[(n - 2) % 3]
                self._name(r, main, how)
            elif r.kind == "js":
                if frames:
                    self._name(r, frames[0], "frame-js")
                elif own_js[0] is not r:
                    self._name(r, own_js[0], "inject")  # a third party's own chunk
                elif host.category in ("cdn", "consent"):
                    self._name(r, main, "sync")
                elif host.category != "tagmgr" and tags:
                    self._name(r, next(tag), "inject")
                else:
                    self._name(r, main, "async")
            elif r.kind == "image" and host.party == "first":
                n = next(first_images)
                how = "hero" if n == 0 else FIRST_IMAGES[(n - 1) % 3]
                self._name(r, {"bg": next(css), "insert": app}.get(how, main), how)
            elif r.kind == "image":
                if frames:
                    self._name(r, frames[0], "frame-img")
                else:
                    self._name(r, own_js[0] if own_js else next(tag), "insert")
            else:  # json
                parent = own_js[0] if own_js else next(tag) if host.party == "third" else app
                self._name(r, parent, "fetch")

    def order(self) -> list[Res]:
        """The resources in the order a browser meets them: breadth first from the main
        document, each one's children in the order its body names them."""
        out, todo = [], [self.res[0]]
        while todo:
            r = todo.pop(0)
            out.append(r)
            todo += [self.res[c] for c in sorted(self.res[r.index].children, key=_rank(self.res))]
        return out


def _rank(res: list[Res]) -> Callable[[int], tuple[int, int]]:
    """Children in document order: the head's style and scripts, then the body's."""
    place = {"css": 0, "sync": 1, "defer": 2, "async": 3, "hero": 4, "font": 5, "bg": 6, "img": 7}

    def key(i: int) -> tuple[int, int]:
        return (place.get(res[i].how, 8), i)

    return key


# --- sizes ------------------------------------------------------------------------------
def _stream(name: str, what: str, n: int) -> bytes:
    """``n`` bytes of the model's stream for ``what``: SHAKE-256, the same everywhere."""
    return hashlib.shake_256(f"quicbed/page-model/{name}/{what}".encode()).digest(n)


def _split(total: int, weights: list[float]) -> list[int]:
    """``total`` in parts proportional to ``weights``, whole bytes, summing exactly."""
    whole = sum(weights)
    parts = [int(total * w / whole) for w in weights]
    for i in range(total - sum(parts)):
        parts[i % len(parts)] += 1
    return parts


def size(plan: Plan) -> None:
    """Each resource's size: every type's bytes exactly as the model says. The main
    document takes what the iframes (IFRAME_BYTES each) leave of the HTML; a tracking
    pixel (an image of a PIXELS third party) is the smallest PNG; the hero weighs
    HERO_WEIGHT, the rest 1 to 4 by the model's stream."""
    m = plan.model
    for kind in KINDS:
        rs = [r for r in plan.res if r.kind == kind]
        total = m.types[kind].kb * 1024
        if kind == "html":
            for r in rs:
                r.size = IFRAME_BYTES
            rs[0].size = total - IFRAME_BYTES * (len(rs) - 1)
            continue
        fixed = [
            r
            for r in rs
            if kind == "image"
            and plan.hosts[r.host].party == "third"
            and plan.hosts[r.host].category in PIXELS
        ]
        for r in fixed:
            r.size = SMALLEST
        free = [r for r in rs if r not in fixed]
        if not free:
            continue
        noise = _stream(plan.name, f"sizes/{kind}", len(free))
        weights = [
            float(HERO_WEIGHT) if r.how == "hero" else 1 + 3 * b / 255
            for r, b in zip(free, noise, strict=True)
        ]
        for r, n in zip(free, _split(total - SMALLEST * len(fixed), weights), strict=True):
            r.size = n


# --- bodies -----------------------------------------------------------------------------
class Bodies:
    """Each resource's bytes, leaves first, so that a body naming an image knows its
    size on screen."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.data: dict[int, bytes] = {}
        order = ("image", "font", "json", "css", "js", "html")
        for kind in order:
            for r in sorted((r for r in plan.res if r.kind == kind), key=lambda r: -r.index):
                self.data[r.index] = self._make(r)  # iframes (higher index) before main

    def url(self, r: Res) -> str:
        return f"https://{self.plan.hosts[r.host].name}{r.path}"

    def _children(self, r: Res, *hows: How) -> list[Res]:
        return [self.plan.res[c] for c in r.children if self.plan.res[c].how in hows]

    def _fit(self, r: Res, text: str, comment: tuple[str, str], tail: str = "") -> bytes:
        """``text`` grown to ``r.size`` bytes with a comment of the model's stream (or
        blank lines, for the last few bytes) before ``tail``, or an error if it does not
        fit."""
        room = r.size - len(tail) - len(text)
        if room < 0:
            raise QuicbedError(
                f"page model {self.plan.name}: {self.url(r)} needs {len(text) + len(tail)} bytes, "
                f"the model gives it {r.size}"
            )
        opening, closing = comment
        if room >= len(opening) + len(closing) + 1:
            n = room - len(opening) - len(closing) - 1
            text += opening + _stream(self.plan.name, f"pad/{r.index}", n).hex()[:n]
            text += closing + "\n"
        else:
            text += "\n" * room
        data = (text + tail).encode("ascii")
        assert len(data) == r.size
        return data

    def words(self, r: Res, what: str, n: int) -> str:
        noise = _stream(self.plan.name, f"words/{r.index}/{what}", n)
        return " ".join(WORDS[b % len(WORDS)] for b in noise).capitalize() + "."

    def shown(self, r: Res, widest: int = 160) -> tuple[int, int]:
        """How big an image is shown: its own size, no wider than ``widest``."""
        if r.width <= widest:
            return r.width, r.height
        return widest, max(1, round(r.height * widest / r.width))

    def _make(self, r: Res) -> bytes:
        maker = {
            "image": self._image,
            "font": self._font,
            "json": self._json,
            "css": self._css,
            "js": self._js,
            "html": self._main if r.is_main else self._frame,
        }[r.kind]
        return maker(r)

    def _image(self, r: Res) -> bytes:
        aspect = 16 / 9 if r.how == "hero" else 4 / 3
        data, r.width, r.height = png(f"{self.plan.name}/{r.index}".encode(), r.size, aspect)
        return data

    def _font(self, r: Res) -> bytes:
        """Opaque bytes behind WOFF2's signature: fetched as a font, never decoded as
        one (the text keeps its fallback font: font-display swap)."""
        if r.size < 4:
            raise QuicbedError(f"page model {self.plan.name}: {self.url(r)} under 4 bytes")
        return b"wOF2" + _stream(self.plan.name, f"font/{r.index}", r.size - 4)

    def _json(self, r: Res) -> bytes:
        head = f'{{"model":"{self.plan.name}","item":{r.index},"data":"'
        room = r.size - len(head) - 3
        if room < 0:
            raise QuicbedError(f"page model {self.plan.name}: {self.url(r)} is too small")
        data = _stream(self.plan.name, f"json/{r.index}", room).hex()[:room]
        return (head + data + '"}\n').encode("ascii")

    def _css(self, r: Res) -> bytes:
        lines = [f"/* quicbed page model {self.plan.name} */"]
        if self.plan._party(r) == "first" and r.index == _first_css(self.plan):
            lines.append(
                "body{margin:0;padding:0 12px;font:16px/1.5 system-ui,sans-serif;color:#222}"
                "img{display:block;max-width:100%;height:auto;margin:8px 0}"
                "img.hero{width:100%}iframe{border:0;display:block;max-width:100%}"
            )
        for f in self._children(r, "font"):
            lines.append(
                f'@font-face{{font-family:"qbf{f.index}";src:url("{self.url(f)}") '
                f'format("woff2");font-display:swap}}'
                f'.qbf{f.index}{{font-family:"qbf{f.index}",system-ui,sans-serif}}'
            )
        for b in self._children(r, "bg"):
            w, h = self.shown(b)
            lines.append(
                f'.qbg{b.index}{{background:url("{self.url(b)}") center/cover;'
                f"width:{w}px;height:{h}px;max-width:100%}}"
            )
        return self._fit(r, "\n".join(lines) + "\n", ("/* ", " */"))

    def _js(self, r: Res) -> bytes:
        calls = []
        for c in (self.plan.res[i] for i in r.children):
            if c.how == "inject":
                calls.append(f'  js("{self.url(c)}");')
            elif c.how == "insert":
                w, h = self.shown(c)
                calls.append(f'  img("{self.url(c)}", {w}, {h});')
            elif c.how == "fetch":
                calls.append(f'  get("{self.url(c)}");')
        text = (
            f"/* quicbed page model {self.plan.name} */\n"
            "(function () {\n"
            "  var d = document;\n"
            "  function ready(f) { if (d.body) f(); "
            'else d.addEventListener("DOMContentLoaded", f); }\n'
            '  function js(u) { var s = d.createElement("script"); s.src = u; s.async = true; '
            "d.head.appendChild(s); }\n"
            '  function img(u, w, h) { ready(function () { var i = d.createElement("img"); '
            'i.src = u; i.width = w; i.height = h; i.alt = ""; d.body.appendChild(i); }); }\n'
            '  function get(u) { fetch(u, {credentials: "omit"}).then(function (r) '
            "{ return r.text(); }).catch(function () {}); }\n"
            + "".join(c + "\n" for c in calls)
            + f'  d.documentElement.setAttribute("data-qb{r.index}", "ran");\n'
            "})();\n"
        )
        return self._fit(r, text, ("/* ", " */"))

    def _img_tag(self, r: Res) -> str:
        w, h = self.shown(r)
        return f'<img src="{self.url(r)}" width="{w}" height="{h}" alt="">'

    def _frame(self, r: Res) -> bytes:
        """An iframe's document (an ad, a video player): its own images and scripts."""
        body = [f"<p>{self.plan.hosts[r.host].category} frame</p>"]
        body += [self._img_tag(c) for c in self._children(r, "frame-img")]
        body += [f'<script src="{self.url(c)}"></script>' for c in self._children(r, "frame-js")]
        text = (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{self.plan.hosts[r.host].category}</title>\n"
            "<style>body{margin:0;font:14px system-ui,sans-serif}"
            "img{display:block;max-width:100%;height:auto}</style>\n"
            "</head><body>\n" + "\n".join(body) + "\n"
        )
        return self._fit(r, text, ("<!-- ", " -->"), "</body></html>\n")

    def _main(self, r: Res) -> bytes:
        """The page: the head's style and scripts, then text, the hero, the rest."""
        plan, kids = self.plan, self.plan.res
        head = [f'<link rel="stylesheet" href="{self.url(c)}">' for c in self._children(r, "css")]
        for how, attr in (("sync", ""), ("defer", " defer"), ("async", " async")):
            head += [f'<script src="{self.url(c)}"{attr}></script>' for c in self._children(r, how)]
        body = [
            f"<h1>{self.words(r, 'title', 5)}</h1>",
            f"<p>{self.words(r, 'intro', 60)}</p>",
        ]
        for c in self._children(r, "hero"):
            body.append(
                f'<img class="hero" src="{self.url(c)}" width="{c.width}" height="{c.height}" '
                'alt="" fetchpriority="high">'
            )
        fonts = [f for f in kids if f.how == "font"]
        body += [f'<p class="qbf{f.index}">{self.words(f, "text", 24)}</p>' for f in fonts]
        body += [f'<div class="qbg{b.index}"></div>' for b in kids if b.how == "bg"]
        for c in self._children(r, "img"):
            body += [f"<p>{self.words(c, 'caption', 16)}</p>", self._img_tag(c)]
        for c in self._children(r, "iframe"):
            body.append(
                f'<iframe src="{self.url(c)}" width="300" height="250" '
                f'title="{plan.hosts[c.host].category}"></iframe>'
            )
        body += [f'<script src="{self.url(c)}"></script>' for c in self._children(r, "body")]
        text = (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>quicbed page model {plan.name}</title>\n"
            '<link rel="icon" href="data:,">\n'
            + "\n".join(head)
            + "\n</head>\n<body>\n"
            + "\n".join(body)
            + "\n"
        )
        tail = "</body></html>\n"
        n = 0
        while r.size - len(text) - len(tail) > 800:  # visible text, then a comment
            text += f"<p>{self.words(r, f'more/{n}', 60)}</p>\n"
            n += 1
        return self._fit(r, text, ("<!-- ", " -->"), tail)


def _first_css(plan: Plan) -> int:
    return next(r.index for r in plan.res if r.kind == "css" and plan._party(r) == "first")


# --- the archive ------------------------------------------------------------------------
def headers(r: Res) -> tuple[tuple[str, str], ...]:
    cache = "no-cache" if r.kind == "html" else "public, max-age=86400"
    return (
        ("content-type", CONTENT_TYPE[r.kind]),
        ("cache-control", cache),
        ("access-control-allow-origin", "*"),
        ("timing-allow-origin", "*"),
    )


def build(name: str, ms: ModelSet) -> tuple[Archive, dict[str, bytes]]:
    """The archive of model ``name`` and its bodies by SHA-256; nothing is written."""
    plan = Plan(name, ms)
    size(plan)
    made = Bodies(plan)
    bodies: dict[str, bytes] = {}
    per_host: dict[int, list[Entry]] = {}
    for r in plan.order():
        data = made.data[r.index]
        sha = hashlib.sha256(data).hexdigest()
        bodies[sha] = data
        per_host.setdefault(r.host, []).append(
            Entry(
                method="GET",
                url=made.url(r),
                status=200,
                headers=headers(r),
                body=sha,
                size=len(data),
            )
        )
    origins = tuple(
        Origin(origin=f"https://{plan.hosts[h].name}", host=plan.hosts[h].name, entries=tuple(es))
        for h, es in per_host.items()
    )
    m = ms.models[name]
    source = {
        "kind": "model",
        "model": name,
        "file": "workloads/replay-models.yaml",
        "sha256": fingerprint(name, m, ms),
        "creator": f"quicbed.replay.corpus {GENERATOR}",
        "percentile": str(m.percentile),
        "client": m.client,
    }
    archive = Archive(name=name, main=made.url(plan.res[0]), source=source, origins=origins)
    return archive, bodies
