"""Whether a load of a replayed page counts: every request answered from the archive,
with the archive's bytes, over the arm's protocol on every origin.

Every arm's replay server marks each response with how its request matched
(``REPLAY_HEADER``: ``url``, ``path`` or ``none``; docs/replay.md), so the browser's own
HAR says, per request, what the server did: the same evidence on every stack.
"""

from __future__ import annotations

from typing import Any

from quicbed.replay.archive import REPLAY_HEADER, Archive, Entry


def how_matched(headers: list[dict[str, Any]]) -> str | None:
    """The replay header among one HAR response's ``headers``, or None."""
    for h in headers:
        if str(h.get("name", "")).lower() == REPLAY_HEADER:
            return str(h.get("value", "")).strip()
    return None


def reasons(entries: list[dict[str, Any]], archive: Archive, protocol: str) -> list[str]:
    """Every reason a load of ``archive`` must not count (``entries``: the load's HAR
    entries as quicbed.client.har.metrics gives them); empty: it counts.

    A request the archive does not answer, a response whose status or body size is not
    the archive's, a response not over ``protocol``, a request to a host the archive
    has not: each named by its URL (the first three of each kind)."""
    if not entries:
        return ["the HAR has no requests"]
    unmatched, unmarked, wrong_status, wrong_size, wrong_proto, foreign = ([] for _ in range(6))
    hosts = {o.host for o in archive.origins}
    for e in entries:
        url = str(e["url"])
        if e.get("host") not in hosts or not url.startswith("https://"):
            foreign.append(url)
            continue
        how = e.get("replay")
        found = archive.match(str(e.get("method") or "GET"), url)
        if how == "none" or (how is not None and found is None):
            unmatched.append(url)
            continue
        if how is None:
            unmarked.append(url)
            continue
        assert found is not None
        rec, _ = found
        if e.get("status") != rec.status:
            wrong_status.append(f"{url} ({e.get('status')}, recorded {rec.status})")
        # a size the browser could not see (-1: Firefox, a cross-origin response) is
        # not judged; the HAR says so per entry
        if e.get("body_bytes") != rec.size and (e.get("body_bytes") or 0) >= 0:
            wrong_size.append(f"{url} ({e.get('body_bytes')} bytes, recorded {rec.size})")
        if e.get("protocol") != protocol:
            wrong_proto.append(f"{url} ({e.get('protocol')})")
    out = []
    for what, urls in (
        ("requests to hosts the archive has not", foreign),
        ("unmatched requests", unmatched),
        (f"responses without the {REPLAY_HEADER} header (not from a replay server)", unmarked),
        ("statuses not the archive's", wrong_status),
        ("bodies not the archive's size", wrong_size),
        (f"responses not over {protocol}", wrong_proto),
    ):
        if urls:
            more = f" and {len(urls) - 3} more" if len(urls) > 3 else ""
            out.append(f"{len(urls)} {what}: {', '.join(urls[:3])}{more}")
    return out


#: how much less than its recorded server time a server may say it held a response
#: (ms): Envoy logs a request's duration in whole milliseconds, and its fault filter's
#: timer runs from its event loop's cached clock, which on a 0-RTT request (decrypted
#: in the handshake's long loop turn) is a little old: 147-148 ms logged for 150 on
#: Firefox's 0-RTT loads here, while the browser saw the full time (quic-go 150.2-151,
#: Apache 150.0 exactly)
WAIT_SLACK_MS = 5.0
#: statuses whose responses carry no body (RFC 9110), whatever the entry's size
NO_BODY = {204, 304}


def served_entry(s: dict[str, Any], archive: Archive) -> Entry | None:
    """The entry a server says it answered one request from: by its recorded URL and the
    request's method (quic-go's and Envoy's logs), or by its place in the archive,
    ``o<origin>/e<entry>`` (Apache's: quicbed.servers.apache_replay's file names)."""
    ref = str(s.get("entry_ref") or "")
    if ref:
        o, _, e = ref.partition("/")
        try:
            return archive.origins[int(o[1:])].entries[int(e[1:])]
        except (ValueError, IndexError):
            return None
    found = archive.match(str(s.get("method") or "GET"), str(s.get("entry") or ""))
    return found[0] if found is not None else None


def served_reasons(served: list[dict[str, Any]] | None, archive: Archive, waits: bool) -> list[str]:
    """What each server says it sent, per request it answered from an entry (a load's
    fact ``replay_served``: ``entry`` and ``method``, or ``entry_ref``; ``bytes`` of body
    sent; ``slept_ms`` it held the response): every body the entry's size, and every
    response held its recorded server time (``waits``: a cell's ``server_time``) or
    none. This is the one word on sizes the browser cannot give (Firefox sees no size
    of another origin's no-cors response) and on server time (over 0-RTT Firefox starts
    a request's HAR wait at the handshake's end, after the server began to hold it)."""
    if served is None:
        return [
            "the server's log does not say what it sent per request (a server or role "
            "older than quicbed: run make setup)"
        ]
    unknown, sized, short, held = [], [], [], []
    for s in served:
        rec = served_entry(s, archive)
        name = str(s.get("entry") or s.get("entry_ref") or "?")
        if rec is None:
            unknown.append(name)
            continue
        name = rec.url
        body = 0 if rec.status in NO_BODY or s.get("method") == "HEAD" else rec.size
        if s.get("bytes") is not None and int(s["bytes"]) != body:
            sized.append(f"{name} ({s['bytes']} bytes, recorded {body})")
        slept, asked = float(s.get("slept_ms") or 0.0), rec.wait_ms or 0.0
        if waits and asked and slept < asked - WAIT_SLACK_MS:
            short.append(f"{name} ({slept:g} ms of {asked:g})")
        if not waits and slept > 0:
            held.append(f"{name} ({slept:g} ms)")
    out = []
    for what, urls in (
        ("responses from no entry of the archive, by the server's log", unknown),
        ("bodies the server sent not at the archive's size", sized),
        ("responses held less than their recorded server time", short),
        ("responses held though the cell's server time is off", held),
    ):
        if urls:
            more = f" and {len(urls) - 3} more" if len(urls) > 3 else ""
            out.append(f"{len(urls)} {what}: {', '.join(urls[:3])}{more}")
    return out
