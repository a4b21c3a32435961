"""From a HAR to the numbers of one load, and the verdict on whether it counts.

PLT is the HAR page's ``onLoad`` less any DNS time (there should be none: host
resolver rules map the test name). A load counts only if every entry is 200,
every test-origin entry used the arm's protocol, and the objects and body bytes
are exactly the page's; the server's own log adds 0-RTT / resumption facts.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

from quicbed.replay.verify import how_matched

_PROTO = {"h2": "h2", "http/2.0": "h2", "h3": "h3", "http/3": "h3", "http/1.1": "http/1.1"}


def normalize_protocol(p: str | None) -> str:
    p = (p or "unknown").lower()
    if p.startswith("h3"):
        return "h3"
    return _PROTO.get(p, p)


def metrics(
    har: dict[str, Any] | None, nav: dict[str, Any] | None, hosts: Collection[str]
) -> dict[str, Any]:
    """The stored figures of one load (all in ms); bytes, protocols and connections are
    those of the page's own ``hosts`` (the test host, or a replayed page's origins)."""
    if isinstance(hosts, str):  # a name is not a set of names ("x" in "quicbed.test")
        raise TypeError(f"hosts must be a collection of names, not {hosts!r}")
    if not har or not har.get("log", {}).get("pages"):
        return {"plt_ms": None, "entries": []}
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
