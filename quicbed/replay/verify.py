"""Whether a load of a replayed page counts: every request answered from the archive,
with the archive's bytes, over the arm's protocol on every origin.

Every arm's replay server marks each response with how its request matched
(``REPLAY_HEADER``: ``url``, ``path`` or ``none``; docs/replay.md), so the browser's own
HAR says, per request, what the server did: the same evidence on every stack.
"""

from __future__ import annotations

from typing import Any

from quicbed.replay.archive import REPLAY_HEADER, Archive


def how_matched(headers: list[dict[str, Any]]) -> str | None:
    """The replay header among one HAR response's ``headers``, or None."""
    for h in headers:
        if str(h.get("name", "")).lower() == REPLAY_HEADER:
            return str(h.get("value", "")).strip()
    return None


#: how much sooner than its recorded server time a response may start (ms): the HAR's
#: timings are rounded, and the server's clock and the browser's are read apart
WAIT_SLACK_MS = 1.0


def _timed(v: object) -> float | None:
    """A HAR timing in ms, or None where the browser did not time it (-1, absent)."""
    return float(v) if isinstance(v, (int, float)) and v >= 0 else None


def reasons(
    entries: list[dict[str, Any]], archive: Archive, protocol: str, *, waits: bool = False
) -> list[str]:
    """Every reason a load of ``archive`` must not count (``entries``: the load's HAR
    entries as quicbed.client.har.metrics gives them); empty: it counts.

    A request the archive does not answer, a response whose status or body size is not
    the archive's, a response not over ``protocol``, a request to a host the archive
    has not: each named by its URL (the first three of each kind). With ``waits`` (a
    cell's ``server_time``), also a response whose first byte came sooner after its
    request than the entry's recorded server time (the HAR's ``wait`` holds the server
    time and one round trip): the server did not wait; a wait the browser did not
    time (-1) is not judged."""
    if not entries:
        return ["the HAR has no requests"]
    unmatched, unmarked, wrong_status, wrong_size, wrong_proto, foreign, early = (
        [] for _ in range(7)
    )
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
        # the HAR's wait (-1: not timed) against the recorded server time (None: none)
        waited, late = _timed(e.get("wait")), rec.wait_ms or 0.0
        if waits and late and waited is not None and waited < late - WAIT_SLACK_MS:
            early.append(f"{url} (wait {waited:.0f} ms, recorded server time {late:g})")
    out = []
    for what, urls in (
        ("requests to hosts the archive has not", foreign),
        ("unmatched requests", unmatched),
        (f"responses without the {REPLAY_HEADER} header (not from a replay server)", unmarked),
        ("statuses not the archive's", wrong_status),
        ("bodies not the archive's size", wrong_size),
        (f"responses not over {protocol}", wrong_proto),
        ("responses sooner than their recorded server time", early),
    ):
        if urls:
            more = f" and {len(urls) - 3} more" if len(urls) > 3 else ""
            out.append(f"{len(urls)} {what}: {', '.join(urls[:3])}{more}")
    return out
