"""The page models' plan: which resources a model page has, on which hosts, of what
size, and which body names each one (quicbed.replay.corpus builds the page from it).

Every choice is by rule, so that a model always makes the same page: the first party
gets the least a page needs (its document, a stylesheet, app.js, the hero), each third
party first the thing its kind of service serves (a tag manager's script, a fonts
service's stylesheet, an ad's iframe), then the third parties share their part of the
requests round robin and the first party takes the rest. Sizes split each type's bytes
exactly, by weights drawn from SHAKE-256 keyed by the model's name.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from quicbed.errors import QuicbedError
from quicbed.replay.models import (
    FIRST_PARTY,
    IFRAME_BYTES,
    KINDS,
    Kind,
    ModelSet,
    PageModel,
    third_party_requests,
)
from quicbed.replay.png import SMALLEST

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

    def party(self, r: Res) -> str:
        return self.hosts[r.host].party

    def _link(self) -> None:
        """Give every resource but the main document the one body that names it."""
        main = self.res[0]
        first_js = [r for r in self.res if r.kind == "js" and self.party(r) == "first"]
        first_css = [r for r in self.res if r.kind == "css" and self.party(r) == "first"]
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
def stream(name: str, what: str, n: int) -> bytes:
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
        noise = stream(plan.name, f"sizes/{kind}", len(free))
        weights = [
            float(HERO_WEIGHT) if r.how == "hero" else 1 + 3 * b / 255
            for r, b in zip(free, noise, strict=True)
        ]
        for r, n in zip(free, _split(total - SMALLEST * len(fixed), weights), strict=True):
            r.size = n
