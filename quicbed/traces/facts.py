"""Per-load facts derived from the transport samples: the same keys for both arms.

:func:`derive` reads one load's rows (base.SAMPLE_COLUMNS, from tcp_probe for h2 and
from qlog for h3) and returns what a reader asks first about a slow load. Every key is
always present; a value that the samples cannot give is None (with a note saying why),
and a load without samples says ``status: "no samples"`` and gives no numbers beyond
the two passed in. Keys:

- ``status`` ("ok" / "no samples"), ``source`` (tcp_probe / qlog), ``samples`` (rows
  of event ``sample``), ``connections``;
- ``ttfb_ms``, ``plt_ms``: as measured by the browser (passed in), and ``ttfb_rtts``:
  ttfb / ``srtt_min_ms``;
- ``page_start_ms``: when the browser started the page, ms after the trace began (the
  driver first blanks the tab and clears caches and connections);
- ``handshake_done_ms``: when the server's handshake was done, ms after the load began
  (QUIC: qlog's ``handshake_complete``; TCP: the client's first data after the server's
  handshake flight, i.e. its TLS Finished, see quicbed.traces.tcp), and
  ``handshake_rtts``: the time from the page's start to then / ``srtt_min_ms``, one
  decimal (from the load's start where the page's start is unknown). It counts round
  trips as the server saw them, so it includes the half round trip of
  the client's first packet and the browser's own start-up: TCP + TLS 1.3 shows about
  2.5, QUIC about 1.5 (0-RTT saves the client's wait, not the server's handshake);
- ``losses``: loss signals. QUIC: packets qlog declared lost; TCP: retransmitted
  segments (``tcp_retransmit_skb``: each is the sender's answer to a loss it detected
  or a timeout, spurious ones included). ``lost_bytes``: their size (QUIC only: the
  TCP tracepoint carries no length). ``retransmissions``: TCP's count (QUIC never
  retransmits a packet, it re-sends lost frames in new ones: None);
- ``spurious_losses``: QUIC packets declared lost that the peer acknowledged after all
  (qlog's ``recovery:spurious_loss``: reordering taken for loss), where the arm's
  server logs them (quic-go; WebServer.logs_spurious_losses), else None. TCP: None
  (tcp_probe does not tell);
- ``first_loss_ms``, ``cwnd_at_first_loss_bytes``, ``in_flight_at_first_loss_bytes``:
  the first loss signal and the last sample of that connection at or before it;
- ``delivered_bytes``: acknowledged over all connections; ``delivery_rate_mean_mbit``:
  that over the span from the first sample to the last increase of ``delivered_bytes``;
  ``delivery_rate_peak_mbit``: the largest rate over any window of at least two
  ``srtt_min_ms`` (and 20 ms: ACKs arrive in bursts, over one RTT a rate reads high)
  between two samples of one connection, leaving out windows
  from a loss signal to two RTTs after it (a cumulative ACK that repairs a loss covers
  the whole recovery at once) where other windows exist;
- ``window_limit``: ``cwnd``, ``rwnd`` or ``app`` (see :data:`SLACK_BYTES` and
  :data:`LIMITED_SHARE`), with ``cwnd_limited_share`` and ``rwnd_limited_share``: the
  shares of the transfer's samples (those with bytes in flight, up to the connection's
  last delivery) at which in_flight >= cwnd - SLACK (rwnd: >= snd_wnd - SLACK; QUIC
  logs no single peer window, so rwnd is not judged there);
- ``max_cwnd_bytes``, ``srtt_min_ms``, ``srtt_max_ms``; ``notes``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

#: how close in_flight must come to a window to call the window the limit: two
#: full-size packets. TCP samples before the ACK is processed (in_flight is the full
#: flight), quic-go after (an ACK of up to two packets has already left the flight)
SLACK_BYTES = 2 * 1500
#: a window is "the limit" when in_flight is at it for at least this share of samples
LIMITED_SHARE = 0.5
#: the shortest window for the peak delivery rate
MIN_RATE_WINDOW_MS = 20.0

KEYS = (
    "status",
    "source",
    "samples",
    "connections",
    "ttfb_ms",
    "plt_ms",
    "ttfb_rtts",
    "handshake_done_ms",
    "page_start_ms",
    "handshake_rtts",
    "losses",
    "lost_bytes",
    "spurious_losses",
    "retransmissions",
    "first_loss_ms",
    "cwnd_at_first_loss_bytes",
    "in_flight_at_first_loss_bytes",
    "delivered_bytes",
    "delivery_rate_mean_mbit",
    "delivery_rate_peak_mbit",
    "window_limit",
    "cwnd_limited_share",
    "rwnd_limited_share",
    "max_cwnd_bytes",
    "srtt_min_ms",
    "srtt_max_ms",
    "notes",
)


def _num(v: Any) -> float | None:
    return None if v is None or v == "" else float(v)


def _mbit(nbytes: float, ms: float) -> float:
    return round(nbytes * 8 / ms / 1000.0, 3)  # bytes per ms -> Mbit/s


def derive(
    samples: list[dict[str, Any]],
    *,
    arm: str,
    ttfb_ms: float | None,
    plt_ms: float | None,
    page_start_ms: float | None = None,
    logs_spurious: bool = False,
) -> dict[str, Any]:
    """The facts of one load (module docstring); ``arm`` names it in the notes.
    ``logs_spurious``: the arm's server writes spurious losses into its qlog, so none
    there means none happened (else ``spurious_losses`` stays None).

    ``page_start_ms``: when the browser started the page (the HAR page's start) on the
    samples' clock. The trace begins when the load command is sent, before the driver
    blanks the tab and clears caches and connections (~90 ms here); handshake round
    trips count from the page's start when it is known.
    """
    out: dict[str, Any] = dict.fromkeys(KEYS)
    out.update(ttfb_ms=ttfb_ms, plt_ms=plt_ms, notes=[])
    rows = sorted(samples, key=lambda r: _num(r.get("t_ms")) or 0.0)
    pts = [r for r in rows if r.get("event") == "sample"]
    if not pts:
        out.update(status="no samples", samples=0)
        out["notes"].append(f"{arm}: no transport samples for this load")
        return out
    sources = sorted({str(r["source"]) for r in pts if r.get("source")})
    out.update(
        status="ok",
        source=",".join(sources),
        samples=len(pts),
        connections=len({r.get("conn") for r in rows}),
    )

    srtts = [v for r in pts if (v := _num(r.get("srtt_ms"))) is not None and v > 0]
    srtt_min = min(srtts) if srtts else None
    if srtts:
        out.update(srtt_min_ms=round(min(srtts), 3), srtt_max_ms=round(max(srtts), 3))
    cwnds = [v for r in pts if (v := _num(r.get("cwnd_bytes"))) is not None]
    out["max_cwnd_bytes"] = int(max(cwnds)) if cwnds else None
    if srtt_min and ttfb_ms is not None:
        out["ttfb_rtts"] = round(ttfb_ms / srtt_min, 1)

    hs = [r for r in rows if r.get("event") == "handshake_done"]
    if hs:
        t = _num(hs[0]["t_ms"])
        out["handshake_done_ms"] = t
        since = t - page_start_ms if t is not None and page_start_ms is not None else t
        out["page_start_ms"] = page_start_ms
        if srtt_min and since is not None:
            out["handshake_rtts"] = round(since / srtt_min, 1)
    else:
        out["notes"].append("no handshake in this load's samples (a reused connection?)")

    lost = [r for r in rows if r.get("event") == "lost"]
    retx = [r for r in rows if r.get("event") == "retransmit"]
    if "qlog" in sources:
        out["losses"] = len(lost)
        sizes = [_num(r.get("bytes")) for r in lost]
        out["lost_bytes"] = int(sum(s for s in sizes if s is not None))
        if any(s is None for s in sizes):
            out["notes"].append(
                "some lost packets' sizes are unknown (their packet_sent was not in the log)"
            )
        if logs_spurious:
            out["spurious_losses"] = sum(r.get("event") == "spurious" for r in rows)
    else:
        out["losses"] = out["retransmissions"] = len(retx)
    signals = lost or retx
    if signals:
        first = signals[0]
        t1 = _num(first["t_ms"]) or 0.0
        out["first_loss_ms"] = t1
        before = [
            r for r in pts if r.get("conn") == first.get("conn") and (_num(r["t_ms"]) or 0.0) <= t1
        ]
        if before:
            out["cwnd_at_first_loss_bytes"] = _int(before[-1].get("cwnd_bytes"))
            out["in_flight_at_first_loss_bytes"] = _int(before[-1].get("in_flight_bytes"))

    loss_times = [t for r in signals if (t := _num(r.get("t_ms"))) is not None]
    _delivery(pts, srtt_min, out, loss_times)
    _limits(pts, out)
    return out


def _int(v: Any) -> int | None:
    n = _num(v)
    return None if n is None else int(n)


def _delivery(
    pts: list[dict[str, Any]],
    srtt_min: float | None,
    out: dict[str, Any],
    losses: list[float] | None = None,
) -> None:
    """Delivered bytes, mean and peak rate. A cumulative ACK that repairs a loss
    acknowledges at once what arrived during the recovery, so windows from a loss
    signal to two RTTs after it are left out of the peak (where others exist)."""
    by_conn: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in pts:
        d, t = _num(r.get("delivered_bytes")), _num(r.get("t_ms"))
        if d is not None and t is not None:
            by_conn[str(r.get("conn"))].append((t, d))
    if not by_conn:
        out["notes"].append("no delivered_bytes in the samples")
        return
    total = 0.0
    start, stop = float("inf"), float("-inf")
    peak = recovery_peak = None
    window = max(2 * (srtt_min or 0.0), MIN_RATE_WINDOW_MS)  # ACKs come in bursts
    for seq in by_conn.values():
        first_t, base = seq[0]
        total += seq[-1][1] - base
        start = min(start, first_t)
        last_inc = max(
            (t for (t, d), (_, dp) in zip(seq[1:], seq[:-1], strict=True) if d > dp), default=None
        )
        if last_inc is not None:
            stop = max(stop, last_inc)
        j = 0
        for t, d in seq:
            while j + 1 < len(seq) and t - seq[j + 1][0] >= window:
                j += 1
            tj, dj = seq[j]
            if t - tj >= window:
                rate = _mbit(d - dj, t - tj)
                if any(t >= lt and tj <= lt + 2 * (srtt_min or 0.0) for lt in losses or ()):
                    recovery_peak = rate if recovery_peak is None else max(recovery_peak, rate)
                    continue
                peak = rate if peak is None else max(peak, rate)
    out["delivered_bytes"] = int(total)
    if stop > start and total > 0:
        out["delivery_rate_mean_mbit"] = _mbit(total, stop - start)
    out["delivery_rate_peak_mbit"] = peak if peak is not None else recovery_peak


def _limits(pts: list[dict[str, Any]], out: dict[str, Any]) -> None:
    """Which window bounded the flight during the transfer (module docstring)."""
    last_inc: dict[str, float] = {}
    prev: dict[str, float] = {}
    for r in pts:
        c, d = str(r.get("conn")), _num(r.get("delivered_bytes"))
        if d is not None and c in prev and d > prev[c]:
            last_inc[c] = _num(r["t_ms"]) or 0.0
        if d is not None:
            prev[c] = d

    def in_transfer(r: dict[str, Any]) -> bool:
        end = last_inc.get(str(r.get("conn")), float("-inf"))
        return (_num(r.get("in_flight_bytes")) or 0) > 0 and (_num(r["t_ms"]) or 0.0) <= end

    transfer = [r for r in pts if in_transfer(r)]
    if not transfer:
        out["notes"].append("no transfer with bytes in flight: window limit not judged")
        return
    cw = [r for r in transfer if _num(r.get("cwnd_bytes")) is not None]
    rw = [r for r in transfer if _num(r.get("snd_wnd_bytes")) is not None]
    cshare = (
        (
            sum(
                1 for r in cw if float(r["in_flight_bytes"]) >= float(r["cwnd_bytes"]) - SLACK_BYTES
            )
            / len(cw)
        )
        if cw
        else None
    )
    rshare = (
        (
            sum(
                1
                for r in rw
                if float(r["in_flight_bytes"]) >= float(r["snd_wnd_bytes"]) - SLACK_BYTES
            )
            / len(rw)
        )
        if rw
        else None
    )
    out["cwnd_limited_share"] = None if cshare is None else round(cshare, 3)
    out["rwnd_limited_share"] = None if rshare is None else round(rshare, 3)
    if rshare is not None and rshare >= LIMITED_SHARE and rshare > (cshare or 0):
        out["window_limit"] = "rwnd"
    elif cshare is not None and cshare >= LIMITED_SHARE:
        out["window_limit"] = "cwnd"
    else:
        out["window_limit"] = "app"
