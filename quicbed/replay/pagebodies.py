"""The page models' bodies: each resource of a plan (quicbed.replay.pageplan) as bytes.

Leaves first (images, fonts, JSON), then what names them (stylesheets, scripts,
iframes) and the main document last, so that a body naming an image knows how big it
is shown. Each body is made up to its planned size exactly: images by
quicbed.replay.png, fonts as opaque bytes, text by a comment of the model's stream.
"""

from __future__ import annotations

from quicbed.errors import QuicbedError
from quicbed.replay.pageplan import How, Plan, Res, stream
from quicbed.replay.png import png

_WORD_TEXT = (
    "network page origin packet stream server client browser image script style font "
    "request response latency bandwidth queue loss window handshake record header body "
    "paint layout frame render cache replay archive model testbed link delay path route "
    "socket buffer congestion flow transfer object document element pixel text paragraph "
    "section article story report figure table result measure sample run cell arm sweep"
)
#: the visible text's words (a page's text must paint for first contentful paint)
WORDS = tuple(_WORD_TEXT.split())


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
            text += opening + stream(self.plan.name, f"pad/{r.index}", n).hex()[:n]
            text += closing + "\n"
        else:
            text += "\n" * room
        data = (text + tail).encode("ascii")
        assert len(data) == r.size
        return data

    def words(self, r: Res, what: str, n: int) -> str:
        noise = stream(self.plan.name, f"words/{r.index}/{what}", n)
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
        return b"wOF2" + stream(self.plan.name, f"font/{r.index}", r.size - 4)

    def _json(self, r: Res) -> bytes:
        head = f'{{"model":"{self.plan.name}","item":{r.index},"data":"'
        room = r.size - len(head) - 3
        if room < 0:
            raise QuicbedError(f"page model {self.plan.name}: {self.url(r)} is too small")
        data = stream(self.plan.name, f"json/{r.index}", room).hex()[:room]
        return (head + data + '"}\n').encode("ascii")

    def _css(self, r: Res) -> bytes:
        lines = [f"/* quicbed page model {self.plan.name} */"]
        if self.plan.party(r) == "first" and r.index == _first_css(self.plan):
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
    return next(r.index for r in plan.res if r.kind == "css" and plan.party(r) == "first")
