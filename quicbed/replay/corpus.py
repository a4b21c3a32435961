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

from quicbed.replay.archive import Archive, Entry, Origin
from quicbed.replay.models import Kind, ModelSet, fingerprint
from quicbed.replay.pagebodies import Bodies
from quicbed.replay.pageplan import Plan, Res, size

#: the builder's version: a change to what it writes changes every model's digest anyway;
#: this names the rules a stored archive was built by
GENERATOR = "1"
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


def headers(r: Res) -> tuple[tuple[str, str], ...]:
    """What a model's response is served with: its type, a cache policy as a site would
    set it (the document revalidated, the rest cached a day), and open CORS."""
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
