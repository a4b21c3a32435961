"""From a HAR to the numbers of one load, and the verdict on whether it counts.

PLT is the HAR page's ``onLoad`` less any DNS time (there should be none: host
resolver rules map the test name). A load counts only if every entry is 200,
every test-origin entry used the arm's protocol, and the objects and body bytes
are exactly the page's; the server's own log adds 0-RTT / resumption facts.

FCP and LCP are not in the HAR: the driver reads them in the page after the load and
returns them beside it (``paint``; client/paint.js says what is read and when). They
never decide whether a load counts: a page that paints nothing contentful (quicbed's
synthetic pages) or a browser without LCP (Chromium 72) gives null, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

from quicbed.replay.verify import how_matched

#: the driver's paint figures that become a load's columns (ms after the time origin)
PAINT_FIELDS = ("fcp_ms", "lcp_ms")

_PROTO = {"h2": "h2", "http/2.0": "h2", "h3": "h3", "http/3": "h3", "http/1.1": "http/1.1"}


def normalize_protocol(p: str | None) -> str:
    p = (p or "unknown").lower()
    if p.startswith("h3"):
        return "h3"
    return _PROTO.get(p, p)


def paint_figures(paint: dict[str, Any] | None) -> tuple[dict[str, float | None], list[str]]:
    """``fcp_ms`` and ``lcp_ms`` from the driver's paint record, and what was wrong with
    it: a value that is not a finite number of ms at or after the time origin is
    stored as null and named, never as a number (a failed read is ``{"error": ...}``)."""
    out: dict[str, float | None] = dict.fromkeys(PAINT_FIELDS)
    if not paint:
        return out, []
    problems = [str(paint["error"])] if paint.get("error") else []
    for k in PAINT_FIELDS:
        v = paint.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            problems.append(f"{k} {v!r} is not a time in ms")
            continue
        out[k] = float(v)
    return out, problems


def origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL, the port only where it is not the scheme's."""
    u = urlsplit(url)
    default = {"http": 80, "https": 443}.get(u.scheme)
    port = f":{u.port}" if u.port is not None and u.port != default else ""
    return f"{u.scheme}://{u.hostname}{port}"


def _tally(entries: list[dict[str, Any]], by: str) -> dict[str, dict[str, Any]]:
    """Requests and bytes of a load's entries (``metrics``' own) per origin (``by`` =
    ``origin``, with the protocols each used) or per protocol (``by`` = ``protocol``,
    with the origins each reached). Bytes the HAR does not know (-1) are left out of the
    sums and counted in ``unknown_body`` / ``unknown_transfer``."""
    also = "protocol" if by == "origin" else "origin"
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        kv = {"origin": origin(e["url"]), "protocol": e["protocol"]}
        g = out.setdefault(
            kv[by],
            {
                "requests": 0,
                "body_bytes": 0,
                "transfer_bytes": 0,
                "unknown_body": 0,
                "unknown_transfer": 0,
                f"{also}s": [],
            },
        )
        g["requests"] += 1
        for what in ("body", "transfer"):
            n = e[f"{what}_bytes"]
            if n is None or n < 0:
                g[f"unknown_{what}"] += 1
            else:
                g[f"{what}_bytes"] += n
        if kv[also] not in g[f"{also}s"]:
            g[f"{also}s"] = sorted([*g[f"{also}s"], kv[also]])
    return dict(sorted(out.items()))


def metrics(
    har: dict[str, Any] | None,
    nav: dict[str, Any] | None,
    hosts: Collection[str],
    paint: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The stored figures of one load (all in ms); bytes, protocols and connections are
    those of the page's own ``hosts`` (the test host, or a replayed page's origins).
    ``paint`` is the driver's record (client/paint.js), kept whole for the load's
    detail; a HAR alone (``quicbed verify``) has none, and its paint figures read null."""
    if isinstance(hosts, str):  # a name is not a set of names ("x" in "quicbed.test")
        raise TypeError(f"hosts must be a collection of names, not {hosts!r}")
    figures, paint_problems = paint_figures(paint)
    paint_detail = None if paint is None else {**paint, "problems": paint_problems}
    if not har or not har.get("log", {}).get("pages"):
        return {"plt_ms": None, "entries": [], **figures, "paint": paint_detail}
    log = har["log"]
    page = log["pages"][0]
    entries = []
    for e in log.get("entries", []):
        t = e.get("timings", {})
        entries.append(
            {
                "url": e["request"]["url"],
                "method": e["request"].get("method"),
                "host": urlsplit(e["request"]["url"]).hostname,
                "status": e["response"]["status"],
                "protocol": normalize_protocol(e["response"].get("httpVersion")),
                "body_bytes": e["response"].get("content", {}).get("size", -1),
                "transfer_bytes": e["response"].get("_transferSize", -1),
                "connection": e.get("connection"),
                "dns": t.get("dns", -1),
                "connect": t.get("connect", -1),
                "ssl": t.get("ssl", -1),
                "wait": t.get("wait", -1),
                "receive": t.get("receive", -1),
                "time": e.get("time"),
                # how a replay server matched the request (None: not a replayed page)
                "replay": how_matched(e["response"].get("headers") or []),
            }
        )
    dns = sum(x["dns"] for x in entries if x["dns"] and x["dns"] > 0)
    onload = page.get("pageTimings", {}).get("onLoad")
    plt = None if onload is None or onload < 0 else onload - dns
    main = entries[0] if entries else None
    return {
        "plt_ms": plt,
        "onload_ms": onload,
        "dns_ms": dns,
        "nav_load_ms": (nav or {}).get("loadEventEnd"),
        "ttfb_ms": (nav or {}).get("responseStart"),
        "objects": len(entries),
        "bytes": sum(max(0, x["body_bytes"]) for x in entries if x["host"] in hosts),
        "protocols": sorted({x["protocol"] for x in entries if x["host"] in hosts}),
        "connections": sorted({str(x["connection"]) for x in entries if x["host"] in hosts}),
        "main_connect_ms": main["connect"] if main else None,
        "main_ssl_ms": main["ssl"] if main else None,
        **figures,
        "paint": paint_detail,
        "by_origin": _tally(entries, "origin"),
        "by_protocol": _tally(entries, "protocol"),
        "entries": entries,
    }


def verify(
    m: dict[str, Any],
    *,
    arm: str,
    host: str,
    expected_objects: int,
    expected_bytes: int,
) -> list[str]:
    """Reasons a load does not count; empty if it is valid."""
    reasons = []
    if m.get("plt_ms") is None:
        return ["no page load time (the page did not finish loading)"]
    entries = m["entries"]
    bad_status = [f"{x['status']} {x['url']}" for x in entries if x["status"] != 200]
    if bad_status:
        reasons.append(f"non-200 responses: {', '.join(bad_status[:3])}")
    foreign = sorted({x["host"] for x in entries if x["host"] != host})
    if foreign:
        reasons.append(f"requests to other hosts: {', '.join(str(h) for h in foreign)}")
    wrong = sorted({x["protocol"] for x in entries if x["host"] == host} - {arm})
    if wrong:
        reasons.append(f"protocol {', '.join(wrong)} on the {arm} arm")
    if m["objects"] != expected_objects:
        reasons.append(f"{m['objects']} objects, the page has {expected_objects}")
    if m["bytes"] != expected_bytes:
        reasons.append(f"{m['bytes']} body bytes, the page has {expected_bytes}")
    return reasons
